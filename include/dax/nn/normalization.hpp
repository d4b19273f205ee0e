// dax::layer_norm and dax::rms_norm over the last dimension, as custom-VJP functions. Where that
// dimension is whole on each device (data, FSDP and sequence parallelism: the usual case) each way
// is one row kernel (backend/norm_rows.hpp: each row's statistics, kept in the compute type for
// the backward, and its output; the backward's dx from two row sums), and the input itself is
// saved, not a normalized copy. With the last dimension split over mesh axes the composite runs:
// a few fused elementwise kernels and two (layer_norm) or one (rms_norm) row reductions, which are
// all-reduces over exactly those axes (the reduction rule's), forward and backward. Either way
// gamma's and beta's gradients are partial sums over the axes splitting the rows, reduced once
// with the other gradients (DESIGN §6).
#pragma once

#include <optional>
#include <tuple>
#include <utility>

#include <dax/array/reshard.hpp>
#include <dax/autodiff/custom_vjp.hpp>
#include <dax/backend/device_ops.hpp>
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

/// Whether x's rows (its last dimension) are whole on each device: the normalizations then run
/// their fused row kernels.
template <class T>
bool rows_whole(const DistArray<T>& x) {
  return x.sharding().dim_axes(x.ndim() - 1).empty();
}

/// What the fused normalizations keep for the backward: the (reduced) input, gamma whole on x's
/// mesh, and each row's rstd and (layer_norm) mean (..., 1) in the compute type.
template <class T>
struct NormSaved {
  DistArray<T> x, gamma;
  std::optional<DistArray<compute_t<T>>> mean;
  DistArray<compute_t<T>> rstd;
  NormRows geo;
};

/// The fused forward: y = (x - mean) * rstd * gamma (+ beta, when not null), one row kernel.
/// gamma and beta are brought whole to x's mesh (an all-gather when FSDP splits them, as the
/// composite's product would), x's rows stay where they are.
template <class T>
std::pair<DistArray<T>, NormSaved<T>> fused_norm_forward(const char* op, const DistArray<T>& input,
                                                         const DistArray<T>& gamma_in, const DistArray<T>* beta_in,
                                                         double eps, bool centered) {
  using C = compute_t<T>;
  DistArray<T> x = nn_reduced(input, op);
  const NamedSharding& layout = x.sharding();
  const NamedSharding whole(layout.mesh(), PartitionSpec());
  DistArray<T> gamma = operand_to(gamma_in, whole, op);
  std::optional<DistArray<T>> beta;
  if (beta_in) beta = operand_to(*beta_in, whole, op);
  const ProfiledOp profiled(op, x, gamma);
  Shape stat_shape = x.shape();
  stat_shape.back() = 1;
  NormRows geo{0, x.shape().back(), eps, centered};
  const int rank = Runtime::current().rank();
  const bool member = layout.mesh().contains(rank);
  if (member) geo.rows = numel(layout.device_indices(rank, stat_shape));
  auto stats = [&] {
    return DistArray<C>(stat_shape, layout, member ? dev::allocate(static_cast<size_t>(geo.rows) * sizeof(C)) : nullptr);
  };
  std::optional<DistArray<C>> mean;
  if (centered) mean = stats();
  DistArray<C> rstd = stats();
  DistArray<T> out(x.shape(), layout,
                   member ? dev::allocate(static_cast<size_t>(geo.rows * geo.length) * sizeof(T)) : nullptr);
  if (member)
    dev::norm_rows(x.local_data().data(), gamma.local_data().data(), beta ? beta->local_data().data() : nullptr, geo,
                   static_cast<T*>(out.buffer()->data()), mean ? static_cast<C*>(mean->buffer()->data()) : nullptr,
                   static_cast<C*>(rstd.buffer()->data()));
  return {std::move(out), NormSaved<T>{std::move(x), std::move(gamma), std::move(mean), std::move(rstd), geo}};
}

/// The fused backward: dx from one row kernel (when need_x), gamma's gradient as the rows' sum
/// of g * xhat (the kernel writes g * xhat beside dx) and beta's as the rows' sum of g.
template <class T>
std::tuple<std::optional<DistArray<T>>, std::optional<DistArray<T>>, std::optional<DistArray<T>>> fused_norm_backward(
    const char* op, const NormSaved<T>& s, const DistArray<T>& cotangent, bool need_x, bool need_gamma,
    bool need_beta) {
  // dx needs g's true values in x's layout: an unreduced g (a Megatron column-parallel layer's
  // input gradient) is reduced once here, and nothing else moves.
  const DistArray<T> g = moved_to(nn_reduced(cotangent, op), s.x.sharding());
  const ProfiledOp profiled(op, s.x, g);
  const NamedSharding& layout = s.x.sharding();
  const Shape param{s.geo.length};
  std::optional<DistArray<T>> dx, dgamma, dbeta;
  if (need_x || need_gamma) {
    std::shared_ptr<Buffer> dx_buffer, gx_buffer;
    if (layout.mesh().contains(Runtime::current().rank())) {
      const size_t bytes = static_cast<size_t>(s.geo.rows * s.geo.length) * sizeof(T);
      if (need_x) dx_buffer = dev::allocate(bytes);
      if (need_gamma) gx_buffer = dev::allocate(bytes);
      dev::norm_rows_grad(s.x.local_data().data(), s.gamma.local_data().data(),
                          s.mean ? s.mean->local_data().data() : nullptr,
                          s.rstd.local_data().data(), g.local_data().data(), s.geo,
                          dx_buffer ? static_cast<T*>(dx_buffer->data()) : nullptr,
                          gx_buffer ? static_cast<T*>(gx_buffer->data()) : nullptr);
    }
    if (need_x) dx = DistArray<T>(s.x.shape(), layout, std::move(dx_buffer));
    if (need_gamma) dgamma = sum_to(DistArray<T>(s.x.shape(), layout, std::move(gx_buffer)), param);
  }
  if (need_beta) dbeta = sum_to(g, param);  // partial sums over split rows stay unreduced
  return {dx, dgamma, dbeta};
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
  if (detail::rows_whole(x)) {
    const auto fused = custom_vjp(
        "layer_norm",
        [eps](const DistArray<T>& input, const DistArray<T>& gamma, const DistArray<T>& beta) {
          return detail::fused_norm_forward("layer_norm", input, gamma, &beta, eps, true);
        },
        [](const detail::NormSaved<T>& saved, const DistArray<T>& g, auto need) {
          return detail::fused_norm_backward("layer_norm", saved, g, need[0], need[1], need[2]);
        });
    return fused(x, gamma, beta);
  }
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
  if (detail::rows_whole(x)) {
    const auto fused = custom_vjp(
        "rms_norm",
        [eps](const DistArray<T>& input, const DistArray<T>& gamma) {
          return detail::fused_norm_forward<T>("rms_norm", input, gamma, nullptr, eps, false);
        },
        [](const detail::NormSaved<T>& saved, const DistArray<T>& g, auto need) {
          auto [dx, dgamma, dbeta] = detail::fused_norm_backward("rms_norm", saved, g, need[0], need[1], false);
          return std::tuple{dx, dgamma};
        });
    return fused(x, gamma);
  }
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
