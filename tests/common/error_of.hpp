// What a call throws, as text: the tests compare dax::Error messages exactly.
#pragma once

#include <string>

#include <dax/core/error.hpp>

namespace dax::test {

/// Runs `f` and returns the dax::Error message it threw ("(no error)" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const dax::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace dax::test
