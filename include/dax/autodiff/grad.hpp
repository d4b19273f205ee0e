// dax::value_and_grad, dax::grad and dax::vjp: reverse-mode gradients of eager code over sharded
// arrays (JAX's names and conventions). The function runs once, eagerly, with a tape recording
// every op on the watched values; the backward replays the tape in reverse with ordinary dax ops,
// so it gets the sharding rules, resharding and kernels of the forward for free. Each gradient
// comes back with its parameter's sharding: partial sums are reduced once, at the end, by a reshard
// to it (DESIGN §6: a replicated weight's gradient is one all-reduce, a sharded one's one
// reduce-scatter).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dax/array/creation.hpp>
#include <dax/array/reshard.hpp>
#include <dax/core/call_site.hpp>
#include <dax/autodiff/tape.hpp>
#include <dax/autodiff/tree.hpp>

namespace dax {

/// The cotangent vjp gives an argument that is not a tree of arrays (a flag, a config struct...).
struct NoCotangent {};

/// Where value_and_grad leaves each gradient: (the parameter's path in its tree, its sharding, its
/// shape) -> a sharding on the same mesh. The same signature as dax::optim::ShardingFn, so
/// `value_and_grad(loss, optim::shard_over("data"))` gives ZeRO-2's gradients: each replicated
/// parameter's partial sums reduce-scattered over 'data', never all-reduced.
using GradShardingFn =
    std::function<NamedSharding(const std::string& path, const NamedSharding& param, const Shape& shape)>;

namespace detail {

/// Marks the floating and complex leaves of `tree` as new tape leaves (integer leaves stay constants).
template <class Tree>
void watch_tree(Tape& tape, Tree& tree) {
  tree_for_each(
      [&](auto& leaf) {
        using T = typename std::remove_cvref_t<decltype(leaf)>::value_type;
        leaf.set_trace_id(is_differentiable_v<T> ? tape.watch() : 0);
      },
      tree);
}

template <class Tree>
void leaf_ids(const Tree& tree, std::vector<uint64_t>& ids) {
  tree_for_each([&](const auto& leaf) { if (leaf.trace_id() != 0) ids.push_back(leaf.trace_id()); }, tree);
}

/// The gradient tree: per leaf, its summed cotangent resharded (reduced) to the primal's sharding,
/// or to `where(path, primal sharding, shape)` when given, or zeros where nothing reached it.
template <class Tree>
Tree gradient_tree(const std::unordered_map<uint64_t, AnyArray>& cotangents, const Tree& primal, const Tree& traced,
                   const GradShardingFn& where = {}) {
  const SiteScope site(SiteScope::Part{}, "gradients");  // their reductions, in the call-site counts
  return tree_map_with_path(
      [&](const std::string& path, const auto& p, const auto& t) {
        using T = typename std::remove_cvref_t<decltype(p)>::value_type;
        const NamedSharding to = where ? where(path, p.sharding(), p.shape()) : p.sharding();
        DAX_CHECK(!where || to.mesh() == p.sharding().mesh(), "value_and_grad: the gradient sharding of '", path,
                  "' is on ", to_string(to.mesh()), ", its parameter on ", to_string(p.sharding().mesh()));
        const auto it = cotangents.find(t.trace_id());
        if (it == cotangents.end()) return zeros<T>(p.shape(), to);
        return reshard_untraced(it->second.template as<T>(), to);
      },
      primal, traced);
}


/// The loss part of what the function returned: the value itself, or the first of (value, aux).
template <class R>
const auto& loss_of(const R& r) {
  if constexpr (is_dist_array<R>::value) return r;
  else return std::get<0>(r);
}

template <class T>
void check_scalar_loss(const DistArray<T>& loss, const char* api) {
  static_assert(is_floating_v<T>, "dax::value_and_grad: the function must return a floating-point scalar array");
  DAX_CHECK(loss.ndim() == 0, api, ": gradient only defined for scalar-output functions; the function returned shape ",
            to_string(loss.shape()), " (reduce it, e.g. with dax::sum or dax::mean)");
}

/// The value with its tape link removed and its partial sums reduced: what the caller gets back.
template <class T>
DistArray<T> detached(const DistArray<T>& x) {
  DistArray<T> r = x.sharding().is_unreduced()
                       ? reshard_untraced(x, with_unreduced_axes(x.sharding(), x.ndim(), {}))
                       : x;
  r.set_trace_id(0);
  return r;
}

}  // namespace detail

/// f(params, args...) -> scalar DistArray, or (scalar, aux) as a std::pair / std::tuple of two.
/// Returns a callable giving (value, gradients) — ((value, aux), gradients) in the aux form — with
/// the gradients taken with respect to `params` (a tree), as a tree of the same structure whose
/// every leaf has its parameter's sharding.
///
/// With `grad_sharding`, each gradient comes back in the sharding it names instead (ZeRO-2: the
/// reduction of a replicated parameter's partial sums is then a reduce-scatter to that sharding).
namespace detail {
/// What value_and_grad returns after its static_assert on a non-tree (nothing is computed).
struct NotATree {};
}  // namespace detail

template <class F>
auto value_and_grad(F f, GradShardingFn grad_sharding = {}) {
  return [f, grad_sharding](const auto& params, const auto&... args) {
    using Params = std::remove_cvref_t<decltype(params)>;
    if constexpr (!is_tree_v<Params>) {  // one message, and nothing else instantiated after it
      static_assert(is_tree_v<Params>, DAX_NOT_A_TREE_MESSAGE("dax::value_and_grad: the parameters (first argument)"));
      return std::pair<detail::NotATree, detail::NotATree>{};  // decomposes, so the caller adds no error
    } else {
      detail::Tape tape;
      Params traced = params;
      auto result = [&] {
        const MemoryPart part(detail::kForwardPart, true);  // unless the caller named one
        detail::TapeScope scope(tape);
        detail::watch_tree(tape, traced);
        return f(std::as_const(traced), args...);
      }();
      const auto& loss = detail::loss_of(result);
      using T = typename std::remove_cvref_t<decltype(loss)>::value_type;
      detail::check_scalar_loss(loss, "value_and_grad");
      std::vector<uint64_t> leaves;
      detail::leaf_ids(traced, leaves);
      const auto seed = ones<T>({}, NamedSharding(loss.sharding().mesh(), P()));
      const auto cotangents = [&] {
        const MemoryPart part(detail::kBackwardPart, true);
        return tape.backward_once(loss.trace_id(), detail::AnyArray(seed), leaves);  // frees as it goes
      }();
      Params grads = [&] {
        const MemoryPart part(detail::kGradientsPart, true);
        return detail::gradient_tree(cotangents, params, traced, grad_sharding);
      }();
      if constexpr (detail::is_dist_array<decltype(result)>::value) {
        return std::pair{detail::detached(result), std::move(grads)};
      } else {
        auto value = std::pair{detail::detached(loss), std::get<1>(result)};
        return std::pair{std::move(value), std::move(grads)};
      }
    }
  };
}

/// The gradients alone (the aux form returns (gradients, aux)).
template <class F>
auto grad(F f, GradShardingFn grad_sharding = {}) {
  return [vg = value_and_grad(std::move(f), std::move(grad_sharding))](const auto& params, const auto&... args) {
    auto [value, grads] = vg(params, args...);
    if constexpr (detail::is_dist_array<decltype(value)>::value) {
      return grads;
    } else {
      return std::pair{std::move(grads), std::move(value.second)};
    }
  };
}

/// Runs f(args...) -> DistArray and returns (output, pullback): pullback(cotangent of the output)
/// gives a std::tuple with one entry per argument — for a tree of arrays, the tree of its
/// cotangents (each with its argument's sharding); for anything else, NoCotangent. The pullback may
/// be called more than once.
template <class F, class... Args>
auto vjp(F f, const Args&... args) {
  auto tape = std::make_shared<detail::Tape>();
  auto traced = std::make_shared<std::tuple<Args...>>(args...);
  auto out = [&] {
    detail::TapeScope scope(*tape);
    std::apply([&](auto&... a) { (
                   [&] {
                     if constexpr (is_tree_v<std::remove_cvref_t<decltype(a)>>) detail::watch_tree(*tape, a);
                   }(), ...); },
               *traced);
    return std::apply([&](const auto&... a) { return f(a...); }, *traced);
  }();
  static_assert(detail::is_dist_array<decltype(out)>::value, "dax::vjp: the function must return a DistArray");
  using Out = typename decltype(out)::value_type;
  const uint64_t out_id = out.trace_id();
  auto primals = std::make_shared<std::tuple<Args...>>(args...);
  auto pullback = [tape, traced, primals, out_id, out_shape = out.shape()](const DistArray<Out>& cotangent) {
    DAX_CHECK(cotangent.shape() == out_shape, "vjp: the cotangent has shape ", to_string(cotangent.shape()),
              " but the output had shape ", to_string(out_shape));
    std::vector<uint64_t> leaves;
    std::apply([&](const auto&... a) { (
                   [&] {
                     if constexpr (is_tree_v<std::remove_cvref_t<decltype(a)>>) detail::leaf_ids(a, leaves);
                   }(), ...); },
               *traced);
    const auto cotangents = tape->backward(out_id, detail::AnyArray(cotangent), leaves);
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return std::tuple{[&] {
        using A = std::tuple_element_t<I, std::tuple<Args...>>;
        if constexpr (is_tree_v<A>) return detail::gradient_tree(cotangents, std::get<I>(*primals), std::get<I>(*traced));
        else return NoCotangent{};
      }()...};
    }(std::index_sequence_for<Args...>{});
  };
  return std::pair{detail::detached(out), std::move(pullback)};
}

}  // namespace dax
