// dax::optim::AdamW: Adam with decoupled weight decay, as torch.optim.AdamW (and optax.adamw):
// bias-corrected moments, eps outside the square root, the decay applied to the parameter.
// `AdamW opt(params, {.lr = 3e-4f, .weight_decay = 0.1f}); opt.step(params, grads);`
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <dax/autodiff/label_memory.hpp>
#include <dax/autodiff/tree.hpp>
#include <dax/optim/adamw_pending.hpp>
#include <dax/optim/leaf_update.hpp>
#include <dax/optim/schedule.hpp>
#include <dax/optim/sharding.hpp>

namespace dax::optim {

struct AdamWOptions {
  Schedule lr = 1e-3;
  double b1 = 0.9;
  double b2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  /// Where each parameter's moments live; empty: the parameter's own sharding.
  ShardingFn state_sharding = {};
  /// Where each gradient is reduced before the update (ZeRO-2); empty: straight to the state's.
  ShardingFn grad_sharding = {};
};

/// AdamW's state as a tree (it saves with save_tree): the number of updates applied and the two
/// moments, each in its state sharding.
template <class Params>
struct AdamWState {
  DistArray<int64_t> count;
  Params mu;
  Params nu;
};

template <class Params>
auto dax_tree_fields(const AdamWState<Params>*) {
  using S = AdamWState<Params>;
  return std::make_tuple(tree_field("count", &S::count), tree_field("mu", &S::mu), tree_field("nu", &S::nu));
}

template <class Params>
class AdamW {
  static_assert(is_tree_v<Params>, DAX_NOT_A_TREE_MESSAGE("dax::optim::AdamW: the parameters"));

 public:
  using Options = AdamWOptions;
  using State = AdamWState<Params>;

  /// State for `params` (zeros, in each parameter's state sharding). Collective over their meshes.
  AdamW(const Params& params, AdamWOptions options = {})
      : options_(std::move(options)),
        leaves_(detail::plan_leaves("AdamW", params, options_.state_sharding, options_.grad_sharding)),
        count_sharding_(detail::counter_sharding()),
        mu_(detail::zeros_in_state_layout(params, leaves_)),
        nu_(mu_) {
    const auto& o = options_;
    DAX_CHECK(o.b1 >= 0 && o.b1 < 1, "AdamW: b1 must be in [0, 1), got ", o.b1);
    DAX_CHECK(o.b2 >= 0 && o.b2 < 1, "AdamW: b2 must be in [0, 1), got ", o.b2);
    DAX_CHECK(o.eps >= 0, "AdamW: eps must be >= 0, got ", o.eps);
    DAX_CHECK(o.weight_decay >= 0, "AdamW: weight_decay must be >= 0, got ", o.weight_decay);
    label_memory(params, "parameters");
    label();
  }

  /// One update of every parameter in place, each keeping its sharding. `grads` has the
  /// parameters' structure and element types, any shardings (partial sums included: they are
  /// reduced to the gradient or state sharding, whichever comes first). Collective.
  template <Tree Grads>
  void step(Params& params, const Grads& grads) {
    detail::check_step_trees("AdamW.step", params, grads, mu_);
    const double lr = options_.lr(count_);
    const int64_t t = count_ + 1;
    const double bc1 = 1 - std::pow(options_.b1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(options_.b2, static_cast<double>(t));
    detail::AdamWPending pending(options_.b1, options_.b2, 1 - lr * options_.weight_decay, lr / bc1,
                                 1 / std::sqrt(bc2), options_.eps);
    size_t i = 0;
    tree_for_each_with_path(
        [&](const std::string& path, auto& p, const auto& g, auto& m, auto& v) {
          using T = typename std::remove_cvref_t<decltype(p)>::value_type;
          detail::check_gradient("AdamW.step", path, p, g);
          const detail::OptimLeaf& leaf = leaves_[i++];
          const NamedSharding& s = leaf.state;
          const DistArray<T> gs = detail::gradient_in_state_layout(leaf, g);
          const NamedSharding own = p.sharding();
          DistArray<T> ps = detail::moved_to(p, s);
          // The parameter's handle lets go of its buffer until the update is back (nothing reads
          // it before): if no one else holds it, it takes the new values in place.
          if (ps.buffer() == p.buffer()) p = DistArray<T>(p.shape(), own, nullptr);
          const DistArray<T> p_new = detail::updated_in(ps), m_new = detail::updated_in(m), v_new = detail::updated_in(v);
          pending.add(ps, gs, m, v, p_new, m_new, v_new, [&p, p_new, own] { p = detail::moved_to(p_new, own); });
          m = m_new;
          v = v_new;
        },
        params, grads, mu_, nu_);
    pending.flush();
    ++count_;
    label_memory(params, "parameters");  // what the update allocated, counted as what it is
    label();
  }

  /// The state as a tree (shares the moments' buffers).
  State state() const { return State{detail::counter_array(count_, count_sharding_), mu_, nu_}; }

  /// Restores a state (from load_tree, say): any shardings, moved to this optimizer's. Collective.
  void set_state(const State& state) {
    std::string path;
    detail::check_same_structure(detail::StructureCheck{"AdamW.set_state", "the state's mu", "the parameters"}, path,
                                 mu_, state.mu);
    detail::check_same_structure(detail::StructureCheck{"AdamW.set_state", "the state's nu", "the parameters"}, path,
                                 mu_, state.nu);
    size_t i = 0;
    Params mu = mu_, nu = nu_;
    tree_for_each_with_path(
        [&](const std::string& p, auto& m, auto& v, const auto& new_m, const auto& new_v) {
          DAX_CHECK(new_m.shape() == m.shape() && new_v.shape() == m.shape(), "AdamW.set_state: the moments of '", p,
                    "' have shapes ", to_string(new_m.shape()), " and ", to_string(new_v.shape()), ", expected ",
                    to_string(m.shape()));
          const NamedSharding& s = leaves_[i++].state;
          m = detail::moved_to(new_m, s);
          v = detail::moved_to(new_v, s);
        },
        mu, nu, state.mu, state.nu);
    count_ = detail::counter_value("AdamW.set_state", state.count);
    mu_ = std::move(mu);
    nu_ = std::move(nu);
  }

  /// Updates applied so far.
  int64_t step_count() const { return count_; }
  /// The learning rate the next step uses.
  double learning_rate() const { return options_.lr(count_); }
  const Options& options() const { return options_; }

 private:
  Options options_;
  std::vector<detail::OptimLeaf> leaves_;
  NamedSharding count_sharding_;
  int64_t count_ = 0;
  Params mu_;
  Params nu_;

  void label() const {
    label_memory(mu_, "optimizer state");
    label_memory(nu_, "optimizer state");
  }
};

}  // namespace dax::optim
