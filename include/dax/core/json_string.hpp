// A string as a JSON string literal, for the JSON dax writes (profiles, simulation reports, the
// stats file): quotes and backslashes escaped, control characters as spaces.
#pragma once

#include <string>

namespace dax::detail {

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

}  // namespace dax::detail
