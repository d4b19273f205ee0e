// The optimizers' per-element updates as DAX_HOST_DEVICE function objects (ops/functors.hpp's
// style), so one broadcast_map kernel runs each on CPU and GPU (AdamW's, all three new values in
// one kernel over many tensors, is backend/adamw_update.hpp's). Coefficients are computed once
// per step on the host, in double, and arrive in the compute type C (float for 16-bit elements).
#pragma once

#include <cmath>

#include <dax/core/float16.hpp>
#include <dax/core/macros.hpp>

namespace dax::detail::fn {

/// SGD without momentum: p - lr (g + wd p).
template <class C>
struct SgdParam {
  C lr, weight_decay;
  template <class T>
  DAX_HOST_DEVICE T operator()(T p, T g) const {
    const C x = static_cast<C>(p);
    return static_cast<T>(x - lr * (static_cast<C>(g) + weight_decay * x));
  }
};

/// SGD's momentum buffer: g + wd p on the first step, then momentum buf + (1 - dampening)(g + wd p).
template <class C>
struct SgdMomentum {
  C momentum, one_minus_dampening, weight_decay;
  bool first;
  template <class T>
  DAX_HOST_DEVICE T operator()(T buf, T g, T p) const {
    const C d = static_cast<C>(g) + weight_decay * static_cast<C>(p);
    return static_cast<T>(first ? d : momentum * static_cast<C>(buf) + one_minus_dampening * d);
  }
};

/// SGD's step with the new buffer: p - lr buf, or with Nesterov p - lr (g + wd p + momentum buf).
template <class C>
struct SgdMomentumParam {
  C lr, momentum, weight_decay;
  bool nesterov;
  template <class T>
  DAX_HOST_DEVICE T operator()(T p, T g, T buf) const {
    const C x = static_cast<C>(p), b = static_cast<C>(buf);
    const C d = nesterov ? static_cast<C>(g) + weight_decay * x + momentum * b : b;
    return static_cast<T>(x - lr * d);
  }
};

/// x² in the accumulation type A (the global norm's terms).
template <class A>
struct SquareAs {
  template <class T>
  DAX_HOST_DEVICE A operator()(T v) const {
    const A x = static_cast<A>(static_cast<compute_t<T>>(v));
    return x * x;
  }
};

}  // namespace dax::detail::fn
