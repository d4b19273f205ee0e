// The order argmax / argmin rank elements by, shared by both backends' kernels and by the
// combination of several devices' winners: `better` (Greater or Less), except that a NaN is
// preferred to every number, as NumPy and JAX do (the first NaN is the answer). With NaNs all
// equal and above the rest, the order is a strict weak order: any split of a line into parts, each
// keeping its best (the lowest index on ties), combines into the answer of one scan in order.
#pragma once

#include <cstdint>

#include <dax/core/float16.hpp>
#include <dax/core/macros.hpp>

namespace dax::detail {

/// Whether `a` ranks above `b`.
template <class T, class Better>
DAX_HOST_DEVICE bool prefers(const Better& better, T a, T b) {
  if constexpr (is_floating_v<T>) {
    const auto x = static_cast<compute_t<T>>(a), y = static_cast<compute_t<T>>(b);
    const bool x_nan = x != x, y_nan = y != y;
    if (x_nan || y_nan) return x_nan && !y_nan;
  }
  return better(a, b);
}

/// Whether the candidate (`a`, at index `ia`) beats (`b`, at `ib`): ranks above it, or ties with it at
/// a lower index. An index below 0 marks an empty candidate, which never wins.
template <class T, class Better>
DAX_HOST_DEVICE bool beats(const Better& better, T a, int64_t ia, T b, int64_t ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  if (prefers(better, a, b)) return true;
  if (prefers(better, b, a)) return false;
  return ia < ib;
}

}  // namespace dax::detail
