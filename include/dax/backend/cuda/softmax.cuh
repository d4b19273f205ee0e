// Fused softmax over rows on the GPU (the contract of backend/softmax_rows.hpp and
// backend/cpu/softmax.hpp): a warp per row. The forward reads each row twice (an online max and
// sum, then the outputs; the second read mostly hits the cache) and writes it once; the backward
// reads y and g twice and writes dx once. Before, dax::causal_softmax was seven kernels over the
// scores forward and four backward (mask, max, exp, sum, divide; product, sum, combine).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include <dax/backend/cuda/device.cuh>
#include <dax/backend/softmax_rows.hpp>
#include <dax/core/float16.hpp>

namespace dax::detail::cuda {

/// The max m of scale * in[j] over j < count and the sum of exp(scale * in[j] - m), a warp's
/// lanes each taking every 32nd value (an online max and sum), then combined across the warp:
/// every lane returns the row's (m, s).
template <class T, class C>
__device__ inline void warp_max_and_sum(const T* in, int64_t count, C scale, int lane, C& m, C& s) {
  constexpr C lowest = -std::numeric_limits<C>::infinity();
  m = lowest, s = 0;
  for (int64_t j = lane; j < count; j += 32) {
    const C t = static_cast<C>(in[j]) * scale;
    if (t > m) {
      s = s * exp(m - t) + C(1);
      m = t;
    } else if (t != lowest) {  // a -inf score (an additive mask) adds nothing; exp(-inf - -inf) is NaN
      s += exp(t - m);
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const C m2 = __shfl_xor_sync(0xffffffffu, m, offset), s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    const C top = m > m2 ? m : m2;
    s = (m == lowest ? C(0) : s * exp(m - top)) + (m2 == lowest ? C(0) : s2 * exp(m2 - top));
    m = top;
  }
}

template <class T>
__global__ void softmax_rows_kernel(const T* x, SoftmaxRows geo, T* y) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const C scale = static_cast<C>(geo.scale);
  for (int64_t r = grid_first() / 32; r < geo.rows; r += grid_step() / 32) {
    const T* in = x + r * geo.length;
    T* out = y + r * geo.length;
    const int64_t v = geo.visible(r);
    if (v == 0) {
      for (int64_t j = lane; j < geo.length; j += 32) out[j] = static_cast<T>(C(1) / static_cast<C>(geo.length));
      continue;
    }
    C m, s;
    warp_max_and_sum(in, v, scale, lane, m, s);
    const C inv = C(1) / s;
    for (int64_t j = lane; j < geo.length; j += 32)
      out[j] = j < v ? static_cast<T>(exp(static_cast<C>(in[j]) * scale - m) * inv) : T(0);
  }
}

template <class T>
__global__ void softmax_rows_grad_kernel(const T* y, const T* g, SoftmaxRows geo, T* dx) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const C scale = static_cast<C>(geo.scale);
  for (int64_t r = grid_first() / 32; r < geo.rows; r += grid_step() / 32) {
    const int64_t at = r * geo.length;
    C dot = 0;
    for (int64_t j = lane; j < geo.length; j += 32) dot += static_cast<C>(g[at + j]) * static_cast<C>(y[at + j]);
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    for (int64_t j = lane; j < geo.length; j += 32)
      dx[at + j] = static_cast<T>(scale * static_cast<C>(y[at + j]) * (static_cast<C>(g[at + j]) - dot));
  }
}

/// cross_entropy's row statistics, a warp per row: lse = log sum exp(x) and the logit at the
/// row's label (0 outside [0, length)).
template <class T, class L>
__global__ void logsumexp_pick_rows_kernel(const T* x, const L* labels, int64_t rows, int64_t length, T* lse,
                                           T* picked) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t r = grid_first() / 32; r < rows; r += grid_step() / 32) {
    const T* in = x + r * length;
    C m, s;
    warp_max_and_sum(in, length, C(1), lane, m, s);
    if (lane == 0) {
      lse[r] = static_cast<T>(m + log(s));
      const L label = labels[r];
      picked[r] = label >= 0 && static_cast<int64_t>(label) < length ? in[label] : T(0);
    }
  }
}

/// cross_entropy's lse and picked logit per row. Queued on the stream.
template <class T, class L>
void logsumexp_pick_rows(const T* x, const L* labels, int64_t rows, int64_t length, T* lse, T* picked) {
  if (rows == 0 || length == 0) return;
  logsumexp_pick_rows_kernel<<<grid_blocks(rows * 32), block_threads, 0, context().stream()>>>(x, labels, rows, length,
                                                                                                lse, picked);
  check_launch("logsumexp_pick_rows_kernel");
}

/// y = softmax(scale * x) over each row's visible keys. Queued on the stream.
template <class T>
void softmax_rows(const T* x, const SoftmaxRows& geo, T* y) {
  if (geo.rows == 0 || geo.length == 0) return;
  softmax_rows_kernel<<<grid_blocks(geo.rows * 32), block_threads, 0, context().stream()>>>(x, geo, y);
  check_launch("softmax_rows_kernel");
}

/// dx = scale * y * (g - sum(g * y)) per row. Queued on the stream.
template <class T>
void softmax_rows_grad(const T* y, const T* g, const SoftmaxRows& geo, T* dx) {
  if (geo.rows == 0 || geo.length == 0) return;
  softmax_rows_grad_kernel<<<grid_blocks(geo.rows * 32), block_threads, 0, context().stream()>>>(y, g, geo, dx);
  check_launch("softmax_rows_grad_kernel");
}

}  // namespace dax::detail::cuda
