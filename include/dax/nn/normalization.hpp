// dax::layer_norm and dax::rms_norm over the last dimension, as custom-VJP functions: the forward
// is a few fused elementwise kernels and two (layer_norm) or one (rms_norm) row reductions; the
// backward is written by hand (two row means and one fused kernel for the input, sums over the
// leading dimensions for the scale and shift). With the last dimension split over mesh axes the
// row reductions are all-reduces over exactly those axes (the reduction rule's), forward and
// backward; gamma's and beta's gradients are partial sums over the axes splitting the rows,
// reduced once with the other gradients (DESIGN §6).
#pragma once

#include <optional>
#include <tuple>

#include <dax/array/reshard.hpp>
#include <dax/autodiff/custom_vjp.hpp>
#include <dax/nn/functors.hpp>
#include <dax/ops/elementwise.hpp>
#include <dax/ops/reduction.hpp>
#include <dax/sharding/build.hpp>

namespace dax {
namespace detail {

/// x with its partial sums reduced (the same array when it has none): nn's forwards read the true
/// values several times, so an unreduced input is reduced once, up front.
template <class T>
DistArray<T> nn_reduced(const DistArray<T>& x, const char* op) {
  if (!x.sharding().is_unreduced()) return x;
  const NamedSharding reduced = with_unreduced_axes(x.sharding(), x.ndim(), {});
  check_operand_layout(x, reduced, op);
  return reshard(x, reduced);
}

/// The shape checks of the normalizations: x of rank >= 1, a parameter of shape (last dim,).
template <class T>
void check_norm_param(const char* op, const char* what, const DistArray<T>& x, const DistArray<T>& p) {
  DAX_CHECK(x.ndim() >= 1, op, ": x must have at least one dimension, got shape ", to_string(x.shape()));
  DAX_CHECK(p.shape() == Shape{x.shape().back()}, op, ": ", what, " must have shape (", x.shape().back(),
            ",) (x's last dimension), got ", to_string(p.shape()));
}

}  // namespace detail

/// (x - mean) / sqrt(var + eps) * gamma + beta over the last dimension (biased variance, as
/// torch.nn.LayerNorm and flax.linen.LayerNorm); gamma and beta have shape (x.shape()[-1],).
template <class T>
  requires detail::is_floating_v<T>
DistArray<T> layer_norm(const DistArray<T>& x, const DistArray<T>& gamma, const DistArray<T>& beta,
                        double eps = 1e-5) {
  detail::check_norm_param("layer_norm", "gamma", x, gamma);
  detail::check_norm_param("layer_norm", "beta", x, beta);
  const auto f = custom_vjp(
      "layer_norm",
      [eps](const DistArray<T>& input, const DistArray<T>& gamma, const DistArray<T>& beta) {
        using namespace detail;
        const DistArray<T> x = nn_reduced(input, "layer_norm");
        const DistArray<T> mu = mean(x, {-1}, true);
        const DistArray<T> xc = x - mu;
        const DistArray<T> rstd =
            map<T>(Linearity::none, nn_fn::RsqrtPlus<T>{static_cast<compute_t<T>>(eps)}, mean(square(xc), {-1}, true));
        const DistArray<T> xhat = map<T>(Linearity::none, nn_fn::Normalize{}, x, mu, rstd);
        DistArray<T> y = map<T>(Linearity::none, nn_fn::ScaleShift{}, xhat, gamma, beta);
        return std::pair{std::move(y), std::tuple{xhat, rstd, gamma}};
      },
      [](const auto& saved, const DistArray<T>& g, auto need) {
        using namespace detail;
        const auto& [xhat, rstd, gamma] = saved;
        const Shape param{xhat.shape().back()};
        std::optional<DistArray<T>> dx, dgamma, dbeta;
        // dx needs g's true values (a nonlinear kernel reads them): an unreduced g (a Megatron
        // column-parallel layer's input gradient) is reduced once here, so the two row means below
        // need no all-reduces of their own, and dgamma, dbeta are partial only over the row axes.
        const DistArray<T> gr = need[0] ? nn_reduced(g, "layer_norm") : g;
        if (need[0]) {
          const DistArray<T> gg = gr * gamma;
          dx = map<T>(Linearity::none, nn_fn::LayerNormGradX{}, gg, mean(gg, {-1}, true), xhat,
                      mean(gg * xhat, {-1}, true), rstd);
        }
        if (need[1]) dgamma = sum_to(gr * xhat, param);  // partial sums over split rows stay unreduced
        if (need[2]) dbeta = sum_to(gr, param);
        return std::tuple{dx, dgamma, dbeta};
      });
  return f(x, gamma, beta);
}

/// x / sqrt(mean(x^2) + eps) * gamma over the last dimension (Zhang & Sennrich; as
/// torch.nn.RMSNorm); gamma has shape (x.shape()[-1],).
template <class T>
  requires detail::is_floating_v<T>
DistArray<T> rms_norm(const DistArray<T>& x, const DistArray<T>& gamma, double eps = 1e-6) {
  detail::check_norm_param("rms_norm", "gamma", x, gamma);
  const auto f = custom_vjp(
      "rms_norm",
      [eps](const DistArray<T>& input, const DistArray<T>& gamma) {
        using namespace detail;
        const DistArray<T> x = nn_reduced(input, "rms_norm");
        const DistArray<T> r =
            map<T>(Linearity::none, nn_fn::RsqrtPlus<T>{static_cast<compute_t<T>>(eps)}, mean(square(x), {-1}, true));
        DistArray<T> y = map<T>(Linearity::none, nn_fn::Scale2{}, x, r, gamma);
        return std::pair{std::move(y), std::tuple{x, r, gamma}};
      },
      [](const auto& saved, const DistArray<T>& g, auto need) {
        using namespace detail;
        const auto& [x, r, gamma] = saved;
        std::optional<DistArray<T>> dx, dgamma;
        const DistArray<T> gr = need[0] ? nn_reduced(g, "rms_norm") : g;  // reduced once first, as in layer_norm
        if (need[0])
          dx = map<T>(Linearity::none, nn_fn::RmsNormGradX{}, gr, gamma, x, r, mean(gr * gamma * x, {-1}, true));
        if (need[1]) dgamma = sum_to(map<T>(Linearity::scaling, nn_fn::Scale2{}, gr, x, r), Shape{x.shape().back()});
        return std::tuple{dx, dgamma};
      });
  return f(x, gamma);
}

}  // namespace dax
