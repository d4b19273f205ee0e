// What every optimizer does per parameter, apart from its arithmetic: where the state lives and
// the gradient is reduced (decided once, at construction), moving the gradient and parameter
// there, one kernel per new value over the device's piece, and the update moved back to the
// parameter's own sharding (never the reverse).
#pragma once

#include <array>
#include <numeric>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <dax/array/creation.hpp>
#include <dax/array/reshard.hpp>
#include <dax/autodiff/tree.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/optim/sharding.hpp>

namespace dax::detail {

/// A new array laid out by `s`, its piece allocated and not yet written (none off the mesh).
template <class T>
DistArray<T> new_pieces(const NamedSharding& s, const Shape& shape) {
  const int rank = Runtime::current().rank();
  if (!s.mesh().contains(rank)) return DistArray<T>(shape, s, nullptr);
  return DistArray<T>(shape, s, dev::allocate(static_cast<size_t>(numel(box_shape(s.device_indices(rank, shape)))) * sizeof(T)));
}

/// out = f(xs...) elementwise, every operand and the result laid out by `s` (so each device maps
/// its own piece, no communication): one kernel.
template <class Out, class F, class... T>
DistArray<Out> map_pieces(F f, const NamedSharding& s, const Shape& shape, const DistArray<T>&... xs) {
  DistArray<Out> out = new_pieces<Out>(s, shape);
  if (!out.is_addressable()) return out;
  const Shape local = out.local_shape();
  const std::vector<int64_t> strides = row_major_strides(local);
  dev::broadcast_map(static_cast<Out*>(out.buffer()->data()), local,
                     std::array<std::vector<int64_t>, sizeof...(T)>{((void)xs, strides)...}, f,
                     xs.local_data().data()...);
  return out;
}

/// One parameter's plan: where its state lives and (if given) where its gradient is reduced first.
struct OptimLeaf {
  NamedSharding state;
  std::optional<NamedSharding> grad;
};

inline NamedSharding checked_optim_sharding(const char* op, const char* what, const std::string& path,
                                            const NamedSharding& param, const Shape& shape, NamedSharding s) {
  DAX_CHECK(s.mesh() == param.mesh() && !s.is_unreduced(), op, ": the ", what, " sharding of '", path,
            "' must be a sharding on its parameter's mesh ", to_string(param.mesh()),
            " without unreduced axes, got ", to_string(s));
  s.check_rank(shape);
  return s;
}

/// Each parameter's plan, in leaf order, from the options' sharding functions.
template <class Params>
std::vector<OptimLeaf> plan_leaves(const char* op, const Params& params, const optim::ShardingFn& state,
                                   const optim::ShardingFn& grad) {
  std::vector<OptimLeaf> out;
  tree_for_each_with_path(
      [&](const std::string& path, const auto& p) {
        using T = typename std::remove_cvref_t<decltype(p)>::value_type;
        static_assert(is_floating_v<T>, "dax::optim: parameters must have a floating element type");
        const NamedSharding own = with_unreduced_axes(p.sharding(), p.shape().size(), {});
        OptimLeaf leaf{state ? checked_optim_sharding(op, "state", path, own, p.shape(), state(path, own, p.shape()))
                             : own,
                       std::nullopt};
        if (grad) leaf.grad = checked_optim_sharding(op, "gradient", path, own, p.shape(), grad(path, own, p.shape()));
        out.push_back(std::move(leaf));
      },
      params);
  DAX_CHECK(!out.empty(), op, ": the parameter tree has no arrays");
  return out;
}

/// Zeros like each parameter, laid out by its plan's state sharding.
template <class Params>
Params zeros_in_state_layout(const Params& params, const std::vector<OptimLeaf>& leaves) {
  size_t i = 0;
  return tree_map(
      [&](const auto& p) {
        using T = typename std::remove_cvref_t<decltype(p)>::value_type;
        return zeros<T>(p.shape(), leaves[i++].state);
      },
      params);
}

/// Where the step counter lives: replicated over every rank of the world, so every rank can read
/// it back whatever meshes the parameters are on.
inline NamedSharding counter_sharding() {
  return NamedSharding(Mesh({Runtime::current().size()}, {"ranks"}), P());
}

/// The step counter as a checkpointable array, and back.
inline DistArray<int64_t> counter_array(int64_t count, const NamedSharding& s) { return full<int64_t>({}, count, s); }
inline int64_t counter_value(const char* op, const DistArray<int64_t>& count) {
  DAX_CHECK(count.shape().empty(), op, ": the state's count must be a scalar, got shape ", to_string(count.shape()));
  const Mesh& mesh = count.sharding().mesh();
  bool everywhere = true;
  for (int r = 0; r < Runtime::current().size(); ++r) everywhere = everywhere && mesh.contains(r);
  DAX_CHECK(everywhere, op, ": the state's count must be on a mesh of every rank (as state() makes it), got ",
            to_string(mesh));
  const auto v = count.to_host();
  DAX_CHECK(v[0] >= 0, op, ": the state's count must be >= 0, got ", v[0]);
  return v[0];
}

/// The checks of one leaf of step(): same shape as the parameter, same element type.
template <class T, class G>
void check_gradient(const char* op, const std::string& path, const DistArray<T>& p, const DistArray<G>& g) {
  static_assert(std::is_same_v<T, G>, "dax::optim: each gradient must have its parameter's element type");
  DAX_CHECK(g.shape() == p.shape(), op, ": the gradient of '", path, "' has shape ", to_string(g.shape()),
            ", its parameter ", to_string(p.shape()));
  DAX_CHECK(g.sharding().mesh() == p.sharding().mesh(), op, ": the gradient of '", path, "' is on ",
            to_string(g.sharding().mesh()), ", its parameter on ", to_string(p.sharding().mesh()));
}

/// The gradient reduced where the plan says (ZeRO-2: a reduce-scatter of a partial sum), then laid
/// out like the state.
template <class T>
DistArray<T> gradient_in_state_layout(const OptimLeaf& leaf, const DistArray<T>& g) {
  return moved_to(leaf.grad ? moved_to(g, *leaf.grad) : g, leaf.state);
}

/// Structure checks of step(): gradients against parameters, parameters against the state.
template <class Params, class Grads>
void check_step_trees(const char* op, const Params& params, const Grads& grads, const Params& state) {
  std::string path;
  check_same_structure(StructureCheck{op, "the gradient tree", "the parameters"}, path, params, grads);
  check_same_structure(StructureCheck{op, "the parameter tree", "the optimizer's state"}, path, state, params);
}

}  // namespace dax::detail
