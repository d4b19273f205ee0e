// The tape: autodiff's implementation of the recording interface (array/trace.hpp). While a
// gradient is being taken it holds, in program order, each traced op's inputs and pullback; the
// backward walks it in reverse, feeding each node's cotangent to its pullback and summing what
// arrives at each input. Cotangents that are partial sums stay unreduced through those sums
// (elementwise add keeps equal unreduced axes); the caller reduces each gradient once, at the end.
#pragma once

#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <dax/array/trace.hpp>
#include <dax/core/error.hpp>
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
    default: fail("autodiff: a cotangent of ", to_string(a.dtype()), " (only floating values have gradients)");
  }
}

class Tape final : public Tracer {
 public:
  Tape() = default;
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  uint64_t record(const char* op, std::vector<uint64_t> inputs, Pullback pullback) override {
    for (uint64_t& id : inputs)
      if (!index_.contains(id)) id = 0;  // a value traced by another (finished) gradient is a constant here
    return add_node(op, std::move(inputs), std::move(pullback));
  }

  /// A new leaf (a value gradients are taken with respect to).
  uint64_t watch() { return add_node("input", {}, nullptr); }

  /// Runs the backward from `output` with cotangent `seed`; returns the summed cotangents that
  /// reach the leaves in `leaves` (a leaf nothing reached is absent).
  std::unordered_map<uint64_t, AnyArray> backward(uint64_t output, AnyArray seed,
                                                  const std::vector<uint64_t>& leaves) const {
    NoTrace no_trace;  // pullbacks are plain eager ops
    std::unordered_map<uint64_t, AnyArray> cotangent;
    std::unordered_map<uint64_t, AnyArray> result;
    auto wanted = [&](uint64_t id) { return std::find(leaves.begin(), leaves.end(), id) != leaves.end(); };
    if (!index_.contains(output)) return result;
    cotangent.emplace(output, std::move(seed));
    for (size_t i = index_.at(output) + 1; i-- > 0;) {
      const Node& node = nodes_[i];
      auto it = cotangent.find(node.id);
      if (it == cotangent.end()) continue;
      const AnyArray g = std::move(it->second);
      cotangent.erase(it);  // no longer needed: free it as the backward goes
      if (!node.pullback) {
        if (wanted(node.id)) result.emplace(node.id, g);
        continue;
      }
      const Cotangents parts = node.pullback(g);
      DAX_CHECK(parts.size() == node.inputs.size(), "autodiff: the pullback of ", node.op, " gave ", parts.size(),
                " cotangents for ", node.inputs.size(), " inputs");
      for (size_t k = 0; k < parts.size(); ++k) {
        if (node.inputs[k] == 0 || parts[k].empty()) continue;
        auto [slot, fresh] = cotangent.try_emplace(node.inputs[k], parts[k]);
        if (!fresh) slot->second = add_cotangents(slot->second, parts[k]);
      }
    }
    return result;
  }

  bool knows(uint64_t id) const { return index_.contains(id); }

 private:
  struct Node {
    uint64_t id;
    const char* op;
    std::vector<uint64_t> inputs;
    Pullback pullback;  // null for leaves
  };

  uint64_t add_node(const char* op, std::vector<uint64_t> inputs, Pullback pullback) {
    static std::atomic<uint64_t> next_id{1};  // unique in the process: a stale id never matches
    const uint64_t id = next_id++;
    index_.emplace(id, nodes_.size());
    nodes_.push_back(Node{id, op, std::move(inputs), std::move(pullback)});
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
