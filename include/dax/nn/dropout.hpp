// dax::dropout: each element kept with probability 1 - rate and scaled by 1 / (1 - rate), zeroed
// otherwise. The mask is drawn from the counter-based RNG by global element index (ops/random.hpp),
// so it is the same whatever the sharding or the rank count, and each device draws only its own
// piece: nothing moves. Element i is kept exactly when random::bernoulli(key, 1 - rate, ...) is
// true at i.
#pragma once

#include <dax/array/creation.hpp>
#include <dax/core/macros.hpp>
#include <dax/ops/elementwise.hpp>
#include <dax/ops/random.hpp>
#include <dax/sharding/build.hpp>

namespace dax {
namespace detail::nn_fn {

/// 1 / keep where the element is kept (probability `keep`), else 0; Bernoulli's draw exactly.
template <class T>
struct DropoutScale {
  random::Key key;
  double keep;
  compute_t<T> scale;
  DAX_HOST_DEVICE T operator()(uint64_t i) const {
    return static_cast<T>(random::detail::unit<double>(random::detail::bits(key, i), 0) < keep ? scale
                                                                                                 : compute_t<T>(0));
  }
};

}  // namespace detail::nn_fn

/// x with each element zeroed with probability `rate` and the others scaled by 1 / (1 - rate)
/// (inverted dropout, as jax / flax and torch). rate 0 returns x; rate 1 returns zeros. The
/// gradient is the same mask applied to the cotangent (multiply's fused pullback).
template <class T>
  requires detail::is_floating_v<T>
DistArray<T> dropout(const random::Key& key, const DistArray<T>& x, double rate) {
  DAX_CHECK(rate >= 0.0 && rate <= 1.0, "dropout: rate must be in [0, 1], got ", rate);
  if (rate == 0.0) return x;
  const double keep = 1.0 - rate;
  const auto scale = static_cast<detail::compute_t<T>>(keep > 0.0 ? 1.0 / keep : 0.0);
  // The mask in x's layout without its partial sums: x * mask is exact on an unreduced x.
  const NamedSharding layout = detail::with_unreduced_axes(x.sharding(), x.ndim(), {});
  const DistArray<T> mask = random::detail::sample<T>(x.shape(), layout, detail::nn_fn::DropoutScale<T>{key, keep, scale});
  return x * mask;
}

}  // namespace dax
