// Row gather and scatter-add on the GPU, for take and its gradient: the contract of
// backend/cpu/gather.hpp. The scatter is deterministic: one thread per output element sums, in
// the order of j, the cotangent rows whose id names its row (no atomics, so the same bits on
// every run, for every element type).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <dax/backend/cuda/device.cuh>
#include <dax/core/float16.hpp>

namespace dax::detail::cuda {

template <class T, class I>
__global__ void gather_rows_kernel(const T* table, int64_t rows, int64_t inner, const I* ids, int64_t count,
                                   int64_t first, T* out, int64_t total) {
  for (int64_t k = grid_first(); k < total; k += grid_step()) {
    const int64_t i = k % inner, j = (k / inner) % count, o = k / (inner * count);
    const int64_t r = static_cast<int64_t>(ids[j]) - first;
    out[k] = (r >= 0 && r < rows) ? table[(o * rows + r) * inner + i] : T(0);
  }
}

template <class T, class I>
__global__ void scatter_add_rows_kernel(const T* g, int64_t count, int64_t inner, const I* ids, int64_t rows,
                                        int64_t first, T* out, int64_t total) {
  using C = compute_t<T>;
  for (int64_t k = grid_first(); k < total; k += grid_step()) {
    const int64_t i = k % inner, r = (k / inner) % rows, o = k / (inner * rows);
    C acc = C(0);
    for (int64_t j = 0; j < count; ++j)
      if (static_cast<int64_t>(ids[j]) - first == r) acc += static_cast<C>(g[(o * count + j) * inner + i]);
    out[k] = static_cast<T>(acc);
  }
}

/// out[o, j, i] = table[o, ids[j] - first, i] where held, else 0. Queued on the stream.
template <class T, class I>
void gather_rows(const T* table, int64_t outer, int64_t rows, int64_t inner, const I* ids, int64_t count,
                 int64_t first, T* out) {
  const int64_t total = outer * count * inner;
  if (total == 0) return;
  gather_rows_kernel<<<grid_blocks(total), block_threads, 0, context().stream()>>>(table, rows, inner, ids, count,
                                                                                  first, out, total);
  check_launch("gather_rows_kernel");
}

/// out[o, r, i] = sum over j with ids[j] - first == r of g[o, j, i]. Queued on the stream.
template <class T, class I>
void scatter_add_rows(const T* g, int64_t outer, int64_t count, int64_t inner, const I* ids, int64_t rows,
                      int64_t first, T* out) {
  const int64_t total = outer * rows * inner;
  if (total == 0) return;
  scatter_add_rows_kernel<<<grid_blocks(total), block_threads, 0, context().stream()>>>(g, count, inner, ids, rows,
                                                                                       first, out, total);
  check_launch("scatter_add_rows_kernel");
}

}  // namespace dax::detail::cuda
