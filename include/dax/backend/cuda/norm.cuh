// Fused normalization over rows on the GPU (the contract of backend/norm_rows.hpp and
// backend/cpu/norm.hpp): a warp per row, lanes taking every 32nd value. The forward reads a row
// three times (mean, variance, output; the later reads mostly hit the cache) and writes it once;
// the backward reads x, g and gamma twice and writes dx (and g * xhat when asked) once. The
// composite layer_norm was seven kernels forward (mean, subtract, square, mean, rsqrt, normalize,
// scale and shift) and about as many backward.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/warp.cuh>
#include <dax/backend/norm_rows.hpp>
#include <dax/core/float16.hpp>

namespace dax::detail::cuda {

template <class T>
__global__ void norm_rows_kernel(const T* x, const T* gamma, const T* beta, NormRows geo, T* y, compute_t<T>* mean,
                                 compute_t<T>* rstd) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t n = geo.length;
  const C inv_n = C(1) / static_cast<C>(n);
  for (int64_t r = grid_first() / 32; r < geo.rows; r += grid_step() / 32) {
    const T* in = x + r * n;
    T* out = y + r * n;
    C mu = 0;
    if (geo.centered) {
      for (int64_t j = lane; j < n; j += 32) mu += static_cast<C>(in[j]);
      mu = warp_sum(mu) * inv_n;
    }
    C var = 0;
    for (int64_t j = lane; j < n; j += 32) {
      const C d = static_cast<C>(in[j]) - mu;
      var += d * d;
    }
    const C rs = C(1) / sqrt(warp_sum(var) * inv_n + static_cast<C>(geo.eps));
    for (int64_t j = lane; j < n; j += 32) {
      const C v = (static_cast<C>(in[j]) - mu) * rs * static_cast<C>(gamma[j]);
      out[j] = static_cast<T>(beta ? v + static_cast<C>(beta[j]) : v);
    }
    if (lane == 0) {
      if (geo.centered) mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

template <class T>
__global__ void norm_rows_grad_kernel(const T* x, const T* gamma, const compute_t<T>* mean, const compute_t<T>* rstd,
                                      const T* g, NormRows geo, T* dx, T* gx) {
  using C = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t n = geo.length;
  const C inv_n = C(1) / static_cast<C>(n);
  for (int64_t r = grid_first() / 32; r < geo.rows; r += grid_step() / 32) {
    const int64_t at = r * n;
    const C mu = geo.centered ? mean[r] : C(0), rs = rstd[r];
    C sum_gg = 0, sum_ggx = 0;
    if (dx)
      for (int64_t j = lane; j < n; j += 32) {
        const C gg = static_cast<C>(g[at + j]) * static_cast<C>(gamma[j]);
        sum_gg += gg;
        sum_ggx += gg * (static_cast<C>(x[at + j]) - mu) * rs;
      }
    const C mean_gg = geo.centered ? warp_sum(sum_gg) * inv_n : C(0);
    const C mean_ggx = warp_sum(sum_ggx) * inv_n;
    for (int64_t j = lane; j < n; j += 32) {
      const C xhat = (static_cast<C>(x[at + j]) - mu) * rs;
      const C gj = static_cast<C>(g[at + j]);
      if (gx) gx[at + j] = static_cast<T>(gj * xhat);
      if (dx) dx[at + j] = static_cast<T>(rs * (gj * static_cast<C>(gamma[j]) - mean_gg - xhat * mean_ggx));
    }
  }
}

/// y, mean and rstd of the rows. Queued on the stream.
template <class T>
void norm_rows(const T* x, const T* gamma, const T* beta, const NormRows& geo, T* y, compute_t<T>* mean,
               compute_t<T>* rstd) {
  if (geo.rows == 0 || geo.length == 0) return;
  norm_rows_kernel<<<grid_blocks(geo.rows * 32), block_threads, 0, context().stream()>>>(x, gamma, beta, geo, y, mean,
                                                                                          rstd);
  check_launch("norm_rows_kernel");
}

/// dx and / or g * xhat of the rows. Queued on the stream.
template <class T>
void norm_rows_grad(const T* x, const T* gamma, const compute_t<T>* mean, const compute_t<T>* rstd, const T* g,
                    const NormRows& geo, T* dx, T* gx) {
  if (geo.rows == 0 || geo.length == 0 || (!dx && !gx)) return;
  norm_rows_grad_kernel<<<grid_blocks(geo.rows * 32), block_threads, 0, context().stream()>>>(x, gamma, mean, rstd, g,
                                                                                               geo, dx, gx);
  check_launch("norm_rows_grad_kernel");
}

}  // namespace dax::detail::cuda
