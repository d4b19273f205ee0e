// dax::Error, the one exception type the library throws, and the check macro that builds its
// messages. Every message says what was expected and what came.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace dax {

/// Every error dax reports derives from this (a std::runtime_error).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// A backend's memory is exhausted (torch.cuda.OutOfMemoryError's counterpart). The caching
/// allocator returns its cache and tries once more only on this error; any other failure of a
/// backend's allocation passes through as it came.
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& what) : Error(what) {}
};

namespace detail {

template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(cat(parts...));
}

template <class... Parts>
[[noreturn]] void fail_out_of_memory(const Parts&... parts) {
  throw OutOfMemoryError(cat(parts...));
}

}  // namespace detail
}  // namespace dax

/// Throws dax::Error with the streamed parts when cond is false.
#define DAX_CHECK(cond, ...)                 \
  do {                                       \
    if (!(cond)) ::dax::detail::fail(__VA_ARGS__); \
  } while (0)
