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
#include <dax/backend/device_ops.hpp>
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
  const ElementwiseRule& rule = elementwise_rules().get(
      RuleKey{static_cast<int>(linearity), {xs.shape()...}, {xs.sharding()...}, {}},
      [&] { return elementwise_rule({xs.shape()...}, {xs.sharding()...}, linearity); });
  // Operands moved to the rule's shardings (in order: argument evaluation order is unspecified).
  const auto moved = [&]<size_t... I>(std::index_sequence<I...>) {
    return std::make_tuple(moved_to(xs, rule.inputs[I])...);
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
template <class T> DistArray<T> add(const DistArray<T>& a, const DistArray<T>& b) {
  return detail::map<T>(detail::Linearity::additive, detail::fn::Add{}, a, b);
}
template <class T> DistArray<T> subtract(const DistArray<T>& a, const DistArray<T>& b) {
  return detail::map<T>(detail::Linearity::additive, detail::fn::Subtract{}, a, b);
}
template <class T> DistArray<T> multiply(const DistArray<T>& a, const DistArray<T>& b) {
  return detail::map<T>(detail::Linearity::scaling, detail::fn::Multiply{}, a, b);
}
/// Division keeps partial sums only for floating types: integer division does not distribute.
template <class T>
inline constexpr detail::Linearity division_linearity =
    detail::is_floating_v<T> ? detail::Linearity::scaling : detail::Linearity::none;

template <class T> DistArray<T> divide(const DistArray<T>& a, const DistArray<T>& b) {
  return detail::map<T>(division_linearity<T>, detail::fn::Divide{}, a, b);
}
template <class T> DistArray<T> pow(const DistArray<T>& a, const DistArray<T>& b) {
  return detail::map<T>(detail::Linearity::none, detail::fn::Pow{}, a, b);
}
template <class T> DistArray<T> maximum(const DistArray<T>& a, const DistArray<T>& b) {
  return detail::map<T>(detail::Linearity::none, detail::fn::Maximum{}, a, b);
}
template <class T> DistArray<T> minimum(const DistArray<T>& a, const DistArray<T>& b) {
  return detail::map<T>(detail::Linearity::none, detail::fn::Minimum{}, a, b);
}

template <class T> DistArray<T> operator+(const DistArray<T>& a, const DistArray<T>& b) { return add(a, b); }
template <class T> DistArray<T> operator-(const DistArray<T>& a, const DistArray<T>& b) { return subtract(a, b); }
template <class T> DistArray<T> operator*(const DistArray<T>& a, const DistArray<T>& b) { return multiply(a, b); }
template <class T> DistArray<T> operator/(const DistArray<T>& a, const DistArray<T>& b) { return divide(a, b); }

// ---- comparisons: DistArray<bool> ----
#define DAX_COMPARISON(name, Fn, op)                                                               \
  template <class T>                                                                             \
  DistArray<bool> name(const DistArray<T>& a, const DistArray<T>& b) {                           \
    return detail::map<bool>(detail::Linearity::none, detail::fn::Fn{}, a, b);                  \
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
  return detail::map<T>(detail::Linearity::none, detail::fn::Where{}, cond, a, b);
}

/// The array converted elementwise to U.
template <class U, class T>
DistArray<U> astype(const DistArray<T>& x) {
  return detail::map<U>(detail::Linearity::none, detail::fn::Cast<U>{}, x);
}

// ---- with scalars ----
template <class T, class S>
concept Scalar = (std::is_arithmetic_v<S> || detail::is_float16_v<S>) && !std::is_same_v<S, bool>;

template <class T, class S> requires Scalar<T, S>
DistArray<T> operator+(const DistArray<T>& a, S s) {
  return detail::map<T>(detail::Linearity::none, detail::fn::BindRight<detail::fn::Add, T>{T(s)}, a);
}
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator+(S s, const DistArray<T>& a) { return a + s; }
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator-(const DistArray<T>& a, S s) {
  return detail::map<T>(detail::Linearity::none, detail::fn::BindRight<detail::fn::Subtract, T>{T(s)}, a);
}
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator-(S s, const DistArray<T>& a) {
  return detail::map<T>(detail::Linearity::none, detail::fn::BindLeft<detail::fn::Subtract, T>{T(s)}, a);
}
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator*(const DistArray<T>& a, S s) {  // exact on partial sums: stays unreduced
  return detail::map<T>(detail::Linearity::scaling, detail::fn::BindRight<detail::fn::Multiply, T>{T(s)}, a);
}
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator*(S s, const DistArray<T>& a) { return a * s; }
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator/(const DistArray<T>& a, S s) {
  return detail::map<T>(division_linearity<T>, detail::fn::BindRight<detail::fn::Divide, T>{T(s)}, a);
}
template <class T, class S> requires Scalar<T, S>
DistArray<T> operator/(S s, const DistArray<T>& a) {
  return detail::map<T>(detail::Linearity::none, detail::fn::BindLeft<detail::fn::Divide, T>{T(s)}, a);
}
template <class T, class S> requires Scalar<T, S>
DistArray<T> pow(const DistArray<T>& a, S s) {
  return detail::map<T>(detail::Linearity::none, detail::fn::BindRight<detail::fn::Pow, T>{T(s)}, a);
}
template <class T, class S> requires Scalar<T, S>
DistArray<T> maximum(const DistArray<T>& a, S s) {
  return detail::map<T>(detail::Linearity::none, detail::fn::BindRight<detail::fn::Maximum, T>{T(s)}, a);
}
template <class T, class S> requires Scalar<T, S>
DistArray<T> minimum(const DistArray<T>& a, S s) {
  return detail::map<T>(detail::Linearity::none, detail::fn::BindRight<detail::fn::Minimum, T>{T(s)}, a);
}

// ---- unary ----
template <class T> DistArray<T> neg(const DistArray<T>& x) {
  return detail::map<T>(detail::Linearity::additive, detail::fn::Negate{}, x);
}
template <class T> DistArray<T> operator-(const DistArray<T>& x) { return neg(x); }
template <class T> DistArray<T> abs(const DistArray<T>& x) {
  return detail::map<T>(detail::Linearity::none, detail::fn::Abs{}, x);
}
template <class T> DistArray<T> square(const DistArray<T>& x) {
  return detail::map<T>(detail::Linearity::none, detail::fn::Square{}, x);
}
template <class T> DistArray<T> relu(const DistArray<T>& x) {
  return detail::map<T>(detail::Linearity::none, detail::fn::Relu{}, x);
}

#define DAX_FLOAT_UNARY(name, Fn)                                      \
  template <class T>                                                   \
    requires detail::is_floating_v<T>                                  \
  DistArray<T> name(const DistArray<T>& x) {                           \
    return detail::map<T>(detail::Linearity::none, detail::fn::Fn{}, x); \
  }
DAX_FLOAT_UNARY(exp, Exp)
DAX_FLOAT_UNARY(log, Log)
DAX_FLOAT_UNARY(sqrt, Sqrt)
DAX_FLOAT_UNARY(rsqrt, Rsqrt)
DAX_FLOAT_UNARY(sin, Sin)
DAX_FLOAT_UNARY(cos, Cos)
DAX_FLOAT_UNARY(tanh, Tanh)
DAX_FLOAT_UNARY(sigmoid, Sigmoid)
DAX_FLOAT_UNARY(gelu, Gelu)  // the tanh approximation, as jax.nn.gelu's default
#undef DAX_FLOAT_UNARY

}  // namespace dax

// In place (+=, -=, *=, /=): the name rebinds to the result, which keeps a's sharding.
#include <dax/ops/compound_assign.hpp>
