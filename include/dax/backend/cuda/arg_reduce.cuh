// argmax/argmin on the GPU: the best element along one dimension of a local piece, seen as
// (outer, len, inner) row-major. Same contract as backend/cpu/arg_reduce.hpp, and the same answers:
// prefers() ranks the elements, and parts of a line combine by beats() (the lowest index on ties).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <dax/backend/arg_prefers.hpp>
#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/vector_access.cuh>

namespace dax::detail::cuda {

// One thread per output, scanning its line in order; neighbouring threads take neighbouring i and
// read neighbouring elements when inner > 1. The general case, and short lines.
template <class T, class Better>
__global__ void arg_reduce_kernel(const T* in, int64_t outer, int64_t len, int64_t inner, Better better, T* value,
                                  int64_t* index) {
  for (int64_t w = grid_first(); w < outer * inner; w += grid_step()) {
    const int64_t o = w / inner, i = w - o * inner;
    const T* row = in + o * len * inner + i;
    int64_t best = len > 0 ? 0 : -1;
    for (int64_t j = 1; j < len; ++j)
      if (prefers(better, row[j * inner], row[best * inner])) best = j;
    index[w] = best;
    value[w] = best >= 0 ? row[best * inner] : T();
  }
}

/// Folds the warp's candidates into lane 0's (the other lanes keep partial results).
template <class C, class Better>
__device__ void warp_best(const Better& better, C& v, int64_t& i) {
  for (int by = 16; by > 0; by /= 2) {
    const C ov = shuffle_down(v, by);
    const int64_t oi = __shfl_down_sync(0xffffffffu, i, by);
    if (beats(better, ov, oi, v, i)) v = ov, i = oi;
  }
}

// Contiguous lines (inner == 1), RowThreads threads per line: a warp (32) for lines of a few
// thousand elements, the whole block (256) for longer ones. Each thread scans its elements in
// order, j = lane, lane + RowThreads, ... (neighbouring threads read neighbouring elements), keeping
// its first best; the warp and then the block combine by beats(), so ties keep the first index.
// Values travel in compute_t<T> (float for the 16-bit types: exact both ways).
template <int RowThreads, class T, class Better>
__global__ void arg_reduce_lines_kernel(const T* in, int64_t lines, int64_t len, Better better, T* value,
                                        int64_t* index) {
  using C = compute_t<T>;
  constexpr int kWarps = RowThreads / 32;
  __shared__ C warp_value[kWarps > 1 ? kWarps : 1];
  __shared__ int64_t warp_index[kWarps > 1 ? kWarps : 1];
  const int per_block = blockDim.x / RowThreads;
  const int lane = threadIdx.x % RowThreads;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * per_block; first < lines;
       first += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t line = first + threadIdx.x / RowThreads;
    C v{};
    int64_t i = -1;
    if (line < lines) {
      const T* row = in + line * len;
      for (int64_t j = lane; j < len; j += RowThreads) {
        const C x = static_cast<C>(row[j]);
        if (i < 0 || prefers(better, x, v)) v = x, i = j;
      }
    }
    warp_best(better, v, i);
    if constexpr (kWarps > 1) {
      const int warp = lane / 32;
      if (lane % 32 == 0) warp_value[warp] = v, warp_index[warp] = i;
      __syncthreads();
      if (warp == 0) {
        v = lane < kWarps ? warp_value[lane] : C{};
        i = lane < kWarps ? warp_index[lane] : -1;
        warp_best(better, v, i);
      }
      __syncthreads();  // the shared slots are free for the next line
    }
    if (lane == 0 && line < lines) {
      index[line] = i;
      value[line] = static_cast<T>(v);
    }
  }
}

/// Queued on the stream; `better` is copied to the GPU (a trivially copyable DAX_HOST_DEVICE functor).
template <class T, class Better>
void arg_reduce(const T* in, int64_t outer, int64_t len, int64_t inner, Better better, T* value, int64_t* index) {
  static_assert(std::is_trivially_copyable_v<Better>, "arg_reduce: the functor is copied to the GPU by value");
  const int64_t count = outer * inner;
  if (count == 0) return;
  const cudaStream_t stream = context().stream();
  if (inner == 1 && len >= 64) {
    if (len >= 4096) {  // a block per line
      arg_reduce_lines_kernel<block_threads><<<grid_blocks(outer, 1), block_threads, 0, stream>>>(in, outer, len, better,
                                                                                                  value, index);
    } else {  // a warp per line
      arg_reduce_lines_kernel<32><<<grid_blocks(outer, block_threads / 32), block_threads, 0, stream>>>(
          in, outer, len, better, value, index);
    }
    check_launch("arg_reduce_lines_kernel");
    return;
  }
  arg_reduce_kernel<<<grid_blocks(count), block_threads, 0, stream>>>(in, outer, len, inner, better, value, index);
  check_launch("arg_reduce_kernel");
}

}  // namespace dax::detail::cuda
