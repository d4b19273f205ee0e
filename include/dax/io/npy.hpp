// The NumPy .npy format: writing the header NumPy writes (byte for byte, as numpy 1.24's np.save
// does) and parsing any version 1.0-3.0 header strictly. Pure: no MPI, no files.
#pragma once

#include <algorithm>

#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <dax/core/dtype.hpp>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/io/text_cursor.hpp>

namespace dax::detail::npy {

inline constexpr std::string_view magic{"\x93NUMPY", 6};
/// Data starts at a multiple of this (NumPy's ARRAY_ALIGN).
inline constexpr int64_t alignment = 64;
/// NumPy leaves room after the first dimension for it to grow to this many digits in place.
inline constexpr int64_t growth_axis_digits = 21;
/// Headers longer than this are refused when reading (NumPy's own default limit is 10000).
inline constexpr int64_t max_header_bytes = int64_t(1) << 20;

/// The descr NumPy gives dax's element types: byte order ('<' little, '>' big, '|' none), kind,
/// item size.
template <class T>
std::string descr_of() {
  constexpr char order = std::endian::native == std::endian::little ? '<' : '>';
  switch (dtype_v<T>) {
    case DType::float32: return std::string(1, order) + "f4";
    case DType::float64: return std::string(1, order) + "f8";
    case DType::int32: return std::string(1, order) + "i4";
    case DType::int64: return std::string(1, order) + "i8";
    case DType::boolean: return "|b1";
    case DType::float16: return std::string(1, order) + "f2";
    case DType::bfloat16: return "|V2";  // NumPy has no bfloat16: raw 2-byte records (ml_dtypes views them)
    case DType::complex64: return std::string(1, order) + "c8";
    case DType::complex128: return std::string(1, order) + "c16";
  }
  fail("npy: ", to_string(dtype_v<T>), " has no NumPy descr");
}

/// Reverses the byte order of `n` elements in place (data written on a machine of the other
/// endianness): each number's bytes, so the two halves of a complex number each on their own.
template <class T>
void swap_bytes(T* data, int64_t n) {
  constexpr size_t unit = sizeof(detail::real_t<T>);
  auto* bytes = reinterpret_cast<unsigned char*>(data);
  for (int64_t i = 0; i < n * int64_t(sizeof(T) / unit); ++i) std::reverse(bytes + i * unit, bytes + (i + 1) * unit);
}

/// A readable name for a descr in messages: "float32" for '<f4', the descr itself otherwise.
inline std::string descr_name(const std::string& descr) {
  const bool little = std::endian::native == std::endian::little;
  const char native = little ? '<' : '>', foreign = little ? '>' : '<';
  if (descr == "|b1") return "bool";
  if (descr == "|V2") return "bfloat16";
  if ((descr.size() == 3 || descr.size() == 4) && (descr[0] == native || descr[0] == foreign || descr[0] == '=')) {
    const std::string kind = descr.substr(1);
    std::string name;
    if (kind == "f4") name = "float32";
    else if (kind == "f8") name = "float64";
    else if (kind == "f2") name = "float16";
    else if (kind == "i4") name = "int32";
    else if (kind == "i8") name = "int64";
    else if (kind == "i2") name = "int16";
    else if (kind == "u4") name = "uint32";
    else if (kind == "u8") name = "uint64";
    else if (kind == "c8") name = "complex64";
    else if (kind == "c16") name = "complex128";
    if (!name.empty()) return descr[0] == foreign ? name + (little ? ", big-endian" : ", little-endian") : name;
  }
  return "'" + descr + "'";
}

/// The complete header (preamble, dict, padding, newline) NumPy 1.24 writes for a C-order array:
/// version 1.0 unless the dict needs more than 65535 bytes, then 2.0; data starts right after it,
/// at a multiple of 64 bytes.
inline std::string write_header(const std::string& descr, const Shape& shape) {
  // dax's shape text is Python's tuple repr: (), (5,), (2, 3).
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + to_string(shape) + ", }";
  if (!shape.empty()) dict.append(growth_axis_digits - std::to_string(shape[0]).size(), ' ');
  const int64_t hlen = static_cast<int64_t>(dict.size()) + 1;  // with the final newline
  const bool v1 = hlen + alignment - (10 + hlen) % alignment <= 65535;
  const int64_t preamble = v1 ? 10 : 12;
  const int64_t pad = alignment - (preamble + hlen) % alignment;  // NumPy pads 64 when aligned already
  const int64_t length = hlen + pad;
  std::string out(magic);
  out += static_cast<char>(v1 ? 1 : 2);
  out += '\0';
  for (int b = 0; b < (v1 ? 2 : 4); ++b) out += static_cast<char>((length >> (8 * b)) & 0xff);
  out += dict;
  out.append(pad, ' ');
  out += '\n';
  return out;
}

/// What a header says.
struct Header {
  int major = 1, minor = 0;
  std::string descr;
  bool fortran_order = false;
  Shape shape;
  int64_t data_offset = 0;  // bytes before the data: preamble + dict
};

using io::printable;

/// The preamble: magic, version, dict length. Throws (phrases that follow a file's name) when the
/// bytes cannot start a .npy file. Returns the header's total length (preamble + dict).
inline int64_t header_length(std::string_view bytes, int* major = nullptr, int* minor = nullptr) {
  const std::string_view head = bytes.substr(0, magic.size());
  if (head != magic)
    fail("is not a .npy file: expected the magic string \\x93NUMPY, found \"", printable(head), "\"",
         head.size() < magic.size() ? " (the whole file)" : "");
  DAX_CHECK(bytes.size() >= 8, "is not a .npy file: it ends after ", bytes.size(),
            " bytes, inside the .npy preamble");
  const int ma = static_cast<unsigned char>(bytes[6]), mi = static_cast<unsigned char>(bytes[7]);
  DAX_CHECK((ma == 1 || ma == 2 || ma == 3) && mi == 0, "has .npy format version ", ma, ".", mi,
            "; dax reads versions 1.0, 2.0 and 3.0");
  const int64_t width = ma == 1 ? 2 : 4;
  DAX_CHECK(static_cast<int64_t>(bytes.size()) >= 8 + width, "is not a .npy file: it ends after ", bytes.size(),
            " bytes, inside the .npy preamble");
  int64_t length = 0;
  for (int64_t b = width; b-- > 0;) length = length * 256 + static_cast<unsigned char>(bytes[8 + b]);
  DAX_CHECK(length <= max_header_bytes, "has a .npy header of ", length, " bytes; dax reads headers of up to ",
            max_header_bytes);
  if (major) *major = ma;
  if (minor) *minor = mi;
  return 8 + width + length;
}

namespace parse {

// A strict reader of the Python literal NumPy writes: a dict of str keys to str, bool and int-tuple
// values. Errors are phrases for "has a malformed .npy header: ...".
class Reader : public io::TextCursor {
 public:
  /// `text` is the dict; `base` its offset in the file (messages count bytes from the file's start).
  Reader(std::string_view text, size_t base) : TextCursor(text, base, "the header's end") {}

  std::string string() { return TextCursor::string("'\""); }
  bool boolean() {
    skip_space();
    for (const bool value : {true, false}) {
      const std::string_view word = value ? "True" : "False";
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    unexpected("True or False");
  }
  int64_t integer() {
    const int64_t v = digits("a dimension size");
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 longs in old files
    return v;
  }
  Shape tuple() {
    expect('(', "a shape tuple");
    Shape shape;
    if (accept(')')) return shape;
    while (true) {
      shape.push_back(integer());
      if (accept(')')) {
        DAX_CHECK(shape.size() != 1, "a one-element shape tuple needs a trailing comma: (", shape[0], ",)");
        return shape;
      }
      expect(',', "',' or ')' in the shape");
      if (accept(')')) return shape;
    }
  }
};

}  // namespace parse

/// Parses a complete header (`bytes` holds at least header_length(bytes) bytes). Throws dax::Error
/// with a phrase that follows a file's name ("is not a .npy file: ...", "has a malformed .npy
/// header: ...").
inline Header parse_header(std::string_view bytes) {
  Header h;
  const int64_t total = header_length(bytes, &h.major, &h.minor);
  DAX_CHECK(static_cast<int64_t>(bytes.size()) >= total, "is truncated: its .npy header is ", total,
            " bytes long but the file ends after ", bytes.size());
  h.data_offset = total;
  const int64_t preamble = h.major == 1 ? 10 : 12;
  const std::string_view dict = bytes.substr(preamble, total - preamble);
  try {
    parse::Reader in(dict, static_cast<size_t>(preamble));
    bool seen_descr = false, seen_order = false, seen_shape = false;
    in.expect('{', "'{'");
    while (!in.accept('}')) {
      const std::string key = in.string();
      in.expect(':', "':'");
      auto once = [&](bool& seen) {
        DAX_CHECK(!seen, "the key '", key, "' appears twice");
        seen = true;
      };
      if (key == "descr") {
        once(seen_descr);
        h.descr = in.string();
      } else if (key == "fortran_order") {
        once(seen_order);
        h.fortran_order = in.boolean();
      } else if (key == "shape") {
        once(seen_shape);
        h.shape = in.tuple();
      } else {
        fail("unexpected key '", printable(key), "' (a .npy header has exactly 'descr', 'fortran_order' and 'shape')");
      }
      if (in.accept('}')) break;
      in.expect(',', "',' or '}'");
    }
    if (!in.at_end()) in.unexpected("only spaces after the closing '}'");
    DAX_CHECK(seen_descr, "the key 'descr' is missing");
    DAX_CHECK(seen_order, "the key 'fortran_order' is missing");
    DAX_CHECK(seen_shape, "the key 'shape' is missing");
  } catch (const Error& e) {
    fail("has a malformed .npy header: ", e.what());
  }
  return h;
}

/// The bytes of the data a header describes, or -1 if they overflow 64 bits.
inline int64_t data_bytes(const Shape& shape, int64_t item_size) {
  int64_t n = item_size;
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

}  // namespace dax::detail::npy
