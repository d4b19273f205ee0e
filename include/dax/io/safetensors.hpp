// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON (space-padded)
// mapping each tensor's name to its dtype ("F32", "BF16", ...), shape and data_offsets [begin, end)
// counted from byte 8 + N, and an optional "__metadata__" object of strings. Parsing checks every
// rule a reader relies on; writing produces the header the safetensors package writes. Pure.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <dax/core/dtype.hpp>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/io/npy.hpp>
#include <dax/io/text_cursor.hpp>

namespace dax::detail::safetensors {

/// Headers longer than this are refused (the safetensors package's own limit is 100 MB).
inline constexpr int64_t max_header_bytes = int64_t(100) << 20;

/// A safetensors dtype: its name in the file, its item size, and dax's element type if it has one.
struct DTypeInfo {
  std::string_view name;
  int64_t item_size;
  std::optional<DType> element;
};

inline const std::vector<DTypeInfo>& dtypes() {
  static const std::vector<DTypeInfo> all{
      {"F64", 8, DType::float64}, {"F32", 4, DType::float32},  {"F16", 2, DType::float16},
      {"BF16", 2, DType::bfloat16}, {"I64", 8, DType::int64},  {"I32", 4, DType::int32},
      {"BOOL", 1, DType::boolean}, {"I16", 2, std::nullopt},   {"I8", 1, std::nullopt},
      {"U64", 8, std::nullopt},    {"U32", 4, std::nullopt},   {"U16", 2, std::nullopt},
      {"U8", 1, std::nullopt},     {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt}};
  return all;
}

inline const DTypeInfo* find_dtype(std::string_view name) {
  for (const auto& d : dtypes())
    if (d.name == name) return &d;
  return nullptr;
}

inline std::string_view dtype_name(DType t) {
  for (const auto& d : dtypes())
    if (d.element == t) return d.name;
  fail("safetensors: ", to_string(t), " has no safetensors dtype");
}

/// A shape as the JSON writes it: [2,3].
inline std::string json_shape(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += cat(i ? "," : "", shape[i]);
  return out + "]";
}

/// One tensor of a file. `begin`/`end` count from the first byte after the header.
struct Tensor {
  std::string name;
  std::string dtype;
  Shape shape;
  int64_t begin = 0, end = 0;
};

struct Header {
  int64_t data_start = 0;  // 8 + N: the byte of the file where data_offsets start counting
  std::vector<Tensor> tensors;  // in the order of their data
  std::map<std::string, std::string> metadata;
};

/// The header length in the first 8 bytes. Errors are phrases that follow the file's name.
inline int64_t header_length(std::string_view first8, int64_t file_size) {
  DAX_CHECK(first8.size() == 8, "is not a safetensors file: it is ", first8.size(),
            " bytes long, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = n * 256 + static_cast<unsigned char>(first8[b]);
  DAX_CHECK(n <= static_cast<uint64_t>(max_header_bytes), "is not a safetensors file: bytes 0-7 give a header of ",
            n, " bytes, more than the ", max_header_bytes, " a safetensors header may have");
  DAX_CHECK(static_cast<int64_t>(n) + 8 <= file_size, "is truncated: bytes 0-7 give a header of ", n,
            " bytes, but the file ends at byte ", file_size);
  return static_cast<int64_t>(n);
}

namespace json {

/// The JSON of a safetensors header: objects, arrays of integers, strings without escapes.
/// Errors name the byte of the file.
class Reader : public io::TextCursor {
 public:
  explicit Reader(std::string_view text) : TextCursor(text, 8, "the header's end") {}
  size_t byte() const { return 8 + pos_; }
  std::string string() { return TextCursor::string("\""); }
  int64_t integer(const char* what) { return digits(what); }
  std::vector<int64_t> integers(const char* what) {
    expect('[', "'['");
    std::vector<int64_t> out;
    if (accept(']')) return out;
    do out.push_back(integer(what));
    while (accept(','));
    expect(']', "',' or ']'");
    return out;
  }
};

}  // namespace json

/// Parses the N header bytes (`text`) of a file of `file_size` bytes and checks every tensor:
/// a known dtype, data_offsets inside the data that match the shape, no two tensors sharing a
/// byte. Throws with a phrase that follows the file's name, naming the entry and the byte.
inline Header parse_header(std::string_view text, int64_t file_size) {
  Header h;
  h.data_start = 8 + static_cast<int64_t>(text.size());
  const int64_t data_size = file_size - h.data_start;
  json::Reader in(text);
  std::map<std::string, size_t> seen;
  try {
    in.expect('{', "'{'");
    if (!in.accept('}')) {
      do {
        in.peek();
        const size_t key_byte = in.byte();
        const std::string name = in.string();
        in.expect(':', "':'");
        DAX_CHECK(seen.emplace(name, key_byte).second, "the entry '", io::printable(name), "' appears twice (byte ",
                  key_byte, ")");
        in.expect('{', "'{'");
        if (name == "__metadata__") {
          if (!in.accept('}')) {
            do {
              const std::string key = in.string();
              in.expect(':', "':'");
              h.metadata[key] = in.string();
            } while (in.accept(','));
            in.expect('}', "',' or '}'");
          }
          continue;
        }
        Tensor t;
        t.name = name;
        bool has_dtype = false, has_shape = false, has_offsets = false;
        size_t offsets_byte = 0;
        std::vector<int64_t> offsets;
        if (!in.accept('}')) {
          do {
            const std::string key = in.string();
            in.expect(':', "':'");
            if (key == "dtype") {
              in.peek();
              const size_t at = in.byte();
              t.dtype = in.string();
              DAX_CHECK(find_dtype(t.dtype), "the entry '", io::printable(name), "' has the unknown dtype \"",
                        io::printable(t.dtype), "\" at byte ", at,
                        " (safetensors dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2)");
              has_dtype = true;
            } else if (key == "shape") {
              t.shape = in.integers("a dimension size");
              has_shape = true;
            } else if (key == "data_offsets") {
              in.peek();
              offsets_byte = in.byte();
              offsets = in.integers("a data offset");
              has_offsets = true;
            } else {
              fail("the entry '", io::printable(name), "' has the unexpected key \"", io::printable(key),
                   "\" before byte ", in.byte(), " (a tensor has dtype, shape and data_offsets)");
            }
          } while (in.accept(','));
          in.expect('}', "',' or '}'");
        }
        DAX_CHECK(has_dtype && has_shape && has_offsets, "the entry '", io::printable(name),
                  "' (byte ", key_byte, ") lacks ", !has_dtype ? "dtype" : !has_shape ? "shape" : "data_offsets");
        DAX_CHECK(offsets.size() == 2, "the entry '", io::printable(name), "' has ", offsets.size(),
                  " data_offsets at byte ", offsets_byte, ", expected [begin, end]");
        t.begin = offsets[0];
        t.end = offsets[1];
        const int64_t bytes = npy::data_bytes(t.shape, find_dtype(t.dtype)->item_size);
        DAX_CHECK(bytes >= 0, "the entry '", io::printable(name), "' has the shape ", json_shape(t.shape),
                  ", too large for 64-bit sizes");
        DAX_CHECK(t.begin <= t.end, "the entry '", io::printable(name), "' has data_offsets [", t.begin, ", ", t.end,
                  "] at byte ", offsets_byte, " that end before they begin");
        DAX_CHECK(t.end - t.begin == bytes, "the entry '", io::printable(name), "' has data_offsets [", t.begin,
                  ", ", t.end, "] at byte ", offsets_byte, " holding ", t.end - t.begin, " bytes, but ", t.dtype,
                  " ", json_shape(t.shape), " takes ", bytes);
        DAX_CHECK(t.end <= data_size, "the entry '", io::printable(name), "' has data_offsets [", t.begin, ", ",
                  t.end, "] at byte ", offsets_byte, " that leave the file: its data would end at byte ",
                  h.data_start + t.end, ", the file ends at byte ", file_size);
        h.tensors.push_back(std::move(t));
      } while (in.accept(','));
      in.expect('}', "',' or '}'");
    }
    if (!in.at_end()) in.unexpected("only spaces after the closing '}'");
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind("the entry", 0) == 0) fail("has a bad safetensors header: ", what);
    fail("has a malformed safetensors header: ", what);
  }
  std::stable_sort(h.tensors.begin(), h.tensors.end(),
                   [](const Tensor& a, const Tensor& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < h.tensors.size(); ++i) {
    const Tensor &a = h.tensors[i - 1], &b = h.tensors[i];
    DAX_CHECK(a.end <= b.begin || a.begin == a.end || b.begin == b.end, "has a bad safetensors header: the entries '",
              io::printable(a.name), "' [", a.begin, ", ", a.end, ") and '", io::printable(b.name), "' [", b.begin,
              ", ", b.end, ") overlap from byte ", h.data_start + b.begin, " of the file");
  }
  return h;
}

/// The header (length, JSON, padding) for `tensors` laid out in order from data offset 0, as the
/// safetensors package writes it: keys sorted, no spaces, padded with spaces to a multiple of 8.
/// Sets each tensor's begin and end.
inline std::string write_header(std::vector<Tensor>& tensors, const std::map<std::string, std::string>& metadata) {
  int64_t at = 0;
  for (auto& t : tensors) {
    t.begin = at;
    at = t.end = at + npy::data_bytes(t.shape, find_dtype(t.dtype)->item_size);
  }
  std::vector<const Tensor*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](const Tensor* a, const Tensor* b) { return a->name < b->name; });
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) json += cat(first ? "" : ",", "\"", k, "\":\"", v, "\""), first = false;
    json += "}";
  }
  for (const Tensor* t : sorted) {
    if (json.size() > 1) json += ",";
    json += cat("\"", t->name, "\":{\"dtype\":\"", t->dtype, "\",\"shape\":", json_shape(t->shape), ",\"data_offsets\":[", t->begin,
                ",", t->end, "]}");
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int b = 0; b < 8; ++b) out[b] = static_cast<char>((json.size() >> (8 * b)) & 0xff);
  return out + json;
}

}  // namespace dax::detail::safetensors
