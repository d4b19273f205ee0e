// What the elementwise ops' pullbacks compute, beside their forward functors (JAX keeps a
// primitive's transpose beside it): each input cotangent is one fused kernel of the output
// cotangent g and the saved operands, so a backward elementwise step costs one pass like its
// forward. All are linear in g (the first operand), so an unreduced g stays unreduced. And sum_to,
// which undoes broadcasting: the cotangent of a stretched operand is summed over the stretched
// dimensions (DESIGN §6: over a split batch dimension that leaves a partial sum, reduced once later).
#pragma once

#include <cmath>

#include <dax/core/float16.hpp>
#include <dax/core/macros.hpp>
#include <dax/core/float_math.hpp>
#include <dax/core/shape.hpp>

namespace dax {

template <class T>
class DistArray;

namespace detail {

/// g summed down to `shape` (the shape an operand had before broadcasting); partial sums over
/// split dimensions stay unreduced. Defined with the reductions (ops/reduction.hpp).
template <class T>
DistArray<T> sum_to(const DistArray<T>& g, const Shape& shape);

namespace fn {

#define DAX_GRAD_FN(Name, expr)                                                     \
  struct Name {                                                                     \
    template <class T>                                                              \
    DAX_HOST_DEVICE T operator()(T cotangent, T saved) const {                      \
      using C = compute_t<T>;                                                       \
      const C g = static_cast<C>(cotangent), v = static_cast<C>(saved);             \
      return static_cast<T>(expr);                                                  \
    }                                                                               \
  };
// `v` is the saved input x or output y, as each name says.
DAX_GRAD_FN(AbsGradX, v > C(0) ? g : (v < C(0) ? C(-g) : C(0)))
DAX_GRAD_FN(SquareGradX, C(2) * g * v)
DAX_GRAD_FN(ReluGradX, v > C(0) ? g : C(0))
DAX_GRAD_FN(SqrtGradY, C(0.5) * g / v)
DAX_GRAD_FN(RsqrtGradX, C(-0.5) * g / (v * std::sqrt(v)))
DAX_GRAD_FN(SinGradX, g * std::cos(v))
DAX_GRAD_FN(CosGradX, -g * std::sin(v))
DAX_GRAD_FN(TanhGradY, g * (C(1) - v * v))
DAX_GRAD_FN(SigmoidGradY, g * v * (C(1) - v))
#undef DAX_GRAD_FN

/// gelu (the tanh form): d/dx of 0.5 x (1 + tanh(u)), u = s (x + 0.044715 x^3), s = sqrt(2/pi).
struct GeluGradX {
  template <class T>
  DAX_HOST_DEVICE T operator()(T cotangent, T saved) const {
    using C = compute_t<T>;
    const C g = static_cast<C>(cotangent), x = static_cast<C>(saved);
    const C s = C(0.7978845608028654), k = C(0.044715);
    const C t = fast_tanh(s * (x + k * x * x * x));
    return static_cast<T>(g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * s * (C(1) + C(3) * k * x * x)));
  }
};

/// gelu (the erf form): d/dx of 0.5 x (1 + erf(x / sqrt 2)) = 0.5 (1 + erf(x / sqrt 2)) + x phi(x),
/// phi the standard normal density.
struct GeluErfGradX {
  template <class T>
  DAX_HOST_DEVICE T operator()(T cotangent, T saved) const {
    using C = compute_t<T>;
    const C g = static_cast<C>(cotangent), x = static_cast<C>(saved);
    const C cdf = C(0.5) * (C(1) + std::erf(x * C(0.7071067811865476)));
    const C pdf = C(0.3989422804014327) * std::exp(C(-0.5) * x * x);
    return static_cast<T>(g * (cdf + x * pdf));
  }
};

/// silu: d/dx of x s(x) = s(x) (1 + x (1 - s(x))), s the sigmoid.
struct SiluGradX {
  template <class T>
  DAX_HOST_DEVICE T operator()(T cotangent, T saved) const {
    using C = compute_t<T>;
    const C g = static_cast<C>(cotangent), x = static_cast<C>(saved);
    const C s = C(1) / (C(1) + std::exp(-x));
    return static_cast<T>(g * s * (C(1) + x * (C(1) - s)));
  }
};

#define DAX_GRAD_FN3(Name, expr)                                                    \
  struct Name {                                                                     \
    template <class T>                                                              \
    DAX_HOST_DEVICE T operator()(T cotangent, T first, T second) const {            \
      using C = compute_t<T>;                                                       \
      const C g = static_cast<C>(cotangent), a = static_cast<C>(first), b = static_cast<C>(second); \
      return static_cast<T>(expr);                                                  \
    }                                                                               \
  };
// maximum / minimum: the chosen operand gets g; ties split it evenly (as JAX's balanced rule).
DAX_GRAD_FN3(MaximumGradA, a > b ? g : (a == b ? C(0.5) * g : C(0)))
DAX_GRAD_FN3(MinimumGradA, a < b ? g : (a == b ? C(0.5) * g : C(0)))
// a / b with respect to b: -g a / b^2.
DAX_GRAD_FN3(DivideGradB, -g * a / (b * b))
// a^b with respect to a: g b a^(b-1); with respect to b: g a^b log(a) (zero where a == 0).
DAX_GRAD_FN3(PowGradA, g * b * std::pow(a, b - C(1)))
DAX_GRAD_FN3(PowGradB, a == C(0) ? C(0) : g * std::pow(a, b) * std::log(a))
#undef DAX_GRAD_FN3

/// cond ? g : 0, and cond ? 0 : g.
struct WhereTrue {
  template <class T>
  DAX_HOST_DEVICE T operator()(T g, bool cond) const { return cond ? g : T(0); }
};
struct WhereFalse {
  template <class T>
  DAX_HOST_DEVICE T operator()(T g, bool cond) const { return cond ? T(0) : g; }
};

}  // namespace fn
}  // namespace detail
}  // namespace dax
