// Elementwise ops on DistArrays, with NumPy broadcasting between arrays and with scalars: each
// call looks up its cached sharding rule, reshards the operands that must move, and runs one
// broadcasting kernel over this rank's piece of the output.
#pragma once

#include <cmath>
#include <tuple>
#include <utility>
#include <type_traits>

#include <dax/array/creation.hpp>
#include <dax/array/reshard.hpp>
#include <dax/array/profile_hook.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/array/trace.hpp>
#include <dax/ops/elementwise_vjp.hpp>
#include <dax/ops/functors.hpp>
#include <dax/ops/elementwise_rule.hpp>
#include <dax/ops/rule_cache.hpp>

namespace dax {
namespace detail {

inline RuleCache<ElementwiseRule>& elementwise_rules() {
  static RuleCache<ElementwiseRule> cache;
  return cache;
}

/// out = f(xs...) elementwise, broadcasting, under the elementwise sharding rule. `f` is a
/// DAX_HOST_DEVICE function object (ops/functors.hpp): the same one runs on CPU and GPU.
template <class Out, class F, class... T>
DistArray<Out> map(Linearity linearity, F f, const DistArray<T>&... xs) {
  const ProfiledOp profiled(function_name<F>(), xs...);
  const ElementwiseRule& rule = elementwise_rules().get(
      RuleKey{static_cast<int>(linearity), {xs.shape()...}, {xs.sharding()...}, {}},
      [&] { return elementwise_rule({xs.shape()...}, {xs.sharding()...}, linearity); });
  // Operands moved to the rule's shardings (in order: argument evaluation order is unspecified).
  const auto moved = [&]<size_t... I>(std::index_sequence<I...>) {
    return std::make_tuple(operand_to(xs, rule.inputs[I], function_name<F>())...);
  }(std::index_sequence_for<T...>{});
  Runtime& rt = Runtime::current();
  if (!rule.output.mesh().contains(rt.rank())) return DistArray<Out>(rule.out_shape, rule.output, nullptr);
  const Shape local = box_shape(rule.output.device_indices(rt.rank(), rule.out_shape));
  auto buffer = dev::allocate(numel(local) * sizeof(Out));
  std::apply(
      [&](const auto&... m) {
        dev::broadcast_map(static_cast<Out*>(buffer->data()), local,
                           {broadcast_strides(m.local_shape(), local)...}, f, m.local_data().data()...);
      },
      moved);
  return DistArray<Out>(rule.out_shape, rule.output, std::move(buffer));
}

}  // namespace detail

// ---- binary ops between arrays ----
// Each op records its pullback while a gradient is being taken (array/trace.hpp); the cotangents
// are fused kernels (elementwise_vjp.hpp) summed back to each operand's shape.
namespace detail {

/// The cotangent `g` (of a broadcast result) for an operand of shape `shape`, if `need`.
template <class T>
AnyArray cotangent_for(bool need, const DistArray<T>& g, const Shape& shape) {
  return need ? AnyArray(sum_to(g, shape)) : AnyArray();
}

/// g . f(g, saved...) as one kernel, summed to `shape`, if `need`.
template <class F, class T, class... S>
AnyArray fused_cotangent(bool need, F f, const Shape& shape, const DistArray<T>& g, const DistArray<S>&... saved) {
  return need ? AnyArray(sum_to(map<T>(Linearity::scaling, f, g, saved...), shape)) : AnyArray();
}

}  // namespace detail

template <class T> DistArray<T> add(const DistArray<T>& a, const DistArray<T>& b) {
  auto out = detail::map<T>(detail::Linearity::additive, detail::fn::Add{}, a, b);
  detail::record("add", out, [&](auto need) {
    return [need, as = a.shape(), bs = b.shape()](const DistArray<T>& g) {
      return detail::Cotangents{detail::cotangent_for(detail::wanted_now(need, 0), g, as), detail::cotangent_for(detail::wanted_now(need, 1), g, bs)};
    };
  }, a, b);
  return out;
}
template <class T> DistArray<T> subtract(const DistArray<T>& a, const DistArray<T>& b) {
  auto out = detail::map<T>(detail::Linearity::additive, detail::fn::Subtract{}, a, b);
  detail::record("subtract", out, [&](auto need) {
    return [need, as = a.shape(), bs = b.shape()](const DistArray<T>& g) {
      return detail::Cotangents{detail::cotangent_for(detail::wanted_now(need, 0), g, as),
                                detail::wanted_now(need, 1) ? detail::AnyArray(detail::sum_to(neg(g), bs)) : detail::AnyArray()};
    };
  }, a, b);
  return out;
}
template <class T> DistArray<T> multiply(const DistArray<T>& a, const DistArray<T>& b) {
  auto out = detail::map<T>(detail::Linearity::scaling, detail::fn::Multiply{}, a, b);
  detail::record("multiply", out, [&](auto need) {
    return [need, a, b](const DistArray<T>& g) {
      return detail::Cotangents{detail::fused_cotangent(detail::wanted_now(need, 0), detail::fn::Multiply{}, a.shape(), g, b),
                                detail::fused_cotangent(detail::wanted_now(need, 1), detail::fn::Multiply{}, b.shape(), g, a)};
    };
  }, a, b);
  return out;
}
/// Division keeps partial sums only for floating types: integer division does not distribute.
template <class T>
inline constexpr detail::Linearity division_linearity =
    detail::is_floating_v<T> || detail::is_complex_v<T> ? detail::Linearity::scaling : detail::Linearity::none;

template <class T> DistArray<T> divide(const DistArray<T>& a, const DistArray<T>& b) {
  auto out = detail::map<T>(division_linearity<T>, detail::fn::Divide{}, a, b);
  detail::record("divide", out, [&](auto need) {
    return [need, a, b](const DistArray<T>& g) {
      return detail::Cotangents{detail::fused_cotangent(detail::wanted_now(need, 0), detail::fn::Divide{}, a.shape(), g, b),
                                detail::fused_cotangent(detail::wanted_now(need, 1), detail::fn::DivideGradB{}, b.shape(), g, a, b)};
    };
  }, a, b);
  return out;
}
template <class T> DistArray<T> pow(const DistArray<T>& a, const DistArray<T>& b) {
  auto out = detail::map<T>(detail::Linearity::none, detail::fn::Pow{}, a, b);
  detail::record("pow", out, [&](auto need) {
    return [need, a, b](const DistArray<T>& g) {
      return detail::Cotangents{detail::fused_cotangent(detail::wanted_now(need, 0), detail::fn::PowGradA{}, a.shape(), g, a, b),
                                detail::fused_cotangent(detail::wanted_now(need, 1), detail::fn::PowGradB{}, b.shape(), g, a, b)};
    };
  }, a, b);
  return out;
}
template <class T> DistArray<T> maximum(const DistArray<T>& a, const DistArray<T>& b) {
  auto out = detail::map<T>(detail::Linearity::none, detail::fn::Maximum{}, a, b);
  detail::record("maximum", out, [&](auto need) {
    return [need, a, b](const DistArray<T>& g) {
      return detail::Cotangents{detail::fused_cotangent(detail::wanted_now(need, 0), detail::fn::MaximumGradA{}, a.shape(), g, a, b),
                                detail::fused_cotangent(detail::wanted_now(need, 1), detail::fn::MaximumGradA{}, b.shape(), g, b, a)};
    };
  }, a, b);
  return out;
}
template <class T> DistArray<T> minimum(const DistArray<T>& a, const DistArray<T>& b) {
  auto out = detail::map<T>(detail::Linearity::none, detail::fn::Minimum{}, a, b);
  detail::record("minimum", out, [&](auto need) {
    return [need, a, b](const DistArray<T>& g) {
      return detail::Cotangents{detail::fused_cotangent(detail::wanted_now(need, 0), detail::fn::MinimumGradA{}, a.shape(), g, a, b),
                                detail::fused_cotangent(detail::wanted_now(need, 1), detail::fn::MinimumGradA{}, b.shape(), g, b, a)};
    };
  }, a, b);
  return out;
}

template <class T> DistArray<T> operator+(const DistArray<T>& a, const DistArray<T>& b) { return add(a, b); }
template <class T> DistArray<T> operator-(const DistArray<T>& a, const DistArray<T>& b) { return subtract(a, b); }
template <class T> DistArray<T> operator*(const DistArray<T>& a, const DistArray<T>& b) { return multiply(a, b); }
template <class T> DistArray<T> operator/(const DistArray<T>& a, const DistArray<T>& b) { return divide(a, b); }

// ---- comparisons: DistArray<bool> ----
#define DAX_COMPARISON(name, Fn, op)                                                               \
  template <class T>                                                                             \
  DistArray<bool> name(const DistArray<T>& a, const DistArray<T>& b) {                           \
    auto out = detail::map<bool>(detail::Linearity::none, detail::fn::Fn{}, a, b);              \
    detail::record_typing(#name, out, a, b);                                                     \
    return out;                                                                                  \
  }                                                                                              \
  template <class T>                                                                             \
  DistArray<bool> operator op(const DistArray<T>& a, const DistArray<T>& b) { return name(a, b); }
DAX_COMPARISON(equal, Equal, ==)
DAX_COMPARISON(not_equal, NotEqual, !=)
DAX_COMPARISON(less, Less, <)
DAX_COMPARISON(less_equal, LessEqual, <=)
DAX_COMPARISON(greater, Greater, >)
DAX_COMPARISON(greater_equal, GreaterEqual, >=)
#undef DAX_COMPARISON

/// cond ? a : b, elementwise, broadcasting all three.
template <class T>
DistArray<T> where(const DistArray<bool>& cond, const DistArray<T>& a, const DistArray<T>& b) {
  auto out = detail::map<T>(detail::Linearity::none, detail::fn::Where{}, cond, a, b);
  detail::record("where", out, [&](auto need) {
    return [need, cond, as = a.shape(), bs = b.shape()](const DistArray<T>& g) {
      return detail::Cotangents{detail::AnyArray(),
                                detail::fused_cotangent(detail::wanted_now(need, 1), detail::fn::WhereTrue{}, as, g, cond),
                                detail::fused_cotangent(detail::wanted_now(need, 2), detail::fn::WhereFalse{}, bs, g, cond)};
    };
  }, cond, a, b);
  return out;
}

/// The array converted elementwise to U. Differentiable between floating types (the cotangent is
/// converted back); a conversion to an integer type ends the gradient. A widening conversion
/// between floating types is exact, so partial sums stay unreduced through it and are summed in the
/// wider type: the gradient of float32 master weights used in bfloat16 is reduced in float32 (mixed
/// precision's usual policy: docs/training.md). A narrowing one sums them first, in the wider type.
namespace detail {
/// How a conversion from T to U treats partial sums: kept through a widening one between floating
/// types (exact), summed first otherwise.
template <class T, class U>
constexpr Linearity cast_linearity() {
  return is_floating_v<T> && is_floating_v<U> && sizeof(U) > sizeof(T) ? Linearity::additive : Linearity::none;
}
}  // namespace detail

template <class U, class T>
DistArray<U> astype(const DistArray<T>& x) {
  auto out = detail::map<U>(detail::cast_linearity<T, U>(), detail::fn::Cast<U>{}, x);
  if constexpr (detail::is_floating_v<T>) {
    detail::record("astype", out, [&](auto) {
      return [](const DistArray<U>& g) { return detail::Cotangents{detail::AnyArray(astype<T>(g))}; };
    }, x);
  } else {
    detail::record_typing("astype", out, x);
  }
  return out;
}

// ---- with scalars ----
template <class T, class S>
concept Scalar = (std::is_arithmetic_v<S> || detail::is_float16_v<S> || (detail::is_complex_v<S> && std::is_same_v<S, T>)) &&
                 !std::is_same_v<S, bool>;

namespace detail {

/// out = f(a, s) or f(s, a) elementwise, recording `grad(g, a, out)` as a's cotangent.
template <class T, class F, class Grad>
DistArray<T> scalar_op(const char* name, Linearity linearity, F f, const DistArray<T>& a, Grad grad) {
  auto out = map<T>(linearity, f, a);
  record(name, out, [&](auto) {
    return [grad, a, out](const DistArray<T>& g) { return Cotangents{AnyArray(grad(g, a, out))}; };
  }, a);
  return out;
}

}  // namespace detail

// The scalar is converted to T first (as the kernels always did), so each op below is one
// function template of T alone: the operators are one-line wrappers, and a compiled build
// instantiates these once per element type (compiled/instantiations.hpp).
namespace detail {

template <class T>
DistArray<T> add_scalar(const DistArray<T>& a, T s) {
  return scalar_op("add", Linearity::none, fn::BindRight<fn::Add, T>{s}, a,
                   [](const auto& g, const auto&, const auto&) { return g; });
}
template <class T>
DistArray<T> subtract_scalar(const DistArray<T>& a, T s) {
  return scalar_op("subtract", Linearity::none, fn::BindRight<fn::Subtract, T>{s}, a,
                   [](const auto& g, const auto&, const auto&) { return g; });
}
template <class T>
DistArray<T> scalar_subtract(T s, const DistArray<T>& a) {
  return scalar_op("subtract", Linearity::none, fn::BindLeft<fn::Subtract, T>{s}, a,
                   [](const auto& g, const auto&, const auto&) { return neg(g); });
}
template <class T>
DistArray<T> multiply_scalar(const DistArray<T>& a, T s) {  // exact on partial sums: stays unreduced
  return scalar_op("multiply", Linearity::scaling, fn::BindRight<fn::Multiply, T>{s}, a,
                   [s](const auto& g, const auto&, const auto&) { return multiply_scalar(g, s); });
}
template <class T>
DistArray<T> divide_scalar(const DistArray<T>& a, T s) {
  return scalar_op("divide", division_linearity<T>, fn::BindRight<fn::Divide, T>{s}, a,
                   [s](const auto& g, const auto&, const auto&) { return divide_scalar(g, s); });
}
template <class T>
DistArray<T> scalar_divide(T s, const DistArray<T>& a) {  // d(s/a) = -g s / a^2
  return scalar_op("divide", Linearity::none, fn::BindLeft<fn::Divide, T>{s}, a,
                   [s](const auto& g, const auto& x, const auto&) {
                     const auto numerator = full<T>(Shape{}, s, NamedSharding(x.sharding().mesh(), P()));
                     return map<T>(Linearity::scaling, fn::DivideGradB{}, g, numerator, x);
                   });
}
template <class T>
DistArray<T> maximum_scalar(const DistArray<T>& a, T s) {
  return scalar_op("maximum", Linearity::none, fn::BindRight<fn::Maximum, T>{s}, a,
                   [s](const auto& g, const auto& x, const auto&) {
                     const auto bound = full<T>(Shape{}, s, NamedSharding(x.sharding().mesh(), P()));
                     return map<T>(Linearity::scaling, fn::MaximumGradA{}, g, x, bound);
                   });
}
template <class T>
DistArray<T> minimum_scalar(const DistArray<T>& a, T s) {
  return scalar_op("minimum", Linearity::none, fn::BindRight<fn::Minimum, T>{s}, a,
                   [s](const auto& g, const auto& x, const auto&) {
                     const auto bound = full<T>(Shape{}, s, NamedSharding(x.sharding().mesh(), P()));
                     return map<T>(Linearity::scaling, fn::MinimumGradA{}, g, x, bound);
                   });
}

}  // namespace detail

template <class T, class S> requires Scalar<T, S>
DistArray<T> operator+(const DistArray<T>& a, S s) { return detail::add_scalar(a, T(s)); }
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator+(S s, const DistArray<T>& a) { return detail::add_scalar(a, T(s)); }
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator-(const DistArray<T>& a, S s) { return detail::subtract_scalar(a, T(s)); }
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator-(S s, const DistArray<T>& a) { return detail::scalar_subtract(T(s), a); }
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator*(const DistArray<T>& a, S s) { return detail::multiply_scalar(a, T(s)); }
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator*(S s, const DistArray<T>& a) { return detail::multiply_scalar(a, T(s)); }
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator/(const DistArray<T>& a, S s) { return detail::divide_scalar(a, T(s)); }
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator/(S s, const DistArray<T>& a) { return detail::scalar_divide(T(s), a); }
template <class T, class S> requires Scalar<T, S>
DistArray<T> pow(const DistArray<T>& a, S s) {  // g s a^(s-1)
  return detail::scalar_op("pow", detail::Linearity::none, detail::fn::BindRight<detail::fn::Pow, T>{T(s)}, a,
                           [s](const auto& g, const auto& x, const auto&) {
                             return g * detail::map<T>(detail::Linearity::none,
                                                       detail::fn::BindRight<detail::fn::Pow, T>{T(s - S(1))}, x) * s;
                           });
}
template <class T, class S> requires Scalar<T, S>
DistArray<T> maximum(const DistArray<T>& a, S s) { return detail::maximum_scalar(a, T(s)); }
template <class T, class S> requires Scalar<T, S>
DistArray<T> minimum(const DistArray<T>& a, S s) { return detail::minimum_scalar(a, T(s)); }

// ---- comparisons with a scalar, either side: DistArray<bool>, no gradient (like the array
// comparisons: a boolean result ends the gradient path, it does not stop a loss that uses one) ----
#define DAX_SCALAR_COMPARISON(name, Fn, op)                                                \
  template <class T, class S> requires Scalar<T, S>                                                  \
  DistArray<bool> name(const DistArray<T>& a, S s) {                                                  \
    auto out = detail::map<bool>(detail::Linearity::none, detail::fn::BindRight<detail::fn::Fn, T>{T(s)}, a); \
    detail::record_typing(#name, out, a);                                                            \
    return out;                                                                                      \
  }                                                                                                  \
  template <class T, class S> requires Scalar<T, S>                                                  \
  DistArray<bool> name(S s, const DistArray<T>& a) {                                                  \
    auto out = detail::map<bool>(detail::Linearity::none, detail::fn::BindLeft<detail::fn::Fn, T>{T(s)}, a); \
    detail::record_typing(#name, out, a);                                                            \
    return out;                                                                                      \
  }                                                                                                  \
  template <class T, class S> requires Scalar<T, S>                                                  \
  DistArray<bool> operator op(const DistArray<T>& a, S s) { return name(a, s); }                      \
  template <class T, class S> requires Scalar<T, S>                                                  \
  DistArray<bool> operator op(S s, const DistArray<T>& a) { return name(s, a); }
DAX_SCALAR_COMPARISON(equal, Equal, ==)
DAX_SCALAR_COMPARISON(not_equal, NotEqual, !=)
DAX_SCALAR_COMPARISON(less, Less, <)
DAX_SCALAR_COMPARISON(less_equal, LessEqual, <=)
DAX_SCALAR_COMPARISON(greater, Greater, >)
DAX_SCALAR_COMPARISON(greater_equal, GreaterEqual, >=)
#undef DAX_SCALAR_COMPARISON

// ---- unary ----
namespace detail {

/// out = f(x), recording x's cotangent as the fused kernel Grad{}(g, x) or Grad{}(g, out) (the
/// last argument only names the kernel's type).
template <class T, class F, class Grad, bool UsesOutput = false>
DistArray<T> unary_op(const char* name, Linearity linearity, F f, const DistArray<T>& x, Grad) {
  auto out = map<T>(linearity, f, x);
  record(name, out, [&](auto) {
    return [x = UsesOutput ? out : x](const DistArray<T>& g) {
      return Cotangents{AnyArray(map<T>(Linearity::scaling, Grad{}, g, x))};
    };
  }, x);
  return out;
}

}  // namespace detail

template <class T> DistArray<T> neg(const DistArray<T>& x) {
  auto out = detail::map<T>(detail::Linearity::additive, detail::fn::Negate{}, x);
  detail::record("neg", out, [&](auto) {
    return [](const DistArray<T>& g) { return detail::Cotangents{detail::AnyArray(neg(g))}; };
  }, x);
  return out;
}
template <class T> DistArray<T> operator-(const DistArray<T>& x) { return neg(x); }
template <class T>
  requires(!detail::is_complex_v<T>)  // a complex array's abs is real: ops/complex.hpp
DistArray<T> abs(const DistArray<T>& x) {
  return detail::unary_op("abs", detail::Linearity::none, detail::fn::Abs{}, x, detail::fn::AbsGradX{});
}
template <class T> DistArray<T> square(const DistArray<T>& x) {
  return detail::unary_op("square", detail::Linearity::none, detail::fn::Square{}, x, detail::fn::SquareGradX{});
}
template <class T> DistArray<T> relu(const DistArray<T>& x) {
  return detail::unary_op("relu", detail::Linearity::none, detail::fn::Relu{}, x, detail::fn::ReluGradX{});
}

// Each with its cotangent: a fused kernel of g and the saved input (X) or output (Y).
#define DAX_FLOAT_UNARY(name, Fn, Grad, uses_output)                                              \
  template <class T>                                                                              \
    requires detail::is_floating_v<T>                                                             \
  DistArray<T> name(const DistArray<T>& x) {                                                      \
    return detail::unary_op<T, detail::fn::Fn, detail::fn::Grad, uses_output>(                    \
        #name, detail::Linearity::none, detail::fn::Fn{}, x, detail::fn::Grad{});                 \
  }
DAX_FLOAT_UNARY(exp, Exp, Multiply, true)
DAX_FLOAT_UNARY(log, Log, Divide, false)
DAX_FLOAT_UNARY(sqrt, Sqrt, SqrtGradY, true)
DAX_FLOAT_UNARY(rsqrt, Rsqrt, RsqrtGradX, false)
DAX_FLOAT_UNARY(sin, Sin, SinGradX, false)
DAX_FLOAT_UNARY(cos, Cos, CosGradX, false)
DAX_FLOAT_UNARY(tanh, Tanh, TanhGradY, true)
DAX_FLOAT_UNARY(sigmoid, Sigmoid, SigmoidGradY, true)
DAX_FLOAT_UNARY(gelu, Gelu, GeluGradX, false)  // the tanh approximation, as jax.nn.gelu's default
DAX_FLOAT_UNARY(gelu_erf, GeluErf, GeluErfGradX, false)  // the exact form, as PyTorch's default
DAX_FLOAT_UNARY(silu, Silu, SiluGradX, false)
#undef DAX_FLOAT_UNARY

/// gelu with jax.nn.gelu's switch: the tanh approximation when `approximate`, else the erf form.
template <class T>
  requires detail::is_floating_v<T>
DistArray<T> gelu(const DistArray<T>& x, bool approximate) {
  return approximate ? gelu(x) : gelu_erf(x);
}

}  // namespace dax

#include <dax/ops/reduction.hpp>  // defines sum_to, which the pullbacks use
// In place (+=, -=, *=, /=): the name rebinds to the result, which keeps a's sharding.
#include <dax/ops/compound_assign.hpp>
