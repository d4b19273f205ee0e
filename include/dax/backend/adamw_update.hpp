// The contract of AdamW's update of many tensors in one kernel (backend/cpu/adamw.hpp,
// backend/cuda/adamw.cuh; multi-tensor apply, as apex's and torch's fused AdamW): each tensor's
// parameter, gradient and two moments (one device's pieces, all of one local shape) in, its new
// parameter and moments out. The arithmetic is PyTorch's, in the compute type C (float for the
// 16-bit types), each new moment rounded to T before the parameter's update reads it.
#pragma once

#include <cmath>
#include <cstdint>

#include <dax/core/macros.hpp>

namespace dax::detail {

/// One tensor's pieces: n elements each.
template <class T>
struct AdamWTensor {
  const T *p, *g, *m, *v;
  T *p_out, *m_out, *v_out;
  int64_t n;
};

/// A step's coefficients, computed once on the host in double.
template <class C>
struct AdamWCoefficients {
  C b1, one_minus_b1, b2, one_minus_b2;
  C decay;         // 1 - lr weight_decay
  C step_size;     // lr / (1 - b1^t)
  C inv_sqrt_bc2;  // 1 / sqrt(1 - b2^t)
  C eps;

  /// m' = b1 m + (1 - b1) g, v' = b2 v + (1 - b2) g², p' = p decay - step_size m' / (sqrt(v') inv_sqrt_bc2 + eps).
  template <class T>
  DAX_HOST_DEVICE void operator()(const AdamWTensor<T>& t, int64_t i) const {
    const C g = static_cast<C>(t.g[i]);
    const T m = static_cast<T>(b1 * static_cast<C>(t.m[i]) + one_minus_b1 * g);
    const T v = static_cast<T>(b2 * static_cast<C>(t.v[i]) + one_minus_b2 * g * g);
    const C denom = std::sqrt(static_cast<C>(v)) * inv_sqrt_bc2 + eps;
    t.p_out[i] = static_cast<T>(static_cast<C>(t.p[i]) * decay - step_size * static_cast<C>(m) / denom);
    t.m_out[i] = m;
    t.v_out[i] = v;
  }
};

}  // namespace dax::detail
