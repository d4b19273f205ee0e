// dax::optim::SGD: stochastic gradient descent with momentum, dampening, Nesterov and (coupled)
// weight decay, as torch.optim.SGD: the decay is added to the gradient, the momentum buffer starts
// as the first step's gradient.
#pragma once

#include <string>
#include <vector>

#include <dax/autodiff/label_memory.hpp>

#include <dax/autodiff/tree.hpp>
#include <dax/optim/functors.hpp>
#include <dax/optim/leaf_update.hpp>
#include <dax/optim/schedule.hpp>
#include <dax/optim/sharding.hpp>

namespace dax::optim {

struct SGDOptions {
  Schedule lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  double weight_decay = 0;
  /// Where each parameter's momentum buffer lives; empty: the parameter's own sharding.
  ShardingFn state_sharding = {};
  /// Where each gradient is reduced before the update (ZeRO-2); empty: straight to the state's.
  ShardingFn grad_sharding = {};
};

/// SGD's state as a tree: the number of updates applied and the momentum buffers (one tree in
/// `momentum`, or none when the momentum is 0: PyTorch keeps no buffer then).
template <class Params>
struct SGDState {
  DistArray<int64_t> count;
  std::vector<Params> momentum;
};

template <class Params>
auto dax_tree_fields(const SGDState<Params>*) {
  using S = SGDState<Params>;
  return std::make_tuple(tree_field("count", &S::count), tree_field("momentum", &S::momentum));
}

template <class Params>
class SGD {
  static_assert(is_tree_v<Params>, DAX_NOT_A_TREE_MESSAGE("dax::optim::SGD: the parameters"));

 public:
  using Options = SGDOptions;
  using State = SGDState<Params>;

  SGD(const Params& params, SGDOptions options = {})
      : options_(std::move(options)),
        leaves_(detail::plan_leaves("SGD", params, options_.state_sharding, options_.grad_sharding)),
        count_sharding_(detail::counter_sharding()) {
    const auto& o = options_;
    DAX_CHECK(o.momentum >= 0, "SGD: momentum must be >= 0, got ", o.momentum);
    DAX_CHECK(o.weight_decay >= 0, "SGD: weight_decay must be >= 0, got ", o.weight_decay);
    DAX_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
              "SGD: Nesterov momentum requires a momentum > 0 and zero dampening, got momentum ", o.momentum,
              " and dampening ", o.dampening);
    if (o.momentum != 0) buffers_.push_back(detail::zeros_in_state_layout(params, leaves_));
    label_memory(params, "parameters");
    for (const auto& b : buffers_) label_memory(b, "optimizer state");
  }

  /// One update of every parameter in place, each keeping its sharding (see AdamW::step).
  template <Tree Grads>
  void step(Params& params, const Grads& grads) {
    DAX_CHECK(tree_size(params) == leaves_.size(), "SGD.step: the parameter tree has ", tree_size(params),
              " arrays, the optimizer was made for ", leaves_.size());
    const double lr = options_.lr(count_);
    const double wd = options_.weight_decay, mom = options_.momentum;
    size_t i = 0;
    if (buffers_.empty()) {
      detail::check_step_trees("SGD.step", params, grads, params);
      tree_for_each_with_path(
          [&](const std::string& path, auto& p, const auto& g) {
            using T = typename std::remove_cvref_t<decltype(p)>::value_type;
            using C = detail::compute_t<T>;
            detail::check_gradient("SGD.step", path, p, g);
            const detail::OptimLeaf& leaf = leaves_[i++];
            const DistArray<T> gs = detail::gradient_in_state_layout(leaf, g);
            const DistArray<T> ps = detail::moved_to(p, leaf.state);
            const DistArray<T> next =
                detail::map_pieces<T>(detail::fn::SgdParam<C>{C(lr), C(wd)}, leaf.state, p.shape(), ps, gs);
            p = detail::moved_to(next, p.sharding());
          },
          params, grads);
    } else {
      detail::check_step_trees("SGD.step", params, grads, buffers_[0]);
      const bool first = count_ == 0;
      tree_for_each_with_path(
          [&](const std::string& path, auto& p, const auto& g, auto& buf) {
            using T = typename std::remove_cvref_t<decltype(p)>::value_type;
            using C = detail::compute_t<T>;
            detail::check_gradient("SGD.step", path, p, g);
            const detail::OptimLeaf& leaf = leaves_[i++];
            const NamedSharding& s = leaf.state;
            const DistArray<T> gs = detail::gradient_in_state_layout(leaf, g);
            const DistArray<T> ps = detail::moved_to(p, s);
            buf = detail::map_pieces<T>(
                detail::fn::SgdMomentum<C>{C(mom), C(1 - options_.dampening), C(wd), first}, s, p.shape(), buf, gs, ps);
            const detail::fn::SgdMomentumParam<C> update{C(lr), C(mom), C(wd), options_.nesterov};
            p = detail::moved_to(detail::map_pieces<T>(update, s, p.shape(), ps, gs, buf), p.sharding());
          },
          params, grads, buffers_[0]);
    }
    ++count_;
    label_memory(params, "parameters");  // what the update allocated, counted as what it is
    for (const auto& b : buffers_) label_memory(b, "optimizer state");
  }

  State state() const { return State{detail::counter_array(count_, count_sharding_), buffers_}; }

  /// Restores a state (from load_tree, say): any shardings, moved to this optimizer's. Collective.
  void set_state(const State& state) {
    DAX_CHECK(state.momentum.size() == buffers_.size(), "SGD.set_state: the state holds ", state.momentum.size(),
              " momentum trees, this optimizer (momentum ", options_.momentum, ") keeps ", buffers_.size());
    std::vector<Params> buffers = buffers_;
    if (!buffers.empty()) {
      std::string path;
      detail::check_same_structure(
          detail::StructureCheck{"SGD.set_state", "the state's momentum", "the parameters"}, path, buffers[0],
          state.momentum[0]);
      size_t i = 0;
      tree_for_each_with_path(
          [&](const std::string& p, auto& b, const auto& loaded) {
            DAX_CHECK(loaded.shape() == b.shape(), "SGD.set_state: the momentum of '", p, "' has shape ",
                      to_string(loaded.shape()), ", expected ", to_string(b.shape()));
            b = detail::moved_to(loaded, leaves_[i++].state);
          },
          buffers[0], state.momentum[0]);
    }
    count_ = detail::counter_value("SGD.set_state", state.count);
    buffers_ = std::move(buffers);
  }

  int64_t step_count() const { return count_; }
  double learning_rate() const { return options_.lr(count_); }
  const Options& options() const { return options_; }

 private:
  Options options_;
  std::vector<detail::OptimLeaf> leaves_;
  NamedSharding count_sharding_;
  int64_t count_ = 0;
  std::vector<Params> buffers_;  // one tree when momentum != 0
};

}  // namespace dax::optim
