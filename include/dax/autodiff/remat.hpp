// dax::remat: jax.checkpoint's counterpart (named apart from dax's checkpoint files). remat(f) runs
// like f, but while a gradient is being taken it keeps only f's inputs on the tape, not the
// activations f computes from them: f runs once unrecorded, and the backward runs it again under a
// tape of its own to get the pullback. Memory for compute: each remat block costs one more forward.
#pragma once

#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dax/array/trace.hpp>
#include <dax/autodiff/tape.hpp>
#include <dax/autodiff/tree.hpp>

namespace dax {
namespace detail {

/// Every leaf's trace id, over the tree arguments in order (0 for a leaf not traced).
template <class... Args>
std::vector<uint64_t> argument_leaf_ids(const Args&... args) {
  std::vector<uint64_t> ids;
  auto one = [&](const auto& a) {
    if constexpr (is_tree_v<std::remove_cvref_t<decltype(a)>>)
      tree_for_each([&](const auto& leaf) { ids.push_back(leaf.trace_id()); }, a);
  };
  (one(args), ...);
  return ids;
}

}  // namespace detail

/// f recomputed in the backward instead of kept: remat(f)(args...) returns what f(args...) does (a
/// DistArray); arguments are trees of DistArrays (gradients flow to their floating leaves) or
/// anything else (kept as given). The gradient is the same as f's — the recomputation runs the
/// same ops on the same inputs, so it is bit for bit the same. Outside a gradient it is f.
template <class F>
auto remat(F f) {
  return [f](const auto&... args) {
    using Out = std::remove_cvref_t<decltype(f(args...))>;
    static_assert(detail::is_dist_array<Out>::value, "dax::remat: the function must return a DistArray");
    if (detail::active_tracer() == nullptr) return f(args...);
    const std::vector<uint64_t> ids = detail::argument_leaf_ids(args...);
    bool traced = false;
    for (uint64_t id : ids) traced = traced || id != 0;
    if (!traced || !detail::is_floating_v<typename Out::value_type>) return f(args...);
    // A block, not a lambda: nvcc 13 loses a captured parameter pack inside a nested lambda
    // ("too few arguments in function call").
    std::optional<Out> computed;
    {
      detail::NoTrace unrecorded;  // nothing f computes is kept for the backward
      computed.emplace(f(args...));
    }
    Out out = std::move(*computed);
    // What the backward needs: the inputs (the primals jax.checkpoint saves), held by the pullback.
    auto saved = std::make_shared<const std::tuple<std::remove_cvref_t<decltype(args)>...>>(args...);
    auto pullback = [f, saved, ids](const detail::AnyArray& g) {
      detail::Tape tape;
      auto inputs = *saved;
      std::vector<uint64_t> inner;  // each leaf's id on the inner tape, 0 where not traced outside
      size_t k = 0;
      std::apply([&](auto&... a) { (
                     [&] {
                       if constexpr (is_tree_v<std::remove_cvref_t<decltype(a)>>)
                         tree_for_each([&](auto& leaf) {
                           leaf.set_trace_id(ids[k++] != 0 ? tape.watch(/*summed=*/false) : 0);
                           inner.push_back(leaf.trace_id());
                         }, a);
                     }(), ...); },
                 inputs);
      const Out y = [&] {
        detail::TapeScope scope(tape);
        return std::apply([&](const auto&... a) { return f(a...); }, inputs);
      }();
      std::vector<uint64_t> leaves;
      for (uint64_t id : inner)
        if (id != 0) leaves.push_back(id);
      const auto cotangents = tape.backward(y.trace_id(), g, leaves);
      detail::Cotangents result(inner.size());
      for (size_t i = 0; i < inner.size(); ++i) {
        if (inner[i] == 0) continue;
        const auto it = cotangents.find(inner[i]);
        if (it != cotangents.end()) result[i] = it->second;
      }
      return result;
    };
    out.set_trace_id(detail::active_tracer()->record("remat", ids, std::move(pullback)));
    return out;
  };
}

}  // namespace dax
