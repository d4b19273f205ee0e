// Fused softmax over rows on the CPU (the contract of backend/softmax_rows.hpp): forward
// y = softmax(scale * x) over each row's visible keys (0 elsewhere), backward
// dx = scale * y * (g - sum(g * y)). 16-bit types compute in float.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <dax/backend/softmax_rows.hpp>
#include <dax/core/float16.hpp>

namespace dax::detail::cpu {

template <class T>
void softmax_rows(const T* x, const SoftmaxRows& geo, T* y) {
  using C = compute_t<T>;
  const C scale = static_cast<C>(geo.scale);
  for (int64_t r = 0; r < geo.rows; ++r) {
    const T* in = x + r * geo.length;
    T* out = y + r * geo.length;
    const int64_t v = geo.visible(r);
    if (v == 0) {
      std::fill_n(out, geo.length, static_cast<T>(C(1) / static_cast<C>(geo.length)));
      continue;
    }
    C m = -std::numeric_limits<C>::infinity();
    for (int64_t j = 0; j < v; ++j) m = std::max(m, static_cast<C>(in[j]) * scale);
    C s = 0;
    for (int64_t j = 0; j < v; ++j) s += std::exp(static_cast<C>(in[j]) * scale - m);
    const C inv = C(1) / s;
    for (int64_t j = 0; j < v; ++j) out[j] = static_cast<T>(std::exp(static_cast<C>(in[j]) * scale - m) * inv);
    std::fill(out + v, out + geo.length, T(0));
  }
}

template <class T>
void softmax_rows_grad(const T* y, const T* g, const SoftmaxRows& geo, T* dx) {
  using C = compute_t<T>;
  const C scale = static_cast<C>(geo.scale);
  for (int64_t r = 0; r < geo.rows; ++r) {
    const int64_t at = r * geo.length;
    C dot = 0;
    for (int64_t j = 0; j < geo.length; ++j) dot += static_cast<C>(g[at + j]) * static_cast<C>(y[at + j]);
    for (int64_t j = 0; j < geo.length; ++j)
      dx[at + j] = static_cast<T>(scale * static_cast<C>(y[at + j]) * (static_cast<C>(g[at + j]) - dot));
  }
}

}  // namespace dax::detail::cpu
