// MPI return codes as dax::Error naming the call (dax's communicators use MPI_ERRORS_RETURN).
#pragma once

#include <mpi.h>

#include <string>

#include <dax/core/error.hpp>

namespace dax::detail {

inline void mpi_check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail(call, " failed: ", std::string(text, length));
}

}  // namespace dax::detail
