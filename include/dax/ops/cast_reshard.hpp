// dax::cast_reshard<To>(x, sharding): a conversion and a move as one op, for mixed precision's
// parameter gathers (torchtitan's MixedPrecisionPolicy, param_dtype bfloat16 with reduce_dtype
// float32): x is converted on its own pieces first, so a gather moves To's bytes (half of
// float32's for a 16-bit type), and the gradient is converted back to x's type before it moves
// back, so the reduce-scatter of an FSDP gradient sums in x's type. The same two written apart
// (astype, then a product that gathers the 16-bit copy) sum the gradient in 16 bits.
#pragma once

#include <type_traits>

#include <dax/array/reshard.hpp>
#include <dax/array/trace.hpp>
#include <dax/ops/elementwise.hpp>

namespace dax {

template <class To, class T>
DistArray<To> cast_reshard(const DistArray<T>& x, const NamedSharding& sharding) {
  static_assert(detail::is_floating_v<To> && detail::is_floating_v<T>, "cast_reshard converts between floating types");
  DistArray<To> out = detail::reshard_untraced(
      detail::map<To>(detail::cast_linearity<T, To>(), detail::fn::Cast<To>{}, x), sharding);
  detail::record("cast_reshard", out, [&](auto) {
    return [from = x.sharding()](const DistArray<To>& g) {
      // Widened first (partial sums stay partial through it: astype), then moved back.
      const auto wide = detail::map<T>(detail::cast_linearity<To, T>(), detail::fn::Cast<T>{}, g);
      return detail::Cotangents{detail::AnyArray(detail::reshard_untraced(wide, from))};
    };
  }, x);
  detail::note_moved_from(out, x.sharding());
  return out;
}

/// x moved to `sharding` in Wire's bytes, returned in x's own type: the values rounded to Wire
/// (exactly what a later conversion to Wire reads), the move Wire's size (an FSDP gather of float32
/// weights in bfloat16: half the bytes), and the gradient moved back (an FSDP reduce-scatter) in
/// Reduce (by default x's type: torchtitan's reduce_dtype float32). A conversion of a partial sum
/// to Reduce keeps it partial, so the sum itself runs in Reduce. Wire = T is reshard.
template <class Wire, class Reduce = void, class T>
DistArray<T> reshard_in(const DistArray<T>& x, const NamedSharding& sharding) {
  using R = std::conditional_t<std::is_void_v<Reduce>, T, Reduce>;
  static_assert(detail::is_floating_v<Wire> && detail::is_floating_v<T> && detail::is_floating_v<R>,
                "reshard_in moves floating types");
  DistArray<T> out = [&] {
    if constexpr (std::is_same_v<Wire, T>) {
      return detail::reshard_untraced(x, sharding);
    } else {
      const auto narrow = detail::map<Wire>(detail::cast_linearity<T, Wire>(), detail::fn::Cast<Wire>{}, x);
      return detail::map<T>(detail::cast_linearity<Wire, T>(), detail::fn::Cast<T>{},
                            detail::reshard_untraced(narrow, sharding));
    }
  }();
  detail::record("reshard_in", out, [&](auto) {
    return [from = x.sharding()](const DistArray<T>& g) {
      if constexpr (std::is_same_v<R, T>) {
        return detail::Cotangents{detail::AnyArray(detail::reshard_untraced(g, from))};
      } else {  // partial sums stay partial through both conversions: the sum runs in R
        const auto in_r = detail::map<R>(detail::Linearity::additive, detail::fn::Cast<R>{}, g);
        const auto back = detail::map<T>(detail::Linearity::additive, detail::fn::Cast<T>{},
                                         detail::reshard_untraced(in_r, from));
        return detail::Cotangents{detail::AnyArray(back)};
      }
    };
  }, x);
  detail::note_moved_from(out, x.sharding());
  return out;
}

}  // namespace dax
