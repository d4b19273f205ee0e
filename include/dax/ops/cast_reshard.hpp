// dax::cast_reshard<To>(x, sharding): a conversion and a move as one op, for mixed precision's
// parameter gathers (torchtitan's MixedPrecisionPolicy, param_dtype bfloat16 with reduce_dtype
// float32): x is converted on its own pieces first, so a gather moves To's bytes (half of
// float32's for a 16-bit type), and the gradient is converted back to x's type before it moves
// back, so the reduce-scatter of an FSDP gradient sums in x's type. The same two written apart
// (astype, then a product that gathers the 16-bit copy) sum the gradient in 16 bits.
#pragma once

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
  return out;
}

}  // namespace dax
