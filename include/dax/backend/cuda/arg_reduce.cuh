// argmax/argmin on the GPU: the best element along one dimension of a local piece, seen as
// (outer, len, inner) row-major. Same contract as backend/cpu/arg_reduce.hpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include <dax/backend/cuda/device.cuh>

namespace dax::detail::cuda {

// One thread per output, scanning its line in order (so ties keep the first index, as on the
// CPU); neighbouring threads take neighbouring i and read neighbouring elements when inner > 1.
template <class T, class Better>
__global__ void arg_reduce_kernel(const T* in, int64_t outer, int64_t len, int64_t inner, Better better, T* value,
                                  int64_t* index) {
  for (int64_t w = grid_first(); w < outer * inner; w += grid_step()) {
    const int64_t o = w / inner, i = w - o * inner;
    const T* row = in + o * len * inner + i;
    int64_t best = len > 0 ? 0 : -1;
    for (int64_t j = 1; j < len; ++j)
      if (better(row[j * inner], row[best * inner])) best = j;
    index[w] = best;
    value[w] = best >= 0 ? row[best * inner] : T();
  }
}

/// Queued on the stream; `better` is copied to the GPU (a trivially copyable DAX_HOST_DEVICE functor).
template <class T, class Better>
void arg_reduce(const T* in, int64_t outer, int64_t len, int64_t inner, Better better, T* value, int64_t* index) {
  static_assert(std::is_trivially_copyable_v<Better>, "arg_reduce: the functor is copied to the GPU by value");
  const int64_t count = outer * inner;
  if (count == 0) return;
  arg_reduce_kernel<<<grid_blocks(count), block_threads, 0, context().stream()>>>(in, outer, len, inner, better,
                                                                                   value, index);
  check_launch("arg_reduce_kernel");
}

}  // namespace dax::detail::cuda
