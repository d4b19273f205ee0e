// The tape: autodiff's implementation of the recording interface (array/trace.hpp). While a
// gradient is being taken it holds, in program order, each traced op's inputs and pullback; the
// backward walks it in reverse, feeding each node's cotangent to its pullback and summing what
// arrives at each input. Cotangents that are partial sums stay unreduced through those sums
// (elementwise add keeps equal unreduced axes); the caller reduces each gradient once, at the end.
//
// Inside a shard_map body the tape also does replication typing (JAX's "varying manual axes"):
// each node records the mesh axes its block varies over, and the cotangent of an input that
// varies over fewer axes than the op saw it at is summed (psum) over the difference, which is the
// transpose of the implicit broadcast. The node keeps the body's context, so its pullback runs
// with the body's collectives available.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dax/array/trace.hpp>
#include <dax/core/call_site.hpp>
#include <dax/core/error.hpp>
#include <dax/manual/collectives.hpp>
#include <dax/ops/elementwise.hpp>

namespace dax::detail {

/// a + b for two cotangents of the same element type.
inline AnyArray add_cotangents(const AnyArray& a, const AnyArray& b) {
  DAX_CHECK(a.dtype() == b.dtype(), "autodiff: cotangents of one value differ in element type: ", to_string(a.dtype()),
            " and ", to_string(b.dtype()));
  switch (a.dtype()) {
    case DType::float32: return AnyArray(add(a.as<float>(), b.as<float>()));
    case DType::float64: return AnyArray(add(a.as<double>(), b.as<double>()));
    case DType::float16: return AnyArray(add(a.as<half>(), b.as<half>()));
    case DType::bfloat16: return AnyArray(add(a.as<bfloat16>(), b.as<bfloat16>()));
    // Complex cotangents are added by the kernel alone: add's recorded pullback (never needed in a
    // backward) would compile complex reductions into the CUDA backend, which has none.
    case DType::complex64:
      return AnyArray(map<complex64>(Linearity::additive, fn::Add{}, a.as<complex64>(), b.as<complex64>()));
    case DType::complex128:
      return AnyArray(map<complex128>(Linearity::additive, fn::Add{}, a.as<complex128>(), b.as<complex128>()));
    default: fail("autodiff: a cotangent of ", to_string(a.dtype()), " (only floating and complex values have gradients)");
  }
}

/// The psum of a cotangent over the named axes of the enclosing shard_map body.
inline AnyArray psum_cotangent(const AnyArray& g, const AxisNames& axes) {
  switch (g.dtype()) {
    case DType::float32: return AnyArray(psum(g.as<float>(), axes));
    case DType::float64: return AnyArray(psum(g.as<double>(), axes));
    case DType::float16: return AnyArray(psum(g.as<half>(), axes));
    case DType::bfloat16: return AnyArray(psum(g.as<bfloat16>(), axes));
    case DType::complex64: return AnyArray(psum(g.as<complex64>(), axes));
    case DType::complex128: return AnyArray(psum(g.as<complex128>(), axes));
    default: fail("autodiff: a cotangent of ", to_string(g.dtype()), " (only floating and complex values have gradients)");
  }
}

class Tape final : public Tracer {
 public:
  Tape() = default;
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  uint64_t record(const char* op, std::vector<uint64_t> inputs, Pullback pullback, Varying varying = {}) override {
    for (uint64_t& id : inputs)
      if (!index_.contains(id)) id = 0;  // a value traced by another (finished) gradient is a constant here
    std::shared_ptr<const ManualContext> body = manual_stack().empty() ? nullptr : manual_stack().back();
    if (!body) return pullback ? add_node(op, std::move(inputs), std::move(pullback), nullptr, 0, {}) : 0;
    // Inside a shard_map body: the axes the op sees its inputs at, and what each input's cotangent
    // must be summed over to come back to the input's own axes.
    uint64_t seen = varying.added;
    if (!varying.enters)
      for (uint64_t id : inputs) seen |= varying_axes(id);
    std::vector<uint64_t> broadcast(inputs.size(), 0);
    if (!varying.enters)
      for (size_t k = 0; k < inputs.size(); ++k) broadcast[k] = seen & ~varying_axes(inputs[k]);
    const uint64_t id = add_node(op, std::move(inputs), std::move(pullback), std::move(body), seen & ~varying.removed,
                                 std::move(broadcast));
    if (varying.collective && nodes_.back().pullback) nodes_.back().collective = true;
    return id;
  }

  uint64_t varying_axes(uint64_t id) const override {
    const auto it = index_.find(id);
    return it == index_.end() ? 0 : nodes_[it->second].varying;
  }

  bool is_summed_leaf(uint64_t id) const override {
    const auto it = index_.find(id);
    return it != index_.end() && nodes_[it->second].summed_leaf;
  }

  std::shared_ptr<const NamedSharding> cotangent_destination(uint64_t id) const override {
    const auto it = index_.find(id);
    return it == index_.end() ? nullptr : nodes_[it->second].destination;
  }
  void set_cotangent_destination(uint64_t id, std::shared_ptr<const NamedSharding> at) override {
    const auto it = index_.find(id);
    if (it != index_.end()) nodes_[it->second].destination = std::move(at);
  }

  /// A new leaf (a value gradients are taken with respect to).
  /// `summed`: its cotangents are a parameter's, added up over the backward passes of a step
  /// (LeafSums); false for an input whose cotangent goes back at once (a pipeline stage's).
  uint64_t watch(bool summed = true) {
    const uint64_t id = add_node("input", {}, nullptr, nullptr, 0, {});
    nodes_.back().summed_leaf = summed;
    return id;
  }

  /// Runs the backward from `output` with cotangent `seed`; returns the summed cotangents that
  /// reach the leaves in `leaves` (a leaf nothing reached is absent). The tape stays as it was (a
  /// vjp's pullback may run again).
  std::unordered_map<uint64_t, AnyArray> backward(uint64_t output, AnyArray seed,
                                                  const std::vector<uint64_t>& leaves) const {
    return const_cast<Tape*>(this)->run_backward(output, std::move(seed), leaves, false);
  }

  /// The same for a tape used once (value_and_grad): each node's pullback, with the forward's
  /// values it holds, is let go as soon as it has run, as PyTorch frees a graph's saved tensors
  /// during its backward, so the activations of the later layers are gone before the earlier
  /// layers' gradients are computed and the peak is lower. The tape cannot run a backward again.
  std::unordered_map<uint64_t, AnyArray> backward_once(uint64_t output, AnyArray seed,
                                                       const std::vector<uint64_t>& leaves) {
    return run_backward(output, std::move(seed), leaves, true);
  }

 private:
  std::unordered_map<uint64_t, AnyArray> run_backward(uint64_t output, AnyArray seed,
                                                      const std::vector<uint64_t>& leaves, bool release) {
    NoTrace no_trace;  // pullbacks are plain eager ops
    std::unordered_map<uint64_t, AnyArray> cotangent;
    std::unordered_map<uint64_t, AnyArray> result;
    auto wanted = [&](uint64_t id) { return std::find(leaves.begin(), leaves.end(), id) != leaves.end(); };
    if (!index_.contains(output)) return result;
    cotangent.emplace(output, std::move(seed));
    for (size_t i = index_.at(output) + 1; i-- > 0;) {
      const Node& node = nodes_[i];
      auto it = cotangent.find(node.id);
      AnyArray g;  // empty: a body's collective whose output reached nothing here runs on zeros
      if (it == cotangent.end()) {
        if (!node.collective) continue;
      } else {
        g = std::move(it->second);
        cotangent.erase(it);  // no longer needed: free it as the backward goes
      }
      if (!node.pullback) {
        if (wanted(node.id)) result.emplace(node.id, g);
        continue;
      }
      Cotangents parts = run_pullback(node, g);
      if (release) nodes_[i].pullback = nullptr;  // what it saved of the forward goes now
      DAX_CHECK(parts.size() == node.inputs.size(), "autodiff: the pullback of ", node.op, " gave ", parts.size(),
                " cotangents for ", node.inputs.size(), " inputs");
      for (size_t k = 0; k < parts.size(); ++k) {
        if (node.inputs[k] == 0 || parts[k].empty()) continue;
        add_to(cotangent, node.inputs[k], parts[k]);
      }
    }
    return result;
  }

 public:

  bool knows(uint64_t id) const { return index_.contains(id); }

  /// A backward split in two (zero-bubble pipelines): backward_input gives the cotangent of one
  /// input leaf, running each pullback for the inputs on the way to it only; what the weights
  /// still need waits here for backward_weight.
  struct WeightPass {
    std::unordered_map<uint64_t, AnyArray> cotangents;      // reached weights' side already
    std::vector<std::pair<size_t, AnyArray>> deferred;      // (node, its cotangent): pullbacks to finish
    std::vector<bool> from_input;                           // per node: depends on the input
  };

  /// The first half: the cotangent of `input` (absent if nothing reached it). Pullbacks that skip
  /// unwanted inputs (matmul) are kept in `later` with their cotangents; parts they computed
  /// anyway for the other inputs are kept there too, so nothing is computed twice. Without
  /// `want_input` the input's own cotangent is not asked for (a pipeline's first chunk: the
  /// activations' gradients are this pass's work, the input's is nobody's).
  std::unordered_map<uint64_t, AnyArray> backward_input(uint64_t output, AnyArray seed, uint64_t input,
                                                        WeightPass& later, bool want_input = true) const {
    NoTrace no_trace;
    std::unordered_map<uint64_t, AnyArray> cotangent, result;
    later.from_input.assign(nodes_.size(), false);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      bool dep = nodes_[i].id == input;
      for (uint64_t in : nodes_[i].inputs) {
        auto at = index_.find(in);
        dep = dep || (at != index_.end() && later.from_input[at->second]);
      }
      later.from_input[i] = dep;
    }
    auto depends = [&](uint64_t id) {
      auto at = index_.find(id);
      return at != index_.end() && later.from_input[at->second];
    };
    if (!index_.contains(output)) return result;
    cotangent.emplace(output, std::move(seed));
    for (size_t i = index_.at(output) + 1; i-- > 0;) {
      const Node& node = nodes_[i];
      auto it = cotangent.find(node.id);
      if (it == cotangent.end()) continue;
      AnyArray g = std::move(it->second);
      cotangent.erase(it);
      if (!node.pullback) {
        if (node.id == input && want_input) result.emplace(node.id, g);
        continue;
      }
      std::vector<bool> mask(node.inputs.size());
      for (size_t k = 0; k < mask.size(); ++k)
        mask[k] = depends(node.inputs[k]) && (want_input || node.inputs[k] != input);
      Cotangents parts = run_pullback(node, g, &mask);
      bool unfinished = false;
      for (size_t k = 0; k < parts.size() && k < node.inputs.size(); ++k) {
        if (node.inputs[k] == 0) continue;
        const bool unwanted_input = !want_input && node.inputs[k] == input;
        auto& into = mask[k] ? cotangent : later.cotangents;
        if (parts[k].empty() || unwanted_input) {
          unfinished = unfinished || (!mask[k] && !unwanted_input);
          continue;
        }
        add_to(into, node.inputs[k], parts[k]);
      }
      if (unfinished) later.deferred.emplace_back(i, std::move(g));
    }
    return result;
  }

  /// The second half: the cotangents of `leaves` (the weights), from the pullbacks backward_input
  /// left and the nodes that depend on the weights alone.
  std::unordered_map<uint64_t, AnyArray> backward_weight(WeightPass& later, const std::vector<uint64_t>& leaves) const {
    NoTrace no_trace;
    std::unordered_map<uint64_t, AnyArray> cotangent = std::move(later.cotangents), result;
    auto wanted = [&](uint64_t id) { return std::find(leaves.begin(), leaves.end(), id) != leaves.end(); };
    auto add = [&](const Node& node, const Cotangents& parts, const std::vector<bool>* only) {
      for (size_t k = 0; k < parts.size() && k < node.inputs.size(); ++k) {
        if (node.inputs[k] == 0 || parts[k].empty() || (only && !(*only)[k])) continue;
        add_to(cotangent, node.inputs[k], parts[k]);
      }
    };
    size_t d = 0;  // later.deferred is in decreasing node order, as this walk
    for (size_t i = nodes_.size(); i-- > 0;) {
      const Node& node = nodes_[i];
      for (; d < later.deferred.size() && later.deferred[d].first == i; ++d) {
        std::vector<bool> mask(node.inputs.size());
        for (size_t k = 0; k < mask.size(); ++k) {
          auto at = index_.find(node.inputs[k]);
          mask[k] = !(at != index_.end() && later.from_input[at->second]);
        }
        add(node, run_pullback(node, later.deferred[d].second, &mask), &mask);
      }
      if (later.from_input[i]) continue;
      auto it = cotangent.find(node.id);
      if (it == cotangent.end()) continue;
      AnyArray g = std::move(it->second);
      cotangent.erase(it);
      if (!node.pullback) {
        if (wanted(node.id)) result.emplace(node.id, g);
        continue;
      }
      add(node, run_pullback(node, g), nullptr);
    }
    later = WeightPass{};
    return result;
  }

 private:
  struct Node {
    uint64_t id;
    const char* op;
    std::vector<uint64_t> inputs;
    Pullback pullback;                         // null for leaves and typing-only nodes
    std::shared_ptr<const ManualContext> body;  // the shard_map body it was recorded in, or null
    uint64_t varying = 0;                      // in a body: the mesh axes (bits) its value varies over
    std::vector<uint64_t> broadcast;           // in a body: per input, the axes its cotangent is summed over
    bool collective = false;                   // in a body: runs even when no cotangent reached it
    std::shared_ptr<const std::string> site;   // the call site it was recorded at (core/call_site.hpp)
    bool summed_leaf = false;                  // a leaf whose cotangents add up over passes (watch)
    std::shared_ptr<const NamedSharding> destination;  // where its pullback moves its cotangent (a move's)
  };

  /// Adds `part` to the cotangent of node `id` in `into`. A parameter's (a summed leaf's) counts as
  /// "gradients" from then on, not as the backward's temporaries (dax::memory_stats' parts).
  void add_to(std::unordered_map<uint64_t, AnyArray>& into, uint64_t id, const AnyArray& part) const {
    auto [slot, fresh] = into.try_emplace(id, part);
    if (!fresh) slot->second = add_cotangents(slot->second, part);
    if (is_summed_leaf(id)) slot->second.relabel(gradients_memory_part());
  }

  /// A node's pullback; inside a shard_map body it runs in the body's context, and each input's
  /// cotangent is summed over the axes the input was implicitly broadcast along.
  /// `mask`: the inputs wanted (cotangent_mask), null for all.
  static Cotangents run_pullback(const Node& node, const AnyArray& g, const std::vector<bool>* mask = nullptr) {
    const ImplicitResharding backward;  // the backward's moves follow from the forward's layouts
    const SiteScope site(node.site ? *node.site : std::string());  // its collectives: the forward's site's, as its backward
    struct MaskScope {
      const std::vector<bool>* saved;
      explicit MaskScope(const std::vector<bool>* m) : saved(std::exchange(cotangent_mask(), m)) {}
      ~MaskScope() { cotangent_mask() = saved; }
    } mask_scope(mask);
    if (!node.body) return node.pullback(g);
    ManualScope scope(node.body, /*nested_ok=*/true);
    Cotangents parts = node.pullback(g);
    for (size_t k = 0; k < parts.size() && k < node.broadcast.size(); ++k)
      if (node.broadcast[k] != 0 && !parts[k].empty())
        parts[k] = psum_cotangent(parts[k], axes_of_mask(node.body->mesh, node.broadcast[k]));
    return parts;
  }

  uint64_t add_node(const char* op, std::vector<uint64_t> inputs, Pullback pullback,
                    std::shared_ptr<const ManualContext> body, uint64_t varying, std::vector<uint64_t> broadcast) {
    static std::atomic<uint64_t> next_id{1};  // unique in the process: a stale id never matches
    const bool typing_only = body && !pullback;
    const uint64_t id = next_id++ | (typing_only ? kTypingOnly : 0);
    std::shared_ptr<const std::string> site = current_site_label();  // before anything is added
    nodes_.push_back(Node{id, op, std::move(inputs), std::move(pullback), std::move(body), varying,
                          std::move(broadcast), false, std::move(site), false, nullptr});
    index_.emplace(id, nodes_.size() - 1);
    return id;
  }

  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, size_t> index_;
};

/// Installs a tape as this thread's tracer for a scope. Gradients of gradients are not supported:
/// a second one while one is active is an error.
class TapeScope {
 public:
  explicit TapeScope(Tape& tape) {
    DAX_CHECK(active_tracer() == nullptr,
              "autodiff: a gradient is already being taken on this thread (higher-order gradients are not supported)");
    active_tracer() = &tape;
  }
  ~TapeScope() { active_tracer() = nullptr; }
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;
};

}  // namespace dax::detail
