// Fused softmax over rows on the CPU (the contract of backend/softmax_rows.hpp): forward
// y = softmax(scale * x) over each row's visible keys (0 elsewhere), backward
// dx = scale * y * (g - sum(g * y)); and cross_entropy's row statistics (logsumexp and the
// label's logit). 16-bit types compute in float.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <dax/backend/softmax_rows.hpp>
#include <dax/core/float_math.hpp>
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

/// Per row of `length` logits: lse = log sum exp(x), computed in compute_t<T> and rounded once,
/// and the logit at the row's label (0 where the label is outside [0, length)): cross_entropy's
/// forward in one pass over the logits, with no exp(x - max) array in memory. Eight running
/// maxima and sums a row, so the loops vectorize (a single sum is a chain the compiler keeps in
/// order), and the vectorizable float exp (core/float_math.hpp) the vocab-parallel path uses.
template <class T, class L>
void logsumexp_pick_rows(const T* x, const L* labels, int64_t rows, int64_t length, T* lse, T* picked) {
  using C = compute_t<T>;
  constexpr int lanes = 8;
  for (int64_t r = 0; r < rows; ++r) {
    const T* in = x + r * length;
    const int64_t whole = length / lanes * lanes;
    C top[lanes], sums[lanes];
    std::fill_n(top, lanes, -std::numeric_limits<C>::infinity());
    std::fill_n(sums, lanes, C(0));
    for (int64_t j = 0; j < whole; j += lanes)
      for (int k = 0; k < lanes; ++k) top[k] = std::max(top[k], static_cast<C>(in[j + k]));
    C m = *std::max_element(top, top + lanes);
    for (int64_t j = whole; j < length; ++j) m = std::max(m, static_cast<C>(in[j]));
    for (int64_t j = 0; j < whole; j += lanes)
      for (int k = 0; k < lanes; ++k) sums[k] += fast_exp(static_cast<C>(in[j + k]) - m);
    C s = 0;
    for (int k = 0; k < lanes; ++k) s += sums[k];
    for (int64_t j = whole; j < length; ++j) s += fast_exp(static_cast<C>(in[j]) - m);
    lse[r] = static_cast<T>(m + std::log(s));
    const L label = labels[r];
    picked[r] = label >= 0 && static_cast<int64_t>(label) < length ? in[label] : T(0);
  }
}

}  // namespace dax::detail::cpu
