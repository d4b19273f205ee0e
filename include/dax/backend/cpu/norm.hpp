// Fused normalization over rows on the CPU (the contract of backend/norm_rows.hpp), in
// compute_t<T> (float for the 16-bit types), the statistics kept in that type:
//   forward   mean = sum(x) / n (0 for rms_norm), rstd = 1 / sqrt(sum((x - mean)^2) / n + eps),
//             y = (x - mean) * rstd * gamma (+ beta);
//   backward  with xhat = (x - mean) * rstd and gg = g * gamma:
//             dx = rstd * (gg - mean(gg) - xhat * mean(gg * xhat))   (rms_norm: no mean(gg)),
//             and, when asked, gx = g * xhat (gamma's gradient summed over the rows by the caller).
// Eight running sums a row, so the loops vectorize (a single sum is a chain kept in order).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <dax/backend/norm_rows.hpp>
#include <dax/core/float16.hpp>

namespace dax::detail::cpu {

/// sum over j < n of f(j), in eight running sums.
template <class C, class F>
C lane_sum(int64_t n, F&& f) {
  constexpr int lanes = 8;
  C sums[lanes] = {};
  const int64_t whole = n / lanes * lanes;
  for (int64_t j = 0; j < whole; j += lanes)
    for (int k = 0; k < lanes; ++k) sums[k] += f(j + k);
  C s = 0;
  for (int k = 0; k < lanes; ++k) s += sums[k];
  for (int64_t j = whole; j < n; ++j) s += f(j);
  return s;
}

/// y = normalized x * gamma (+ beta, when not null); each row's rstd, and its mean when centered
/// (rms_norm's is 0: `mean` may be null then).
template <class T>
void norm_rows(const T* x, const T* gamma, const T* beta, const NormRows& geo, T* y, compute_t<T>* mean,
               compute_t<T>* rstd) {
  using C = compute_t<T>;
  const int64_t n = geo.length;
  const C inv_n = C(1) / static_cast<C>(n);
  for (int64_t r = 0; r < geo.rows; ++r) {
    const T* in = x + r * n;
    T* out = y + r * n;
    const C mu = geo.centered ? lane_sum<C>(n, [&](int64_t j) { return static_cast<C>(in[j]); }) * inv_n : C(0);
    const C var = lane_sum<C>(n, [&](int64_t j) {
                    const C d = static_cast<C>(in[j]) - mu;
                    return d * d;
                  }) * inv_n;
    const C rs = C(1) / std::sqrt(var + static_cast<C>(geo.eps));
    if (beta)
      for (int64_t j = 0; j < n; ++j)
        out[j] = static_cast<T>((static_cast<C>(in[j]) - mu) * rs * static_cast<C>(gamma[j]) + static_cast<C>(beta[j]));
    else
      for (int64_t j = 0; j < n; ++j) out[j] = static_cast<T>((static_cast<C>(in[j]) - mu) * rs * static_cast<C>(gamma[j]));
    if (geo.centered) mean[r] = mu;
    rstd[r] = rs;
  }
}

/// dx (when not null) and gx = g * xhat (when not null) of norm_rows for the output's cotangent g
/// (`mean` read only when centered).
template <class T>
void norm_rows_grad(const T* x, const T* gamma, const compute_t<T>* mean, const compute_t<T>* rstd, const T* g,
                    const NormRows& geo, T* dx, T* gx) {
  using C = compute_t<T>;
  const int64_t n = geo.length;
  const C inv_n = C(1) / static_cast<C>(n);
  for (int64_t r = 0; r < geo.rows; ++r) {
    const int64_t at = r * n;
    const C mu = geo.centered ? mean[r] : C(0), rs = rstd[r];
    auto xhat = [&](int64_t j) { return (static_cast<C>(x[at + j]) - mu) * rs; };
    if (gx)
      for (int64_t j = 0; j < n; ++j) gx[at + j] = static_cast<T>(static_cast<C>(g[at + j]) * xhat(j));
    if (!dx) continue;
    auto gg = [&](int64_t j) { return static_cast<C>(g[at + j]) * static_cast<C>(gamma[j]); };
    const C mean_gg = geo.centered ? lane_sum<C>(n, gg) * inv_n : C(0);
    const C mean_ggx = lane_sum<C>(n, [&](int64_t j) { return gg(j) * xhat(j); }) * inv_n;
    for (int64_t j = 0; j < n; ++j) dx[at + j] = static_cast<T>(rs * (gg(j) - mean_gg - xhat(j) * mean_ggx));
  }
}

}  // namespace dax::detail::cpu
