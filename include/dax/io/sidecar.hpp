// The sidecar dax writes beside each .npy checkpoint (`<path>.dax`, one line of JSON): format,
// dtype, shape, sizes and the checksum of io/checksum.hpp. Pure: no MPI, no files.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/io/checksum.hpp>
#include <dax/io/npy.hpp>
#include <dax/io/text_cursor.hpp>

namespace dax::detail::checkpoint {

/// A checksum as 16 lowercase hex digits.
inline std::string hex64(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[i] = digits[v & 15];
  return out;
}

inline constexpr std::string_view sidecar_format = "dax.checkpoint";
inline constexpr int sidecar_version = 1;
inline constexpr std::string_view checksum_kind = "sum-mix64";

/// What the sidecar records about its .npy file.
struct Sidecar {
  std::string descr;         // NumPy's, as in the header ('<f4')
  Shape shape;
  int64_t header_bytes = 0;  // where the data starts
  int64_t data_bytes = 0;
  uint64_t checksum = 0;
  friend bool operator==(const Sidecar&, const Sidecar&) = default;
};

/// The sidecar's text: one JSON object on one line.
inline std::string sidecar_text(const Sidecar& s) {
  std::string shape = "[";
  for (size_t i = 0; i < s.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(s.shape[i]);
  shape += "]";
  return cat("{\"format\": \"", sidecar_format, "\", \"version\": ", sidecar_version, ", \"dtype\": \"",
             npy::descr_name(s.descr), "\", \"descr\": \"", s.descr, "\", \"shape\": ", shape,
             ", \"header_bytes\": ", s.header_bytes, ", \"data_bytes\": ", s.data_bytes, ", \"checksum_kind\": \"",
             checksum_kind, "\", \"checksum\": \"", hex64(s.checksum), "\"}\n");
}

namespace json {

// A reader of the flat JSON objects sidecar_text writes: string keys; string, integer and
// integer-array values. Errors are phrases for "is malformed: ...".
class Reader : public io::TextCursor {
 public:
  explicit Reader(std::string_view text) : TextCursor(text, 0, "the end") {}

  std::string string() { return TextCursor::string("\""); }
  int64_t integer() {
    const bool negative = accept('-');
    const int64_t v = digits("a number");
    return negative ? -v : v;
  }
  std::vector<int64_t> integers() {
    expect('[', "'['");
    std::vector<int64_t> out;
    if (accept(']')) return out;
    do out.push_back(integer());
    while (accept(','));
    expect(']', "',' or ']'");
    return out;
  }
};

}  // namespace json

/// Parses a sidecar's text; throws dax::Error with a phrase for "is malformed: ...". Keys it does
/// not know are skipped (strings, numbers or arrays), so later versions may add some.
inline Sidecar parse_sidecar(std::string_view text) {
  json::Reader in(text);
  Sidecar s;
  std::string format, kind, checksum;
  int64_t version = -1;
  bool has_descr = false, has_shape = false, has_header = false, has_data = false;
  in.expect('{', "'{'");
  if (!in.accept('}')) {
    do {
      const std::string key = in.string();
      in.expect(':', "':'");
      if (key == "format") format = in.string();
      else if (key == "version") version = in.integer();
      else if (key == "descr") s.descr = in.string(), has_descr = true;
      else if (key == "shape") s.shape = in.integers(), has_shape = true;
      else if (key == "header_bytes") s.header_bytes = in.integer(), has_header = true;
      else if (key == "data_bytes") s.data_bytes = in.integer(), has_data = true;
      else if (key == "checksum_kind") kind = in.string();
      else if (key == "checksum") checksum = in.string();
      else if (in.peek() == '"') in.string();
      else if (in.peek() == '[') in.integers();
      else in.integer();
    } while (in.accept(','));
    in.expect('}', "',' or '}'");
  }
  DAX_CHECK(in.at_end(), "unexpected text after the closing '}'");
  DAX_CHECK(format == sidecar_format, "its format is \"", io::printable(format), "\", expected \"", sidecar_format,
            "\"");
  DAX_CHECK(version == sidecar_version, "its version is ", version, ", expected ", sidecar_version);
  DAX_CHECK(has_descr, "it has no \"descr\"");
  DAX_CHECK(has_shape, "it has no \"shape\"");
  for (int64_t d : s.shape) DAX_CHECK(d >= 0, "its shape has a negative dimension");
  DAX_CHECK(has_header && has_data, "it has no \"header_bytes\" or \"data_bytes\"");
  DAX_CHECK(kind == checksum_kind, "its checksum kind is \"", io::printable(kind), "\", expected \"",
            checksum_kind, "\"");
  DAX_CHECK(checksum.size() == 16 && checksum.find_first_not_of("0123456789abcdef") == std::string::npos,
            "its checksum \"", io::printable(checksum), "\" is not 16 lowercase hex digits");
  for (char c : checksum) s.checksum = s.checksum * 16 + static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  return s;
}

}  // namespace dax::detail::checkpoint
