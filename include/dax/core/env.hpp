// Reading dax's on/off environment switches: a feature that is on by default is turned off by
// setting its variable to "0" (DAX_HUGE_PAGES, DAX_CMA, DAX_PEER_WRITES, DAX_CHECK_BOARD).
#pragma once

#include <cstdlib>
#include <cstring>

namespace dax::detail {

/// Whether the environment variable `name` is set to "0".
inline bool env_turned_off(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "0") == 0;
}

}  // namespace dax::detail
