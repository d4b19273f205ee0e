// tanh for float on the CPU, in plain arithmetic the compiler vectorizes. glibc's tanhf is a call
// per element (through expm1f): in a transformer's MLP the tanh-form gelu and its gradient spent
// a fifth of a CPU training step there. This one has no branches, calls or tables, so a
// contiguous elementwise loop over it becomes SIMD code; its error is within 2 ULPs (tested over
// every float magnitude in tests/unit/ulp_test.cpp), glibc's own bound in docs/ops.md's table.
// CUDA device code and double keep the library's tanh.
//   |x| < 0.625:  x + x^3 P(x^2), P a least-squares fit of (tanh(x) - x) / x^3 in relative error
//   otherwise:    1 - 2 / (e^{2|x|} + 1), e^y = 2^k e^r with |r| <= ln2/2 and e^r by its Taylor
//                 series to r^7 (error below 2^-27); |x| is capped at 10, where tanh rounds to 1
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
  // Large |x|: through e^{2|x|}. The cap also keeps NaN out of the float-to-int conversion.
  const float two_a = 2.0f * a;
  const float y = select_float(std::isless(two_a, 20.0f), two_a, 20.0f);  // quiet: no "invalid" on NaN
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float k = (y * 1.44269504f + shifter) - shifter;
  const float r = (y - k * 0.693145752f) - k * 1.42860677e-06f;  // ln 2 in two parts
  float e = 1.98412698e-04f;  // 1/7!, then Horner down to 1/0!
  e = e * r + 1.38888889e-03f;
  e = e * r + 8.33333333e-03f;
  e = e * r + 4.16666667e-02f;
  e = e * r + 1.66666667e-01f;
  e = e * r + 0.5f;
  e = e * r + 1.0f;
  e = e * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float two_k;
  std::memcpy(&two_k, &bits, sizeof two_k);
  const float large = 1.0f - 2.0f / (e * two_k + 1.0f);
  const float t = std::copysign(select_float(std::isless(a, 0.625f), small, large), x);
  return select_float(std::isunordered(x, x), x, t);
}

/// The library's tanh, except float on the host (tanh_float).
template <class C>
DAX_HOST_DEVICE DAX_ALWAYS_INLINE C fast_tanh(C v) {
#if defined(__CUDA_ARCH__)
  return std::tanh(v);
#else
  if constexpr (std::is_same_v<C, float>) return tanh_float(v);
  else return std::tanh(v);
#endif
}

}  // namespace dax::detail
