// Fused attention on the GPU (the contract of backend/attention_shape.hpp and
// backend/cpu/attention.hpp), the FlashAttention algorithm: a block of queries at a time with K and
// V tiles staged in shared memory, an online softmax, and no (q_len x k_len) matrix in memory.
// Two implementations:
// - Tensor cores (bfloat16 and half, head_dim 64 or 128): a block of 4 warps takes 64 queries (each
//   warp 16) and walks 64-key tiles; the products are WMMA 16x16x16 fragments accumulating in
//   float; scores, probabilities and the output accumulate in float in shared memory (a
//   fragment's layout is opaque, so the softmax reads the scores there). The backward is two
//   kernels, dk / dv per key tile (walking the query tiles) and dq per query tile (walking the key
//   tiles), so nothing is summed with atomics: the same bits every run, as dax's other kernels.
// - A warp per row (any floating type and head_dim up to 256): each lane holds head_dim / 32 of
//   the row; a correct fallback, not a fast one (dax::dot_product_attention's automatic choice
//   takes the composite of cuBLAS products there, nn/attention.hpp).
#pragma once

#include <cuda_runtime.h>
#include <mma.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include <dax/backend/attention_shape.hpp>
#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/memory.cuh>
#include <dax/backend/cuda/warp.cuh>
#include <dax/core/error.hpp>
#include <dax/core/float16.hpp>

namespace dax::detail::cuda {
namespace attention_kernels {

// ---- a warp per row ----

/// Values of a row a lane holds (lane + 32 t for t < this): head_dim up to 256.
inline constexpr int row_slots = 8;

/// The dot product of a row (this lane's slots in `mine`) with row `other` (head_dim values).
template <class T, class C>
__device__ inline C warp_dot(const C (&mine)[row_slots], const T* other, int64_t d, int lane) {
  C sum = 0;
#pragma unroll
  for (int t = 0; t < row_slots; ++t) {
    const int64_t h = lane + 32 * t;
    if (h < d) sum += mine[t] * static_cast<C>(other[h]);
  }
  return warp_sum(sum);
}

template <class T, class C>
__device__ inline void load_row(C (&out)[row_slots], const T* row, int64_t d, int lane) {
#pragma unroll
  for (int t = 0; t < row_slots; ++t) {
    const int64_t h = lane + 32 * t;
    out[t] = h < d ? static_cast<C>(row[h]) : C(0);
  }
}

/// Row r of (batch, heads, q_len) as its batch, head and query.
struct RowIndex {
  int64_t b, n, i;
};
__device__ inline RowIndex row_index(int64_t r, const AttentionShape& geo) {
  return {r / (geo.heads * geo.q_len), r / geo.q_len % geo.heads, r % geo.q_len};
}

template <class T, class C>
__global__ void forward_rows(const T* q, const T* k, const T* v, AttentionShape geo, T* o, C* lse) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t d = geo.head_dim, stride = geo.row_stride(), rows = geo.batch * geo.heads * geo.q_len;
  const C scale = static_cast<C>(geo.scale);
  for (int64_t r = grid_first() / 32; r < rows; r += grid_step() / 32) {
    const auto [b, n, i] = row_index(r, geo);
    C qi[row_slots], acc[row_slots] = {};
    load_row(qi, q + geo.q_offset(b, n) + i * stride, d, lane);
    C m = -std::numeric_limits<C>::infinity(), l = 0;
    const int64_t visible = geo.visible(i);
    for (int64_t j = 0; j < visible; ++j) {
      const T* kj = k + geo.k_offset(b, n) + j * stride;
      const T* vj = v + geo.k_offset(b, n) + j * stride;
      const C s = warp_dot(qi, kj, d, lane) * scale;
      C p = 1, correction = 1;  // the new term's weight and the old terms' rescaling
      if (s > m) {
        correction = exp(m - s);
        m = s;
      } else {
        p = exp(s - m);
      }
      l = l * correction + p;
#pragma unroll
      for (int t = 0; t < row_slots; ++t) {
        const int64_t h = lane + 32 * t;
        if (h < d) acc[t] = acc[t] * correction + p * static_cast<C>(vj[h]);
      }
    }
    T* oi = o + geo.q_offset(b, n) + i * stride;
#pragma unroll
    for (int t = 0; t < row_slots; ++t) {
      const int64_t h = lane + 32 * t;
      if (h < d) oi[h] = static_cast<T>(acc[t] / l);
    }
    if (lane == 0) lse[r] = m + log(l);
  }
}

/// delta_i = g_i . o_i per row (batch, heads, q_len), in float or double: the backward's row term.
template <class T, class C>
__global__ void row_deltas(const T* o, const T* g, AttentionShape geo, C* delta) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t d = geo.head_dim, stride = geo.row_stride(), rows = geo.batch * geo.heads * geo.q_len;
  for (int64_t r = grid_first() / 32; r < rows; r += grid_step() / 32) {
    const auto [b, n, i] = row_index(r, geo);
    const int64_t at = geo.q_offset(b, n) + i * stride;
    C sum = 0;
    for (int64_t h = lane; h < d; h += 32) sum += static_cast<C>(g[at + h]) * static_cast<C>(o[at + h]);
    sum = warp_sum(sum);
    if (lane == 0) delta[r] = sum;
  }
}

/// dq, a warp per query row: sum over visible keys of p (g . v_j - delta) k_j, times scale.
template <class T, class C>
__global__ void dq_rows(const T* q, const T* k, const T* v, const C* lse, const C* delta, const T* g,
                        AttentionShape geo, T* dq) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t d = geo.head_dim, stride = geo.row_stride(), rows = geo.batch * geo.heads * geo.q_len;
  const C scale = static_cast<C>(geo.scale);
  for (int64_t r = grid_first() / 32; r < rows; r += grid_step() / 32) {
    const auto [b, n, i] = row_index(r, geo);
    const int64_t at = geo.q_offset(b, n) + i * stride;
    C qi[row_slots], gi[row_slots], acc[row_slots] = {};
    load_row(qi, q + at, d, lane);
    load_row(gi, g + at, d, lane);
    for (int64_t j = 0; j < geo.visible(i); ++j) {
      const int64_t kj = geo.k_offset(b, n) + j * stride;
      const C p = exp(warp_dot(qi, k + kj, d, lane) * scale - lse[r]);
      const C ds = p * (warp_dot(gi, v + kj, d, lane) - delta[r]);
#pragma unroll
      for (int t = 0; t < row_slots; ++t) {
        const int64_t h = lane + 32 * t;
        if (h < d) acc[t] += ds * static_cast<C>(k[kj + h]);
      }
    }
#pragma unroll
    for (int t = 0; t < row_slots; ++t) {
      const int64_t h = lane + 32 * t;
      if (h < d) dq[at + h] = static_cast<T>(scale * acc[t]);
    }
  }
}

/// dk and dv, a warp per key row j: sums over the queries that see j.
template <class T, class C>
__global__ void dkv_rows(const T* q, const T* k, const T* v, const C* lse, const C* delta, const T* g,
                         AttentionShape geo, T* dk, T* dv) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t d = geo.head_dim, stride = geo.row_stride(), rows = geo.batch * geo.heads * geo.k_len;
  const C scale = static_cast<C>(geo.scale);
  for (int64_t r = grid_first() / 32; r < rows; r += grid_step() / 32) {
    const int64_t b = r / (geo.heads * geo.k_len), n = r / geo.k_len % geo.heads, j = r % geo.k_len;
    const int64_t at = geo.k_offset(b, n) + j * stride;
    C kj[row_slots], vj[row_slots], dk_acc[row_slots] = {}, dv_acc[row_slots] = {};
    load_row(kj, k + at, d, lane);
    load_row(vj, v + at, d, lane);
    // The first query that sees key j: visible(i) > j.
    const int64_t first = geo.causal ? (j - (geo.k_len - geo.q_len) > 0 ? j - (geo.k_len - geo.q_len) : 0) : 0;
    for (int64_t i = first; i < geo.q_len; ++i) {
      const int64_t qi = geo.q_offset(b, n) + i * stride, row = (b * geo.heads + n) * geo.q_len + i;
      const C p = exp(warp_dot(kj, q + qi, d, lane) * scale - lse[row]);
      const C ds = p * (warp_dot(vj, g + qi, d, lane) - delta[row]);
#pragma unroll
      for (int t = 0; t < row_slots; ++t) {
        const int64_t h = lane + 32 * t;
        if (h < d) {
          dv_acc[t] += p * static_cast<C>(g[qi + h]);
          dk_acc[t] += ds * static_cast<C>(q[qi + h]);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < row_slots; ++t) {
      const int64_t h = lane + 32 * t;
      if (h < d) {
        dk[at + h] = static_cast<T>(scale * dk_acc[t]);
        dv[at + h] = static_cast<T>(dv_acc[t]);
      }
    }
  }
}

// ---- tensor cores (16-bit types, head_dim 64 or 128) ----

namespace wmma = nvcuda::wmma;

/// CUDA's own 16-bit type with dax's type's bits.
template <class T>
using Wmma16 = std::conditional_t<std::is_same_v<T, bfloat16>, __nv_bfloat16, __half>;

inline constexpr int tile = 64;       // queries a block, keys a tile
inline constexpr int tile_warps = 4;  // 16 rows each
inline constexpr int pad16 = 8;       // shared rows padded (16-byte multiples, fewer bank conflicts)
inline constexpr int pad32 = 4;

template <class W>
__device__ inline W to16(float x) {
  if constexpr (std::is_same_v<W, __nv_bfloat16>) return __float2bfloat16(x);
  else return __float2half(x);
}

/// Bytes of shared memory `count` elements take, in 128-byte pieces (every piece's start then
/// meets WMMA's 32-byte alignment).
template <class E>
constexpr int64_t carved(int64_t count) {
  return (count * static_cast<int64_t>(sizeof(E)) + 127) / 128 * 128;
}

/// Shared memory handed out in carved pieces, in order.
struct Carver {
  char* at;
  template <class E>
  __device__ E* take(int64_t count) {
    E* p = reinterpret_cast<E*>(at);
    at += carved<E>(count);
    return p;
  }
};

/// Rows [first, first + 64) of one head (head_dim D, stride `stride`) into shared rows of D + pad16,
/// 16 bytes at a time; rows past `len` are zeros.
template <int D, class W>
__device__ inline void stage_rows(const W* src, int64_t first, int64_t len, int64_t stride, W* dst) {
  constexpr int chunks = D / 8;  // 16-byte pieces a row
  for (int c = threadIdx.x; c < tile * chunks; c += blockDim.x) {
    const int r = c / chunks, piece = c % chunks;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (first + r < len) value = *reinterpret_cast<const uint4*>(src + (first + r) * stride + piece * 8);
    *reinterpret_cast<uint4*>(dst + r * (D + pad16) + piece * 8) = value;
  }
}

/// (16 x 64) scores of warp w's rows: a (rows of a_s, D) times b_s's 64 rows transposed, in float.
template <int D, class W>
__device__ inline void scores_16x64(const W* a_rows, const W* b_s, float* out, int ld_out) {
  for (int c = 0; c < tile / 16; ++c) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < D / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, W, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::col_major> b;
      wmma::load_matrix_sync(a, a_rows + kk * 16, D + pad16);
      wmma::load_matrix_sync(b, b_s + c * 16 * (D + pad16) + kk * 16, D + pad16);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(out + c * 16, acc, ld_out, wmma::mem_row_major);
  }
}

/// acc_rows (16 x D, float, ld D + pad32) += a (16 x 64; transposed: read as the columns of a 64 x
/// 16 block, ld_a) times b_s (64 x D rows, ld D + pad16).
template <int D, class W, class ALayout>
__device__ inline void accumulate_16xD(const W* a, int ld_a, const W* b_s, float* acc_rows) {
  for (int c = 0; c < D / 16; ++c) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, acc_rows + c * 16, D + pad32, wmma::mem_row_major);
    for (int kk = 0; kk < tile / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, W, ALayout> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, W, wmma::row_major> fb;
      if constexpr (std::is_same_v<ALayout, wmma::row_major>) wmma::load_matrix_sync(fa, a + kk * 16, ld_a);
      else wmma::load_matrix_sync(fa, a + kk * 16 * ld_a, ld_a);
      wmma::load_matrix_sync(fb, b_s + kk * 16 * (D + pad16) + c * 16, D + pad16);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(acc_rows + c * 16, acc, D + pad32, wmma::mem_row_major);
  }
}

/// The forward kernel's shared memory, carved in one place beside its size: the query, key and
/// value tiles (16-bit), the scores (float), the probabilities (16-bit), the output accumulating
/// (float), each row's running max and sum.
template <int D, class W>
struct ForwardTiles {
  W *qs, *ks, *vs, *ps;
  float *ss, *os, *row_max, *row_sum;
  static constexpr int64_t bytes() {
    return 3 * carved<W>(tile * (D + pad16)) + carved<float>(tile * (tile + pad32)) +
           carved<W>(tile * (tile + pad16)) + carved<float>(tile * (D + pad32)) + 2 * carved<float>(tile);
  }
#if defined(__CUDACC__)
  __device__ explicit ForwardTiles(char* shared) {
    Carver carve{shared};
    qs = carve.take<W>(tile * (D + pad16));
    ks = carve.take<W>(tile * (D + pad16));
    vs = carve.take<W>(tile * (D + pad16));
    ss = carve.take<float>(tile * (tile + pad32));
    ps = carve.take<W>(tile * (tile + pad16));
    os = carve.take<float>(tile * (D + pad32));
    row_max = carve.take<float>(tile);
    row_sum = carve.take<float>(tile);
  }
#endif
};

/// The backward kernels' shared memory, likewise: the key, value, query and cotangent tiles
/// (16-bit), the scores and their gradients (float) and their 16-bit copies, `accumulators` tiles
/// of the gradients being summed (float: dk and dv, or dq), each query row's lse and delta.
template <int D, class W, int accumulators>
struct BackwardTiles {
  W *ks, *vs, *qs, *gs, *ps, *dss;
  float *ss, *dps, *lse_s, *delta_s;
  float* acc[accumulators];
  static constexpr int64_t bytes() {
    return 4 * carved<W>(tile * (D + pad16)) + 2 * carved<float>(tile * (tile + pad32)) +
           2 * carved<W>(tile * (tile + pad16)) + accumulators * carved<float>(tile * (D + pad32)) +
           2 * carved<float>(tile);
  }
#if defined(__CUDACC__)
  __device__ explicit BackwardTiles(char* shared) {
    Carver carve{shared};
    ks = carve.take<W>(tile * (D + pad16));
    vs = carve.take<W>(tile * (D + pad16));
    qs = carve.take<W>(tile * (D + pad16));
    gs = carve.take<W>(tile * (D + pad16));
    ss = carve.take<float>(tile * (tile + pad32));
    dps = carve.take<float>(tile * (tile + pad32));
    ps = carve.take<W>(tile * (tile + pad16));
    dss = carve.take<W>(tile * (tile + pad16));
    for (float*& a : acc) a = carve.take<float>(tile * (D + pad32));
    lse_s = carve.take<float>(tile);
    delta_s = carve.take<float>(tile);
  }
#endif
};

template <int D, class W>
__global__ void __launch_bounds__(tile_warps * 32)
    forward_tiles(const W* q, const W* k, const W* v, AttentionShape geo, W* o, float* lse) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) char shared[];
  const ForwardTiles<D, W> t(shared);
  W *qs = t.qs, *ks = t.ks, *vs = t.vs, *ps = t.ps;
  float *ss = t.ss, *os = t.os, *row_max = t.row_max, *row_sum = t.row_sum;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * tile, n = blockIdx.y, b = blockIdx.z;
  const int64_t stride = geo.row_stride();
  const float scale = static_cast<float>(geo.scale), lowest = -std::numeric_limits<float>::infinity();
  stage_rows<D>(q + geo.q_offset(b, n), i0, geo.q_len, stride, qs);
  for (int e = threadIdx.x; e < tile * (D + pad32); e += blockDim.x) os[e] = 0.0f;
  for (int r = threadIdx.x; r < tile; r += blockDim.x) row_max[r] = lowest, row_sum[r] = 0.0f;
  const int64_t last = (i0 + tile < geo.q_len ? i0 + tile : geo.q_len) - 1;
  const int64_t keys = geo.visible(last);
  // Each warp's 16 rows, two lanes a row, each lane half of the tile's 64 columns.
  const int r = warp * 16 + lane / 2, half = lane % 2;
  const int64_t i = i0 + r;
  const int64_t visible = i < geo.q_len ? geo.visible(i) : 0;
  for (int64_t j0 = 0; j0 < keys; j0 += tile) {
    __syncthreads();  // every warp is done with the last tile
    stage_rows<D>(k + geo.k_offset(b, n), j0, geo.k_len, stride, ks);
    stage_rows<D>(v + geo.k_offset(b, n), j0, geo.k_len, stride, vs);
    __syncthreads();
    scores_16x64<D>(qs + warp * 16 * (D + pad16), ks, ss + warp * 16 * (tile + pad32), tile + pad32);
    __syncwarp();
    float* srow = ss + r * (tile + pad32);
    float top = lowest;
    for (int c = half * 32; c < half * 32 + 32; ++c)
      if (j0 + c < visible) top = fmaxf(top, srow[c] * scale);
    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
    const float old_max = row_max[r], new_max = fmaxf(old_max, top);
    float sum = 0.0f;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const float p = j0 + c < visible ? __expf(srow[c] * scale - new_max) : 0.0f;
      sum += p;
      ps[r * (tile + pad16) + c] = to16<W>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    const float correction = old_max == lowest ? 0.0f : __expf(old_max - new_max);
    for (int h = half * (D / 2); h < (half + 1) * (D / 2); ++h) os[r * (D + pad32) + h] *= correction;
    __syncwarp();
    if (half == 0 && new_max != lowest) {
      row_max[r] = new_max;
      row_sum[r] = row_sum[r] * correction + sum;
    }
    __syncwarp();
    accumulate_16xD<D, W, wmma::row_major>(ps + warp * 16 * (tile + pad16), tile + pad16, vs,
                                            os + warp * 16 * (D + pad32));
  }
  __syncwarp();
  if (i < geo.q_len) {
    const float l = row_sum[r];
    W* out = o + geo.q_offset(b, n) + i * stride;
    for (int h = half * (D / 2); h < (half + 1) * (D / 2); ++h) out[h] = to16<W>(os[r * (D + pad32) + h] / l);
    if (half == 0) lse[(b * geo.heads + n) * geo.q_len + i] = row_max[r] + logf(l);
  }
#endif
}

/// Warp w's rows of a query tile: p = exp(scale s - lse) where visible (kept in `ss` as float and
/// as W in `ps`), then with dp (in `dps`) ds = p (dp - delta) as W in `dss`. Two lanes a row.
template <class W>
__device__ inline void probabilities_16(float* ss, W* ps, const float* lse_s, int64_t i0, int64_t j0,
                                        const AttentionShape& geo, int warp, int lane) {
  const int r = warp * 16 + lane / 2, half = lane % 2;
  const int64_t i = i0 + r;
  const int64_t visible = i < geo.q_len ? geo.visible(i) : 0;
  const float scale = static_cast<float>(geo.scale);
  for (int c = half * 32; c < half * 32 + 32; ++c) {
    float& s = ss[r * (tile + pad32) + c];
    s = j0 + c < visible ? __expf(s * scale - lse_s[r]) : 0.0f;
    ps[r * (tile + pad16) + c] = to16<W>(s);
  }
}

template <class W>
__device__ inline void score_grads_16(const float* ss, const float* dps, W* dss, const float* delta_s, int warp,
                                      int lane) {
  const int r = warp * 16 + lane / 2, half = lane % 2;
  for (int c = half * 32; c < half * 32 + 32; ++c)
    dss[r * (tile + pad16) + c] = to16<W>(ss[r * (tile + pad32) + c] * (dps[r * (tile + pad32) + c] - delta_s[r]));
}

/// dk and dv of one 64-key tile, walking the query tiles that see it.
template <int D, class W>
__global__ void __launch_bounds__(tile_warps * 32)
    dkv_tiles(const W* q, const W* k, const W* v, const float* lse, const float* delta, const W* g,
              AttentionShape geo, W* dk, W* dv) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) char shared[];
  const BackwardTiles<D, W, 2> t(shared);
  W *ks = t.ks, *vs = t.vs, *qs = t.qs, *gs = t.gs, *ps = t.ps, *dss = t.dss;
  float *ss = t.ss, *dps = t.dps, *dks = t.acc[0], *dvs = t.acc[1], *lse_s = t.lse_s, *delta_s = t.delta_s;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * tile, n = blockIdx.y, b = blockIdx.z;
  const int64_t stride = geo.row_stride(), rows = (b * geo.heads + n) * geo.q_len;
  stage_rows<D>(k + geo.k_offset(b, n), j0, geo.k_len, stride, ks);
  stage_rows<D>(v + geo.k_offset(b, n), j0, geo.k_len, stride, vs);
  for (int e = threadIdx.x; e < tile * (D + pad32); e += blockDim.x) dks[e] = 0.0f, dvs[e] = 0.0f;
  // The first query that sees key j0, rounded down to its tile.
  int64_t first = geo.causal ? j0 - (geo.k_len - geo.q_len) : 0;
  first = first < 0 ? 0 : first / tile * tile;
  for (int64_t i0 = first; i0 < geo.q_len; i0 += tile) {
    __syncthreads();
    stage_rows<D>(q + geo.q_offset(b, n), i0, geo.q_len, stride, qs);
    stage_rows<D>(g + geo.q_offset(b, n), i0, geo.q_len, stride, gs);
    for (int r = threadIdx.x; r < tile; r += blockDim.x) {
      lse_s[r] = i0 + r < geo.q_len ? lse[rows + i0 + r] : 0.0f;
      delta_s[r] = i0 + r < geo.q_len ? delta[rows + i0 + r] : 0.0f;
    }
    __syncthreads();
    const int64_t own = warp * 16;
    scores_16x64<D>(qs + own * (D + pad16), ks, ss + own * (tile + pad32), tile + pad32);
    scores_16x64<D>(gs + own * (D + pad16), vs, dps + own * (tile + pad32), tile + pad32);  // dp = g v^T
    __syncwarp();
    probabilities_16(ss, ps, lse_s, i0, j0, geo, warp, lane);
    score_grads_16(ss, dps, dss, delta_s, warp, lane);
    __syncthreads();  // each warp's key rows below need every warp's query rows above
    // dv += p^T g and dk += ds^T q for this warp's 16 keys (columns own.. of p and ds).
    accumulate_16xD<D, W, wmma::col_major>(ps + own, tile + pad16, gs, dvs + own * (D + pad32));
    accumulate_16xD<D, W, wmma::col_major>(dss + own, tile + pad16, qs, dks + own * (D + pad32));
  }
  __syncthreads();
  const float scale = static_cast<float>(geo.scale);
  for (int e = threadIdx.x; e < tile * D; e += blockDim.x) {
    const int r = e / D, h = e % D;
    if (j0 + r >= geo.k_len) continue;
    const int64_t at = geo.k_offset(b, n) + (j0 + r) * stride + h;
    dk[at] = to16<W>(scale * dks[r * (D + pad32) + h]);
    dv[at] = to16<W>(dvs[r * (D + pad32) + h]);
  }
#endif
}

/// dq of one 64-query tile, walking the key tiles it sees.
template <int D, class W>
__global__ void __launch_bounds__(tile_warps * 32)
    dq_tiles(const W* q, const W* k, const W* v, const float* lse, const float* delta, const W* g,
             AttentionShape geo, W* dq) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) char shared[];
  const BackwardTiles<D, W, 1> t(shared);
  W *ks = t.ks, *vs = t.vs, *qs = t.qs, *gs = t.gs, *ps = t.ps, *dss = t.dss;
  float *ss = t.ss, *dps = t.dps, *dqs = t.acc[0], *lse_s = t.lse_s, *delta_s = t.delta_s;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * tile, n = blockIdx.y, b = blockIdx.z;
  const int64_t stride = geo.row_stride(), rows = (b * geo.heads + n) * geo.q_len;
  stage_rows<D>(q + geo.q_offset(b, n), i0, geo.q_len, stride, qs);
  stage_rows<D>(g + geo.q_offset(b, n), i0, geo.q_len, stride, gs);
  for (int e = threadIdx.x; e < tile * (D + pad32); e += blockDim.x) dqs[e] = 0.0f;
  for (int r = threadIdx.x; r < tile; r += blockDim.x) {
    lse_s[r] = i0 + r < geo.q_len ? lse[rows + i0 + r] : 0.0f;
    delta_s[r] = i0 + r < geo.q_len ? delta[rows + i0 + r] : 0.0f;
  }
  const int64_t last = (i0 + tile < geo.q_len ? i0 + tile : geo.q_len) - 1;
  const int64_t keys = geo.visible(last);
  const int64_t own = warp * 16;
  for (int64_t j0 = 0; j0 < keys; j0 += tile) {
    __syncthreads();
    stage_rows<D>(k + geo.k_offset(b, n), j0, geo.k_len, stride, ks);
    stage_rows<D>(v + geo.k_offset(b, n), j0, geo.k_len, stride, vs);
    __syncthreads();
    scores_16x64<D>(qs + own * (D + pad16), ks, ss + own * (tile + pad32), tile + pad32);
    scores_16x64<D>(gs + own * (D + pad16), vs, dps + own * (tile + pad32), tile + pad32);
    __syncwarp();
    probabilities_16(ss, ps, lse_s, i0, j0, geo, warp, lane);
    score_grads_16(ss, dps, dss, delta_s, warp, lane);
    __syncwarp();
    accumulate_16xD<D, W, wmma::row_major>(dss + own * (tile + pad16), tile + pad16, ks, dqs + own * (D + pad32));
  }
  __syncthreads();
  const float scale = static_cast<float>(geo.scale);
  for (int e = threadIdx.x; e < tile * D; e += blockDim.x) {
    const int r = e / D, h = e % D;
    if (i0 + r >= geo.q_len) continue;
    dq[geo.q_offset(b, n) + (i0 + r) * stride + h] = to16<W>(scale * dqs[r * (D + pad32) + h]);
  }
#endif
}

/// Launches `kernel` with `bytes` of dynamic shared memory (above the 48 KB default: opted in once
/// per kernel), a block per (tile of `rows`, head, batch).
template <auto kernel, class... Args>
void launch_tiles(int64_t bytes, int64_t rows, const AttentionShape& geo, const char* name, Args... args) {
  static const bool opted_in = [&] {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
               name);
    return true;
  }();
  (void)opted_in;
  const dim3 grid(static_cast<unsigned>((rows + tile - 1) / tile), static_cast<unsigned>(geo.heads),
                  static_cast<unsigned>(geo.batch));
  kernel<<<grid, tile_warps * 32, static_cast<size_t>(bytes), context().stream()>>>(args...);
  check_launch(name);
}

/// The tensor-core kernels at head_dim D, on CUDA's own 16-bit type W.
template <int D, class W>
void forward_on_tensor_cores(const W* q, const W* k, const W* v, const AttentionShape& geo, W* o, float* lse) {
  launch_tiles<forward_tiles<D, W>>(ForwardTiles<D, W>::bytes(), geo.q_len, geo, "attention forward_tiles", q, k, v,
                                    geo, o, lse);
}

template <int D, class W>
void backward_on_tensor_cores(const W* q, const W* k, const W* v, const float* lse, const float* delta, const W* g,
                              const AttentionShape& geo, W* dq, W* dk, W* dv) {
  launch_tiles<dkv_tiles<D, W>>(BackwardTiles<D, W, 2>::bytes(), geo.k_len, geo, "attention dkv_tiles", q, k, v, lse,
                                delta, g, geo, dk, dv);
  launch_tiles<dq_tiles<D, W>>(BackwardTiles<D, W, 1>::bytes(), geo.q_len, geo, "attention dq_tiles", q, k, v, lse,
                               delta, g, geo, dq);
}

template <class T>
const Wmma16<T>* as_wmma(const T* p) {
  return reinterpret_cast<const Wmma16<T>*>(p);
}
template <class T>
Wmma16<T>* as_wmma(T* p) {
  return reinterpret_cast<Wmma16<T>*>(p);
}

}  // namespace attention_kernels

/// Whether attention of this element type and head dimension runs on tensor cores here (else a
/// warp per row: correct, slow).
template <class T>
bool fused_attention_is_fast(int64_t head_dim) {
  return is_float16_v<T> && (head_dim == 64 || head_dim == 128);
}

namespace attention_kernels {

/// Whether the tensor-core kernels take this call: a fast case (above) whose grid fits and whose
/// operands are 16-byte aligned (the tiles are staged 16 bytes at a time); else a warp per row,
/// which takes head_dim up to 32 * row_slots.
template <class T>
bool takes_tensor_cores(const AttentionShape& geo, std::initializer_list<const void*> pointers) {
  bool fits = fused_attention_is_fast<T>(geo.head_dim) && geo.heads <= 65535 && geo.batch <= 65535;
  for (const void* p : pointers) fits = fits && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  if (!fits)
    DAX_CHECK(geo.head_dim <= 32 * row_slots, "dot_product_attention on the GPU: head_dim up to ", 32 * row_slots,
              ", got ", geo.head_dim);
  return fits;
}

}  // namespace attention_kernels

/// o and lse of attention (backend/attention_shape.hpp). Queued on the stream.
template <class T, class C>
void attention_forward(const T* q, const T* k, const T* v, const AttentionShape& geo, T* o, C* lse) {
  using namespace attention_kernels;
  static_assert(std::is_same_v<C, compute_t<T>>, "attention_forward: lse in T's compute type");
  if (geo.batch * geo.heads * geo.q_len == 0) return;
  if (takes_tensor_cores<T>(geo, {q, k, v, o})) {
    if constexpr (is_float16_v<T>) {
      if (geo.head_dim == 64) return forward_on_tensor_cores<64>(as_wmma(q), as_wmma(k), as_wmma(v), geo, as_wmma(o), lse);
      return forward_on_tensor_cores<128>(as_wmma(q), as_wmma(k), as_wmma(v), geo, as_wmma(o), lse);
    }
  }
  forward_rows<<<grid_blocks(geo.batch * geo.heads * geo.q_len * 32), block_threads, 0, context().stream()>>>(
      q, k, v, geo, o, lse);
  check_launch("attention forward_rows");
}

/// dq, dk, dv of attention for the output's cotangent g. Queued on the stream.
template <class T, class C>
void attention_backward(const T* q, const T* k, const T* v, const T* o, const C* lse, const T* g,
                        const AttentionShape& geo, T* dq, T* dk, T* dv) {
  using namespace attention_kernels;
  static_assert(std::is_same_v<C, compute_t<T>>, "attention_backward: lse in T's compute type");
  const int64_t rows = geo.batch * geo.heads * geo.q_len;
  if (rows == 0) return;  // (k_len >= 1 always: dot_product_attention refuses no keys)
  const bool tensor_cores = takes_tensor_cores<T>(geo, {q, k, v, g, dq, dk, dv});
  const auto scratch = allocate(static_cast<size_t>(rows) * sizeof(C));
  C* delta = static_cast<C*>(scratch->data());
  row_deltas<<<grid_blocks(rows * 32), block_threads, 0, context().stream()>>>(o, g, geo, delta);
  check_launch("attention row_deltas");
  if (tensor_cores) {
    if constexpr (is_float16_v<T>) {
      if (geo.head_dim == 64)
        return backward_on_tensor_cores<64>(as_wmma(q), as_wmma(k), as_wmma(v), lse, delta, as_wmma(g), geo,
                                            as_wmma(dq), as_wmma(dk), as_wmma(dv));
      return backward_on_tensor_cores<128>(as_wmma(q), as_wmma(k), as_wmma(v), lse, delta, as_wmma(g), geo,
                                           as_wmma(dq), as_wmma(dk), as_wmma(dv));
    }
  }
  dq_rows<<<grid_blocks(rows * 32), block_threads, 0, context().stream()>>>(q, k, v, lse, delta, g, geo, dq);
  check_launch("attention dq_rows");
  dkv_rows<<<grid_blocks(geo.batch * geo.heads * geo.k_len * 32), block_threads, 0, context().stream()>>>(
      q, k, v, lse, delta, g, geo, dk, dv);
  check_launch("attention dkv_rows");
}

}  // namespace dax::detail::cuda
