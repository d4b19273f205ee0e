// argmax/argmin on the GPU: the best element along one dimension of a local piece, seen as
// (outer, len, inner) row-major. Same contract as backend/cpu/arg_reduce.hpp, and the same answers:
// prefers() ranks the elements, and parts of a line combine by beats() (the lowest index on ties).
#pragma once

#include <cuda_runtime.h>

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
    const int64_t oi = shuffle_down(i, by);
    if (beats(better, ov, oi, v, i)) v = ov, i = oi;
  }
}

// Contiguous lines (inner == 1), RowThreads threads per line: a warp (32) for lines of a few
// thousand elements, the whole block (256) for longer ones. Each thread reads packs of V elements
// (16 bytes when the lines are aligned for it, four packs in flight), q = lane, lane + RowThreads,
// ..., and scans them in order, keeping its first best; the warp and then the block combine by
// beats(), so ties keep the first index. Values travel in compute_t<T> (float for the 16-bit
// types: exact both ways).
template <int RowThreads, int V, class T, class Better>
__global__ void arg_reduce_lines_kernel(const T* in, int64_t lines, int64_t len, Better better, T* value,
                                        int64_t* index) {
  using C = compute_t<T>;
  constexpr int kWarps = RowThreads / 32;
  constexpr int kInFlight = 4;
  __shared__ C warp_value[kWarps > 1 ? kWarps : 1];
  __shared__ int64_t warp_index[kWarps > 1 ? kWarps : 1];
  const int per_block = blockDim.x / RowThreads;
  const int lane = threadIdx.x % RowThreads;
  const int64_t packs = len / V;  // V divides len (the host picks V so)
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * per_block; first < lines;
       first += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t line = first + threadIdx.x / RowThreads;
    C v{};
    int64_t i = -1;
    const auto consider = [&](const Pack<T, V>& x, int64_t q) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const C c = static_cast<C>(x.v[e]);
        if (i < 0 || prefers(better, c, v)) v = c, i = q * V + e;
      }
    };
    if (line < lines) {
      const T* row = in + line * len;
      int64_t q = lane;
      for (; q + (kInFlight - 1) * RowThreads < packs; q += kInFlight * RowThreads) {
        Pack<T, V> x[kInFlight];
#pragma unroll
        for (int u = 0; u < kInFlight; ++u) x[u] = load_pack<T, V>(row + (q + u * RowThreads) * V);
#pragma unroll
        for (int u = 0; u < kInFlight; ++u) consider(x[u], q + u * RowThreads);
      }
      for (; q < packs; q += RowThreads) consider(load_pack<T, V>(row + q * V), q);
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

/// Launches the line kernel with RowThreads threads per line, 16-byte packs where the lines allow.
template <int RowThreads, class T, class Better>
void launch_lines(const T* in, int64_t lines, int64_t len, Better better, T* value, int64_t* index) {
  constexpr int V = pack_width<T>;
  const dim3 grid = grid_blocks(lines, block_threads / RowThreads);
  const cudaStream_t stream = context().stream();
  if (V > 1 && aligned_for<T, V>(in) && len % V == 0) {
    arg_reduce_lines_kernel<RowThreads, V><<<grid, block_threads, 0, stream>>>(in, lines, len, better, value, index);
  } else {
    arg_reduce_lines_kernel<RowThreads, 1><<<grid, block_threads, 0, stream>>>(in, lines, len, better, value, index);
  }
  check_launch("arg_reduce_lines_kernel");
}

/// Queued on the stream; `better` is copied to the GPU (a trivially copyable DAX_HOST_DEVICE functor).
template <class T, class Better>
void arg_reduce(const T* in, int64_t outer, int64_t len, int64_t inner, Better better, T* value, int64_t* index) {
  static_assert(std::is_trivially_copyable_v<Better>, "arg_reduce: the functor is copied to the GPU by value");
  const int64_t count = outer * inner;
  if (count == 0) return;
  if (inner == 1 && len >= 64) {
    if (len >= 4096) {
      launch_lines<block_threads>(in, outer, len, better, value, index);  // a block per line
    } else {
      launch_lines<32>(in, outer, len, better, value, index);  // a warp per line
    }
    return;
  }
  const cudaStream_t stream = context().stream();
  arg_reduce_kernel<<<grid_blocks(count), block_threads, 0, stream>>>(in, outer, len, inner, better, value, index);
  check_launch("arg_reduce_kernel");
}

}  // namespace dax::detail::cuda
