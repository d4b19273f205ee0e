// Dynamic loss scaling for float16 training, as torch.amp.GradScaler and jmp.DynamicLossScale do
// it: the loss is multiplied by a scale S before the backward, so that small float16 gradients do
// not flush to zero; the gradients are divided by S before the update. A step whose gradients hold
// an inf or a NaN anywhere (on any rank) is skipped and S halved; after `growth_interval` good
// steps in a row S doubles.
//
//   dax::optim::DynamicLossScale scaler;
//   auto [scaled_loss, grads] = dax::value_and_grad([&](const Model& p) { return scaler.scale(loss_fn(p)); })(params);
//   const double loss = scaled_loss.to_host()[0] / scaler.scale();  // before unscale() moves S
//   if (scaler.unscale(grads)) opt.step(params, grads);              // false: skipped on every rank
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <dax/autodiff/tree.hpp>
#include <dax/core/error.hpp>
#include <dax/array/creation.hpp>
#include <dax/manual/shard_map.hpp>  // OnlyMeshRanks
#include <dax/optim/clip.hpp>
#include <dax/optim/leaf_update.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax::optim {

struct LossScaleOptions {
  double initial = 65536.0;     // 2^16, GradScaler's init_scale
  double growth_factor = 2.0;   // after growth_interval good steps in a row
  double backoff_factor = 0.5;  // on a step with an inf or a NaN
  int64_t growth_interval = 2000;
  double min_scale = 1.0;  // S never falls below it (jmp's min_loss_scale)
};

/// DynamicLossScale's state as a tree, to save with save_tree beside the optimizer's (GradScaler's
/// state_dict): the scale, the good steps since it last changed and the steps skipped, each a
/// scalar on a mesh of every rank.
struct LossScaleState {
  DistArray<double> scale;
  DistArray<int64_t> good_steps;
  DistArray<int64_t> skipped;
};

inline auto dax_tree_fields(const LossScaleState*) {
  using S = LossScaleState;
  return std::make_tuple(tree_field("scale", &S::scale), tree_field("good_steps", &S::good_steps),
                         tree_field("skipped", &S::skipped));
}

class DynamicLossScale {
 public:
  explicit DynamicLossScale(LossScaleOptions options = {}) : o_(options), scale_(options.initial) {
    DAX_CHECK(std::isfinite(o_.initial) && o_.initial > 0, "DynamicLossScale: initial must be a finite number > 0, got ",
              o_.initial);
    DAX_CHECK(o_.growth_factor >= 1, "DynamicLossScale: growth_factor must be >= 1, got ", o_.growth_factor);
    DAX_CHECK(o_.backoff_factor > 0 && o_.backoff_factor < 1, "DynamicLossScale: backoff_factor must be in (0, 1), got ",
              o_.backoff_factor);
    DAX_CHECK(o_.growth_interval >= 1, "DynamicLossScale: growth_interval must be >= 1, got ", o_.growth_interval);
    DAX_CHECK(o_.min_scale > 0 && o_.min_scale <= o_.initial, "DynamicLossScale: min_scale must be in (0, initial = ",
              o_.initial, "], got ", o_.min_scale);
  }

  /// The scale the next backward is taken at.
  double scale() const { return scale_; }
  /// `loss` times scale(), in its own element type (compute the loss in float32: a float16 loss of
  /// 1 times 2^16 is already inf).
  template <class T>
  DistArray<T> scale(const DistArray<T>& loss) const {
    return loss * static_cast<T>(scale_);
  }

  /// Checks `grads` (taken of a scaled loss) for an inf or a NaN on any rank and updates the
  /// scale. Finite: divides every leaf by the scale it was taken at (in place, each keeping its
  /// sharding) and returns true. Otherwise leaves them as they are, halves the scale and returns
  /// false, on every rank alike. One all-reduce of 8 bytes per mesh the leaves live on (their
  /// global norm, which is inf or NaN exactly when an element is) and one of a flag over every
  /// rank (leaves on meshes a rank is not in). Collective over every rank of the job; inside a
  /// dax::OnlyMeshRanks scope (a model on part of the world: a reference run on one device), over
  /// the ranks of the first leaf's mesh instead, which every leaf must then share.
  template <Tree G>
  bool unscale(G& grads) {
    const double norm = global_norm(grads);  // the sum of squares in double: a float's square never overflows it
    const std::vector<int64_t> flags = flag_group(grads).host().all_gather_host({std::isfinite(norm) ? 0 : 1});
    bool finite = true;
    for (int64_t f : flags) finite = finite && f == 0;
    const double taken_at = scale_;
    if (!finite) {
      scale_ = std::max(o_.min_scale, scale_ * o_.backoff_factor);
      good_steps_ = 0;
      ++skipped_;
      norm_ = NAN;
      return false;
    }
    if (++good_steps_ >= o_.growth_interval) {
      const double grown = scale_ * o_.growth_factor;
      if (std::isfinite(grown)) scale_ = grown;
      good_steps_ = 0;
    }
    norm_ = norm / taken_at;
    grads = tree_map(
        [taken_at](const auto& g) {
          using E = typename std::remove_cvref_t<decltype(g)>::value_type;
          return g * static_cast<E>(1.0 / taken_at);
        },
        grads);
    return true;
  }

  /// Where unscale agrees on the flag: every rank, or the leaves' mesh inside OnlyMeshRanks.
  template <Tree G>
  static detail::Communicator& flag_group(const G& grads) {
    Runtime& rt = Runtime::current();
    if (detail::only_mesh_ranks_depth() == 0) return rt.world();
    const Mesh* mesh = nullptr;
    tree_for_each([&](const auto& g) {
      if (mesh == nullptr) mesh = &g.sharding().mesh();
      DAX_CHECK(g.sharding().mesh() == *mesh, "DynamicLossScale.unscale: inside OnlyMeshRanks every gradient must be "
                "on one mesh, got ", to_string(*mesh), " and ", to_string(g.sharding().mesh()));
    }, grads);
    return mesh == nullptr ? rt.world() : rt.mesh_group(*mesh);
  }

  /// The global norm of the last gradients unscale() accepted, unscaled (NaN after a skipped step):
  /// clip with it (clip_by_global_norm(grads, max, scaler.grad_norm())) without a second all-reduce.
  /// On a rank outside some leaves' meshes it leaves those out, as global_norm does.
  double grad_norm() const { return norm_; }
  /// The state as a tree; set_state restores one (from load_tree, say), so that a resumed run goes
  /// on at the scale it had. Both collective.
  LossScaleState state() const {
    const NamedSharding everywhere = detail::counter_sharding();
    return {full<double>({}, scale_, everywhere), detail::counter_array(good_steps_, everywhere),
            detail::counter_array(skipped_, everywhere)};
  }
  void set_state(const LossScaleState& state) {
    const int64_t good = detail::counter_value("DynamicLossScale.set_state", state.good_steps);
    const int64_t skipped = detail::counter_value("DynamicLossScale.set_state", state.skipped);
    DAX_CHECK(state.scale.shape().empty(), "DynamicLossScale.set_state: the scale must be a scalar, got shape ",
              to_string(state.scale.shape()));
    const double scale = state.scale.to_host()[0];
    DAX_CHECK(std::isfinite(scale) && scale >= o_.min_scale,
              "DynamicLossScale.set_state: the scale must be a finite number >= min_scale = ", o_.min_scale, ", got ",
              scale);
    scale_ = scale, good_steps_ = good, skipped_ = skipped;
  }

  /// Steps skipped so far, and good steps since the scale last changed.
  int64_t skipped() const { return skipped_; }
  int64_t good_steps() const { return good_steps_; }

 private:
  LossScaleOptions o_;
  double scale_;
  int64_t good_steps_ = 0, skipped_ = 0;
  double norm_ = NAN;
};

}  // namespace dax::optim
