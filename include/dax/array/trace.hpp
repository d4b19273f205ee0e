// The recording interface between differentiable ops and autodiff (DESIGN §4.10): while a gradient
// is being taken, autodiff installs a Tracer, and every op whose inputs are traced records its
// inputs and a pullback (output cotangent -> one cotangent per input). When no gradient is being
// taken the check is one thread-local load, so eager ops pay nothing. Lives in array/ so ops in
// array/ and ops/ record through it without pointing up at autodiff/, which implements it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <dax/core/dtype.hpp>
#include <dax/core/error.hpp>
#include <dax/core/float16.hpp>

namespace dax {

template <class T>
class DistArray;
class NamedSharding;

namespace detail {

/// A DistArray of any element type, shared: cotangents cross the tape erased. Empty means "no
/// cotangent" (an input that gets nothing from this op, or a symbolic zero).
class AnyArray {
 public:
  AnyArray() = default;
  template <class T>
  AnyArray(const DistArray<T>& x)
      : dtype_(dtype_v<T>), array_(std::make_shared<const DistArray<T>>(x)), relabel_([](const void* a, int part) {
          if (const auto& buffer = static_cast<const DistArray<T>*>(a)->stored_buffer()) buffer->relabel(part);
        }) {}

  bool empty() const { return !array_; }
  DType dtype() const { return dtype_; }
  template <class T>
  const DistArray<T>& as() const {
    DAX_CHECK(array_ && dtype_ == dtype_v<T>, "autodiff: a cotangent of ", to_string(dtype_v<T>), " was expected, got ",
              array_ ? to_string(dtype_) : std::string("none"));
    return *static_cast<const DistArray<T>*>(array_.get());
  }
  /// Counts its buffer under memory part `part` from now on (backend/memory_parts.hpp).
  void relabel(int part) const {
    if (array_) relabel_(array_.get(), part);
  }

 private:
  DType dtype_ = DType::float32;
  std::shared_ptr<const void> array_;
  void (*relabel_)(const void*, int) = nullptr;
};

/// Output cotangent -> one cotangent per recorded input (empty where it contributes nothing).
using Pullback = std::function<std::vector<AnyArray>(const AnyArray&)>;

/// Replication typing inside a shard_map body (docs/autodiff.md): how an op changes the set of mesh
/// axes its value varies over, as bits of the enclosing mesh's axes. An ordinary op's output varies
/// over the union of its inputs' axes, and an input that varies over fewer is implicitly broadcast
/// (its cotangent is summed over the difference). A collective over axes A first makes its input
/// vary over A (`added`); psum then makes its output invariant over A (`removed`). `enters` marks
/// the node that turns a global argument into a block: its output varies over `added` exactly.
struct Varying {
  uint64_t added = 0;
  uint64_t removed = 0;
  bool enters = false;
  /// A collective of a shard_map body: its pullback communicates, so every device of the group
  /// must run it, with a zero cotangent where its output reached nothing (else the devices whose
  /// output was used would wait on those whose output was dropped).
  bool collective = false;
};

/// Ids with this bit carry replication typing only (a value inside a shard_map body that no
/// gradient flows through: an integer block, a batch that is not differentiated); they get no
/// cotangent. Tape ids count up from 1 and never reach it.
constexpr uint64_t kTypingOnly = uint64_t{1} << 63;

class Tracer {
 public:
  virtual ~Tracer() = default;
  /// Records an op named `op` whose inputs are the tape nodes `inputs` (0: an input that is not
  /// traced, which gets no cotangent); returns the output's node. A null pullback records typing
  /// only (inside a shard_map body; elsewhere it records nothing and returns 0).
  virtual uint64_t record(const char* op, std::vector<uint64_t> inputs, Pullback pullback, Varying varying = {}) = 0;
  /// The mesh axes (bits) the value of node `id` varies over inside its shard_map body.
  virtual uint64_t varying_axes(uint64_t id) const = 0;
  /// Whether node `id` is a leaf whose cotangents add up over a step's backward passes (a
  /// parameter; a pipeline stage's input is not).
  virtual bool is_summed_leaf(uint64_t id) const {
    (void)id;
    return false;
  }
  /// Where node `id`'s own pullback takes its cotangent, reducing kept partial sums there: a move's
  /// (reshard's) input layout, so an FSDP weight's gradient is reduce-scattered to its stored
  /// layout; null for other ops. A product making that cotangent prices the reduction there.
  virtual std::shared_ptr<const NamedSharding> cotangent_destination(uint64_t id) const {
    (void)id;
    return nullptr;
  }
  virtual void set_cotangent_destination(uint64_t id, std::shared_ptr<const NamedSharding> at) {
    (void)id;
    (void)at;
  }
};

/// The tracer of the gradient being taken on this thread, or null.
inline Tracer*& active_tracer() {
  thread_local Tracer* tracer = nullptr;
  return tracer;
}

/// Suspends recording in a scope (pullbacks run under it: no higher-order gradients).
class NoTrace {
 public:
  NoTrace() : saved_(std::exchange(active_tracer(), nullptr)) {}
  ~NoTrace() { active_tracer() = saved_; }
  NoTrace(const NoTrace&) = delete;
  NoTrace& operator=(const NoTrace&) = delete;

 private:
  Tracer* saved_;
};

/// Which inputs the pullback running now should give cotangents for (null: all it can). A split
/// backward (zero-bubble pipelines: autodiff/tape.hpp) asks first for the inputs on the way to the
/// chunk's input, then for the weights; a pullback may skip an unwanted input's work (matmul
/// skips its GEMM) or compute it anyway (the tape keeps what comes).
inline const std::vector<bool>*& cotangent_mask() {
  thread_local const std::vector<bool>* mask = nullptr;
  return mask;
}
inline bool cotangent_wanted(size_t input) {
  const std::vector<bool>* mask = cotangent_mask();
  return mask == nullptr || (input < mask->size() && (*mask)[input]);
}

/// need[k] of a recorded op less what the running pass does not want (cotangent_mask): for
/// pullbacks whose inputs' cotangents share no work, so that a skipped one is work saved, not
/// work done twice (a bias's sum, a gain's: the weight pass of a split backward computes them).
template <class Need>
bool wanted_now(const Need& need, size_t k) {
  return need[k] && cotangent_wanted(k);
}

/// Whether an op on these inputs must record: a gradient is being taken and one of them is on the
/// tape (for a gradient, or for replication typing only).
template <class... In>
bool tracing(const DistArray<In>&... inputs) {
  return active_tracer() != nullptr && ((inputs.trace_id() != 0) || ...);
}

/// Whether a gradient flows back to x (a floating value on the tape, not for typing only).
template <class T>
bool needs_gradient(const DistArray<T>& x) {
  return is_differentiable_v<T> && x.trace_id() != 0 && (x.trace_id() & kTypingOnly) == 0;
}

/// How many backward passes add their cotangents of a leaf together, unreduced, before the sum is
/// reduced once: a pipeline's microbatches (LeafSums), else 1. A product whose cotangent for a
/// leaf keeps partial sums then pays 1/n of that reduction (ops/matmul_rule.hpp).
inline int64_t& leaf_sum_count() {
  thread_local int64_t count = 1;
  return count;
}
/// While alive, leaves' cotangents are summed over `count` backward passes (see leaf_sum_count).
class LeafSums {
 public:
  explicit LeafSums(int64_t count) : previous_(leaf_sum_count()) { leaf_sum_count() = count; }
  ~LeafSums() { leaf_sum_count() = previous_; }
  LeafSums(const LeafSums&) = delete;
  LeafSums& operator=(const LeafSums&) = delete;

 private:
  int64_t previous_;
};
/// leaf_sum_count() where x is a parameter leaf of the gradient being taken, else 1.
template <class T>
int64_t leaf_sums_of(const DistArray<T>& x) {
  return needs_gradient(x) && active_tracer() != nullptr && active_tracer()->is_summed_leaf(x.trace_id())
             ? leaf_sum_count()
             : 1;
}

/// Where x's cotangent is taken by the op that made x (see Tracer::cotangent_destination), or null.
template <class T>
std::shared_ptr<const NamedSharding> cotangent_destination_of(const DistArray<T>& x) {
  return needs_gradient(x) && active_tracer() != nullptr ? active_tracer()->cotangent_destination(x.trace_id())
                                                         : nullptr;
}

using Cotangents = std::vector<AnyArray>;

/// Records `out = op(inputs...)` when tracing. Where `out` is floating and some input needs a
/// gradient, `make_pullback(need)` is called (a generic lambda, so its body is not even compiled
/// for integer outputs); `need[i]` says whether input i needs a gradient. It returns a callable
/// (const DistArray<Out>& g) -> Cotangents, one entry per input, empty where not needed. Otherwise
/// the op is recorded for replication typing only (which the tape keeps inside shard_map bodies).
template <class Out, class MakePullback, class... In>
void record(const char* op, DistArray<Out>& out, MakePullback&& make_pullback, const DistArray<In>&... inputs) {
  if (!tracing(inputs...)) return;
  const std::array<bool, sizeof...(In)> need{needs_gradient(inputs)...};
  Pullback pullback;
  if constexpr (is_differentiable_v<Out>) {
    if (std::find(need.begin(), need.end(), true) != need.end())
      pullback = [p = make_pullback(need)](const AnyArray& g) { return p(g.template as<Out>()); };
  }
  out.set_trace_id(active_tracer()->record(op, {inputs.trace_id()...}, std::move(pullback), {}));
}

/// Records an op that no gradient flows through but whose output's replication typing follows its
/// inputs' (comparisons, arg-reductions).
template <class Out, class... In>
void record_typing(const char* op, DistArray<Out>& out, const DistArray<In>&... inputs) {
  if (tracing(inputs...)) out.set_trace_id(active_tracer()->record(op, {inputs.trace_id()...}, nullptr, {}));
}

/// For ops that have no gradient rule: taking a gradient through them is an error, never a
/// silent zero.
template <class... In>
void no_gradient(const char* op, const DistArray<In>&... inputs) {
  DAX_CHECK(active_tracer() == nullptr || !(needs_gradient(inputs) || ...), op,
            " has no gradient rule, and a value being differentiated reached it; "
            "wrap its input in dax::stop_gradient if no gradient should flow through it");
}

/// Records an op over a list of same-typed inputs (concatenate, stack); make_pullback(need) as
/// above with `need` a std::vector<bool>.
template <class T, class MakePullback>
void record_list(const char* op, DistArray<T>& out, MakePullback&& make_pullback,
                 const std::vector<DistArray<T>>& inputs) {
  if (active_tracer() == nullptr) return;
  std::vector<uint64_t> ids;
  std::vector<bool> need;
  bool any = false;
  for (const auto& x : inputs) {
    ids.push_back(x.trace_id());
    need.push_back(needs_gradient(x));
    any = any || x.trace_id() != 0;
  }
  if (!any) return;
  Pullback pullback;
  if constexpr (is_differentiable_v<T>) {
    if (std::find(need.begin(), need.end(), true) != need.end())
      pullback = [p = make_pullback(need)](const AnyArray& g) { return p(g.template as<T>()); };
  }
  out.set_trace_id(active_tracer()->record(op, std::move(ids), std::move(pullback), {}));
}

}  // namespace detail

/// x as a constant: no gradient flows back through it (the same data, shared). Inside a shard_map
/// body being differentiated it keeps its replication typing.
template <class T>
DistArray<T> stop_gradient(const DistArray<T>& x) {
  DistArray<T> out = x;
  out.set_trace_id(0);
  detail::record_typing("stop_gradient", out, x);
  return out;
}

}  // namespace dax
