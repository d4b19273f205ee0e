// The two reductions that nearly every program runs, each one pass of a kernel written for its
// memory layout (backend/cuda/reduce.cuh plans the passes and falls back to a general kernel for
// the rest):
//   rows:    a (rows, length) row-major piece folded along its last dimension (a sum over the
//            last dimension, or over everything as one row): a block per row (or part of a
//            row), or a warp per row where there are many rows of at most 4096 elements,
//            16-byte loads, four in flight per thread, a warp-shuffle tree at the end;
//   columns: a (length, width) row-major piece folded along its first dimension (a sum over the
//            batch): a thread per group of V neighbouring columns, 16-byte loads along the row,
//            four rows in flight.
// Deterministic like the general kernels: every element's place in the fold follows from the
// shape alone (the vector width included, which the pointer's alignment decides), never timing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/vector_access.cuh>

namespace dax::detail::cuda {

#if defined(__CUDACC__)
/// acc = op(acc, x), or acc = x for a thread's first element.
template <class Acc, class Op>
__device__ inline void fold_in(Acc& acc, bool& has, const Acc& x, Op& op) {
  acc = has ? op(acc, x) : x;
  has = true;
}

/// The block's fold of its threads' values, in thread order, where threads [0, valid) hold one:
/// a shuffle tree inside each warp, then over the warps' results in warp 0. Thread 0 gets the
/// result. `scratch` holds 32 Acc in shared memory; the caller syncs before reusing it.
template <class Acc, class Op>
__device__ inline Acc block_fold(Acc acc, int valid, Op& op, Acc* scratch) {
  const int t = static_cast<int>(threadIdx.x), lane = t & 31, warp = t >> 5;
  for (int off = 16; off > 0; off >>= 1) {
    const Acc other = shuffle_down(acc, off);
    if (lane + off < 32 && t + off < valid) acc = op(acc, other);
  }
  if (lane == 0 && t < valid) scratch[warp] = acc;
  __syncthreads();
  const int warps_valid = (valid + 31) / 32;
  if (warp == 0) {
    if (lane < warps_valid) acc = scratch[lane];
    for (int off = 16; off > 0; off >>= 1) {
      const Acc other = shuffle_down(acc, off);
      if (lane + off < warps_valid) acc = op(acc, other);
    }
  }
  return acc;
}

/// The warp's fold of its lanes' values, in lane order, where lanes [0, valid) hold one; lane 0
/// gets the result.
template <class Acc, class Op>
__device__ inline Acc warp_fold(Acc acc, int valid, Op& op) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  for (int off = 16; off > 0; off >>= 1) {
    const Acc other = shuffle_down(acc, off);
    if (lane + off < valid) acc = op(acc, other);
  }
  return acc;
}

/// Many medium rows (a layer norm's mean over 768 features, 8192 tokens): a warp per row, lane l
/// taking packs l, l + 32, ... of V elements, four in flight, then a shuffle tree; no block-wide
/// barrier. out[j] = op(out[j], fold of row j).
template <int V, class In, class Acc, class Op>
__global__ void __launch_bounds__(block_threads)
    reduce_rows_warp_kernel(const In* in, int64_t rows, int64_t length, Acc* out, Op op) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t packs = length / V;
  for (int64_t j = grid_first() / 32; j < rows; j += grid_step() / 32) {
    const In* row = in + j * length;
    Acc acc{};
    bool has = false;
    int64_t q = lane;
    for (; q + 3 * 32 < packs; q += 4 * 32) {
      Pack<In, V> x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) x[u] = load_pack<In, V>(row + (q + u * 32) * V);
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int e = 0; e < V; ++e) fold_in(acc, has, static_cast<Acc>(x[u].v[e]), op);
    }
    for (; q < packs; q += 32) {
      const Pack<In, V> x = load_pack<In, V>(row + q * V);
#pragma unroll
      for (int e = 0; e < V; ++e) fold_in(acc, has, static_cast<Acc>(x.v[e]), op);
    }
    acc = warp_fold(acc, static_cast<int>(packs < 32 ? packs : 32), op);
    if (lane == 0) out[j] = op(out[j], acc);
  }
}

/// Item w = (row j, part p), w = p * rows + j, folds elements [p chunk, min((p + 1) chunk, length))
/// of row j. Thread t takes packs t, t + T, t + 2T, ... of V elements (chunk and length multiples
/// of V when V > 1). Accumulate: out[j] = op(out[j], fold); else partial[j * parts + p] = fold, a
/// (rows, parts) array whose rows the next pass folds.
template <bool Accumulate, int V, class In, class Acc, class Op>
__global__ void __launch_bounds__(block_threads)
    reduce_rows_kernel(const In* in, int64_t rows, int64_t length, int64_t chunk, int64_t parts, Acc* out, Op op) {
  __shared__ alignas(Acc) unsigned char storage[32 * sizeof(Acc)];
  Acc* scratch = reinterpret_cast<Acc*>(storage);
  constexpr int T = block_threads;
  const int t = static_cast<int>(threadIdx.x);
  for (int64_t w = blockIdx.x; w < rows * parts; w += gridDim.x) {
    const int64_t p = w / rows, j = w - p * rows;
    const int64_t begin = p * chunk, count = (length - begin < chunk ? length - begin : chunk);
    const In* row = in + j * length + begin;
    const int64_t packs = count / V;
    Acc acc{};
    bool has = false;
    int64_t q = t;
    for (; q + 3 * T < packs; q += 4 * T) {
      Pack<In, V> x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) x[u] = load_pack<In, V>(row + (q + u * T) * V);
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int e = 0; e < V; ++e) fold_in(acc, has, static_cast<Acc>(x[u].v[e]), op);
    }
    for (; q < packs; q += T) {
      const Pack<In, V> x = load_pack<In, V>(row + q * V);
#pragma unroll
      for (int e = 0; e < V; ++e) fold_in(acc, has, static_cast<Acc>(x.v[e]), op);
    }
    acc = block_fold(acc, static_cast<int>(packs < T ? packs : T), op, scratch);
    if (t == 0) {
      if constexpr (Accumulate) {
        out[j] = op(out[j], acc);
      } else {
        out[j * parts + p] = acc;
      }
    }
    __syncthreads();  // scratch is read before the next item's warps write it
  }
}

/// Short rows (length <= 64): a thread per row, folding its elements in order.
template <class In, class Acc, class Op>
__global__ void reduce_short_rows_kernel(const In* in, int64_t rows, int64_t length, Acc* out, Op op) {
  for (int64_t j = grid_first(); j < rows; j += grid_step()) {
    const In* row = in + j * length;
    Acc acc = static_cast<Acc>(row[0]);
    for (int64_t r = 1; r < length; ++r) acc = op(acc, static_cast<Acc>(row[r]));
    out[j] = op(out[j], acc);
  }
}

/// Item w = (part p, column group g), w = p * groups + g, folds rows [p chunk, min((p + 1) chunk,
/// length)) of columns [g V, g V + V). Accumulate: out[c] = op(out[c], fold); else
/// partial[p * width + c] = fold, a (parts, width) array whose columns the next pass folds.
template <bool Accumulate, int V, class In, class Acc, class Op>
__global__ void reduce_columns_kernel(const In* in, int64_t length, int64_t width, int64_t chunk, int64_t parts, Acc* out,
                                      Op op) {
  const int64_t groups = width / V;
  for (int64_t w = grid_first(); w < groups * parts; w += grid_step()) {
    const int64_t p = w / groups, g = w - p * groups;
    const int64_t begin = p * chunk, end = (begin + chunk < length ? begin + chunk : length);
    const In* col = in + g * V;
    Acc acc[V];
    {
      const Pack<In, V> x = load_pack<In, V>(col + begin * width);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = static_cast<Acc>(x.v[e]);
    }
    int64_t r = begin + 1;
    for (; r + 3 < end; r += 4) {
      Pack<In, V> x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) x[u] = load_pack<In, V>(col + (r + u) * width);
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = op(acc[e], static_cast<Acc>(x[u].v[e]));
    }
    for (; r < end; ++r) {
      const Pack<In, V> x = load_pack<In, V>(col + r * width);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = op(acc[e], static_cast<Acc>(x.v[e]));
    }
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const int64_t c = g * V + e;
      if constexpr (Accumulate) {
        out[c] = op(out[c], acc[e]);
      } else {
        out[p * width + c] = acc[e];
      }
    }
  }
}
#endif

}  // namespace dax::detail::cuda
