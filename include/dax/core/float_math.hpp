// tanh and exp for float on the CPU, in plain arithmetic the compiler vectorizes. glibc's tanhf
// and expf are a call per element (tanhf through expm1f): in a transformer's MLP the tanh-form
// gelu and its gradient spent a fifth of a CPU training step in tanhf, softmax a few percent in
// expf. These have no branches, calls or tables, so a contiguous elementwise loop over them
// becomes SIMD code. Errors (tests/unit/ulp_test.cpp, over every float magnitude): tanh within 2
// ULPs, glibc's own bound in docs/ops.md's table; exp within 2 ULPs, used only inside softmax and
// cross-entropy, whose table rows allow 3 per exp (dax::exp itself keeps glibc's, 1 ULP, for its
// row). CUDA device code, -ffast-math builds (where the compiler vectorizes the library's own
// functions) and double keep the library's functions.
//   e^y:  2^k e^r with k = round(y / ln 2), r = y - k ln 2 (ln 2 in two parts, |r| <= ln2/2), e^r
//         by its Taylor series to r^7 (truncation below 2^-27), 2^k built from its exponent bits
//         (in two factors for exp, so results down to the subnormals come out right)
//   tanh: |x| < 0.625: x + x^3 P(x^2), P a least-squares fit of (tanh(x) - x) / x^3 in relative
//         error; otherwise 1 - 2 / (e^{2|x|} + 1), |x| capped at 10, where tanh rounds to 1
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <dax/core/macros.hpp>

namespace dax::detail {

/// `pick ? a : b` as bit masks. Written as a conditional, GCC sinks the arithmetic that uses the
/// result into the two branches (under its default -ftrapping-math that arithmetic may trap, so
/// the loop is then not vectorized).
DAX_ALWAYS_INLINE float select_float(bool pick, float a, float b) {
  uint32_t a_bits, b_bits;
  std::memcpy(&a_bits, &a, sizeof a_bits);
  std::memcpy(&b_bits, &b, sizeof b_bits);
  const uint32_t mask = 0u - static_cast<uint32_t>(pick);
  const uint32_t bits = (a_bits & mask) | (b_bits & ~mask);
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

/// 2^k for k in [-126, 127], from its exponent bits.
DAX_ALWAYS_INLINE float pow2_float(int32_t k) {
  const int32_t bits = (k + 127) << 23;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

/// e^r for |r| <= ln2 / 2: the Taylor series to r^7 by Horner.
DAX_ALWAYS_INLINE float exp_reduced(float r) {
  float e = 1.98412698e-04f;  // 1/7!
  e = e * r + 1.38888889e-03f;
  e = e * r + 8.33333333e-03f;
  e = e * r + 4.16666667e-02f;
  e = e * r + 1.66666667e-01f;
  e = e * r + 0.5f;
  e = e * r + 1.0f;
  return e * r + 1.0f;
}

/// r = y - k ln 2 with ln 2 in two parts (the first with trailing zero bits, so k times it is exact).
DAX_ALWAYS_INLINE float reduce_ln2(float y, float k) { return (y - k * 0.693145752f) - k * 1.42860677e-06f; }

/// e^x for float, vectorizable (see the top of this file).
DAX_ALWAYS_INLINE float exp_float(float x) {
  // Quiet comparisons (no "invalid" on NaN) and selects between computed values only. Past 89
  // the result overflows to inf; at -104 and below it is 0, picked at the end: those lanes compute
  // e^-87 meanwhile, because a subnormal product takes a slow microcode path (a causal softmax has
  // half its scores masked to the lowest float, all of them down there).
  const float capped = select_float(std::isless(x, 89.0f), x, 89.0f);
  const bool underflows = !std::isgreater(capped, -104.0f);
  const float y = select_float(underflows, -87.0f, capped);
  const float t = y * 1.44269504f;
  const int32_t k_int = static_cast<int32_t>(t + select_float(std::isless(t, 0.0f), -0.5f, 0.5f));  // round
  const float e = exp_reduced(reduce_ln2(y, static_cast<float>(k_int)));
  const int32_t half = k_int / 2;  // k in [-150, 129]: two factors, each a normal power of two
  const float result = select_float(underflows, 0.0f, e * pow2_float(half) * pow2_float(k_int - half));
  return select_float(std::isunordered(x, x), x, result);
}

/// tanh(x) for float, vectorizable (see the top of this file).
DAX_ALWAYS_INLINE float tanh_float(float x) {
  const float a = std::fabs(x);
  // Small |x|: odd polynomial.
  const float s = a * a;
  float p = 2.147793107e-03f;
  p = p * s + -8.182951570e-03f;
  p = p * s + 2.170307838e-02f;
  p = p * s + -5.394722436e-02f;
  p = p * s + 1.333320992e-01f;
  p = p * s + -3.333333091e-01f;
  const float small = a + a * s * p;
  // Large |x|: through e^{2|x|}, y in [0, 20], so k in [0, 29].
  const float two_a = 2.0f * a;
  const float y = select_float(std::isless(two_a, 20.0f), two_a, 20.0f);  // also keeps NaN out of k
  const int32_t k_int = static_cast<int32_t>(y * 1.44269504f + 0.5f);      // round(y / ln 2): y >= 0
  const float e = exp_reduced(reduce_ln2(y, static_cast<float>(k_int)));
  const float large = 1.0f - 2.0f / (e * pow2_float(k_int) + 1.0f);
  const float t = std::copysign(select_float(std::isless(a, 0.625f), small, large), x);
  return select_float(std::isunordered(x, x), x, t);
}

/// The library's tanh, except float on the host (tanh_float).
template <class C>
DAX_HOST_DEVICE DAX_ALWAYS_INLINE C fast_tanh(C v) {
#if defined(__CUDA_ARCH__) || defined(__FAST_MATH__)
  return std::tanh(v);
#else
  if constexpr (std::is_same_v<C, float>) return tanh_float(v);
  else return std::tanh(v);
#endif
}

/// The library's exp, except float on the host (exp_float); for softmax and cross-entropy only.
template <class C>
DAX_HOST_DEVICE DAX_ALWAYS_INLINE C fast_exp(C v) {
#if defined(__CUDA_ARCH__) || defined(__FAST_MATH__)
  return std::exp(v);
#else
  if constexpr (std::is_same_v<C, float>) return exp_float(v);
  else return std::exp(v);
#endif
}

}  // namespace dax::detail
