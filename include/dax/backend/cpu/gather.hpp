// Row gather and scatter-add over a local piece, for take and its gradient. The piece is viewed as
// (outer, rows, inner): `rows` is the indexed dimension, of which this device holds global rows
// [first, first + rows). An id outside that range reads zeros (gather) or adds nothing (scatter):
// on a split table that is the masked lookup whose partial results one all-reduce sums.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace dax::detail::cpu {

/// out[o, j, i] = table[o, ids[j] - first, i] where that row is held, else 0; out is
/// (outer, count, inner).
template <class T, class I>
void gather_rows(const T* table, int64_t outer, int64_t rows, int64_t inner, const I* ids, int64_t count,
                 int64_t first, T* out) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j) {
      const int64_t r = static_cast<int64_t>(ids[j]) - first;
      T* dst = out + (o * count + j) * inner;
      if (r >= 0 && r < rows) std::copy_n(table + (o * rows + r) * inner, inner, dst);
      else std::fill_n(dst, inner, T(0));
    }
}

/// out[o, ids[j] - first, i] += g[o, j, i] for the held rows; out (outer, rows, inner) is zeroed
/// first. Rows are added in the order of j (deterministic).
template <class T, class I>
void scatter_add_rows(const T* g, int64_t outer, int64_t count, int64_t inner, const I* ids, int64_t rows,
                      int64_t first, T* out) {
  std::fill_n(out, outer * rows * inner, T(0));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j) {
      const int64_t r = static_cast<int64_t>(ids[j]) - first;
      if (r < 0 || r >= rows) continue;
      const T* src = g + (o * count + j) * inner;
      T* dst = out + (o * rows + r) * inner;
      for (int64_t i = 0; i < inner; ++i) dst[i] = static_cast<T>(dst[i] + src[i]);
    }
}

}  // namespace dax::detail::cpu
