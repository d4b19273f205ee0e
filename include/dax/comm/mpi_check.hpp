// MPI return codes as dax::Error naming the call (dax's communicators use MPI_ERRORS_RETURN), and
// counts checked to fit MPI's int.
#pragma once

#include <dax/core/mpi.hpp>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include <dax/core/error.hpp>

namespace dax::detail {

inline void mpi_check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail(call, " failed: ", std::string(text, length));
}

/// MPI counts are ints: larger pieces are refused rather than truncated.
inline int mpi_count(int64_t n) {
  DAX_CHECK(n >= 0 && n <= INT_MAX, "MPI transport: a count of ", n,
            " elements exceeds MPI's int limit (", INT_MAX, ")");
  return static_cast<int>(n);
}

inline std::vector<int> mpi_counts(const std::vector<int64_t>& v) {
  std::vector<int> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = mpi_count(v[i]);
  return out;
}

}  // namespace dax::detail
