// dax::custom_vjp: a function whose forward runs as plain, untraced eager code and whose backward
// the caller writes, recorded as one tape node through the same hook every op uses
// (array/trace.hpp) — JAX's jax.custom_vjp. It pays where a hand-written backward needs fewer
// passes and fewer saved values than the one autodiff would compose from the forward's ops
// (layer_norm, rms_norm, masked softmax, cross_entropy in nn/).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include <dax/array/dist_array.hpp>
#include <dax/array/trace.hpp>
#include <dax/autodiff/grad.hpp>

namespace dax {
namespace detail {

template <class T>
struct is_cotangent_tuple : std::false_type {};
template <class... T>
struct is_cotangent_tuple<std::tuple<T...>> : std::true_type {};

/// The cotangent the custom backward gave input `i` (of element type In), as the tape takes it.
template <class In, class C>
AnyArray custom_cotangent(const char* name, size_t i, const Shape& shape, const C& c) {
  if constexpr (std::is_same_v<C, NoCotangent>) {
    return AnyArray();
  } else if constexpr (std::is_same_v<C, std::optional<DistArray<In>>>) {
    return c ? custom_cotangent<In>(name, i, shape, *c) : AnyArray();
  } else {
    static_assert(std::is_same_v<C, DistArray<In>>,
                  "dax::custom_vjp: the backward must give each input a DistArray of that input's element "
                  "type (or a std::optional of one), or dax::NoCotangent{}");
    if constexpr (!is_floating_v<In>) {
      return AnyArray();  // integer inputs have no gradient
    } else {
      DAX_CHECK(c.shape() == shape, name, ": the custom backward gave input ", i, " a cotangent of shape ",
                to_string(c.shape()), " but the input has shape ", to_string(shape));
      return AnyArray(c);
    }
  }
}

/// Records `out` as the result of custom_vjp `name` on `inputs` (when a gradient is being taken).
template <class Out, class Residuals, class Backward, class... In>
void record_custom(const char* name, DistArray<Out>& out, Residuals&& residuals, const Backward& backward,
                   const DistArray<In>&... inputs) {
  using Saved = std::remove_cvref_t<Residuals>;
  record(name, out, [&](auto need) {
    return [name, need, backward, residuals = Saved(std::forward<Residuals>(residuals)),
            shapes = std::array<Shape, sizeof...(In)>{inputs.shape()...}](const DistArray<Out>& g) {
      auto parts = [&] {
        if constexpr (std::is_invocable_v<const Backward&, const Saved&, const DistArray<Out>&, std::array<bool, sizeof...(In)>>) {
          // Less what a split backward's pass does not want now: a backward that honours need
          // leaves a weight's cotangent to the weight pass (one it computes anyway is kept).
          std::array<bool, sizeof...(In)> now{};
          for (size_t k = 0; k < now.size(); ++k) now[k] = wanted_now(need, k);
          return backward(residuals, g, now);
        }
        else
          return backward(residuals, g);
      }();
      static_assert(is_cotangent_tuple<decltype(parts)>::value,
                    "dax::custom_vjp: the backward must return a std::tuple with one entry per input");
      static_assert(std::tuple_size_v<decltype(parts)> == sizeof...(In),
                    "dax::custom_vjp: the backward must return one cotangent per input");
      return [&]<size_t... I>(std::index_sequence<I...>) {
        return Cotangents{(need[I] ? custom_cotangent<In>(name, I, shapes[I], std::get<I>(parts)) : AnyArray())...};
      }(std::make_index_sequence<sizeof...(In)>{});
    };
  }, inputs...);
}

}  // namespace detail

/// f = custom_vjp(name, forward, backward); f(inputs...) -> DistArray<Out>.
/// - `forward(inputs...)` returns `std::pair{out, residuals}` (residuals: anything copyable, e.g. a
///   tuple of the arrays the backward needs). It runs with recording suspended, so its ops leave
///   nothing on the tape and may be fused kernels. Inputs are DistArrays; constants (eps, a rate,
///   a key) are captured by `forward` instead.
/// - `backward(residuals, g)` — or `backward(residuals, g, need)`, `need[i]` saying whether input i
///   is being differentiated and wanted by the pass running (a zero-bubble pipeline's split
///   backward asks for the weights' later) — returns a `std::tuple` with one entry per input: a DistArray of
///   that input's element type and shape (the cotangent, possibly unreduced), a std::optional of
///   one (empty: nothing), or `dax::NoCotangent{}` (integer inputs, inputs not needed).
/// When no gradient is being taken, f is forward(inputs...).first and backward is never built.
/// `name` must outlive the gradient (a string literal): the tape keeps the pointer for messages.
template <class Forward, class Backward>
auto custom_vjp(const char* name, Forward forward, Backward backward) {
  return [name, forward, backward](const auto&... inputs) {
    auto result = [&] {
      detail::NoTrace untraced;
      return forward(inputs...);
    }();
    auto out = std::move(result.first);
    out.set_trace_id(0);  // the forward may return an input itself: `out` is its own value
    detail::record_custom(name, out, std::move(result.second), backward, inputs...);
    return out;
  };
}

}  // namespace dax
