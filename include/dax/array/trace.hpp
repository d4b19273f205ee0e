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

namespace detail {

/// A DistArray of any element type, shared: cotangents cross the tape erased. Empty means "no
/// cotangent" (an input that gets nothing from this op, or a symbolic zero).
class AnyArray {
 public:
  AnyArray() = default;
  template <class T>
  AnyArray(const DistArray<T>& x) : dtype_(dtype_v<T>), array_(std::make_shared<const DistArray<T>>(x)) {}

  bool empty() const { return !array_; }
  DType dtype() const { return dtype_; }
  template <class T>
  const DistArray<T>& as() const {
    DAX_CHECK(array_ && dtype_ == dtype_v<T>, "autodiff: a cotangent of ", to_string(dtype_v<T>), " was expected, got ",
              array_ ? to_string(dtype_) : std::string("none"));
    return *static_cast<const DistArray<T>*>(array_.get());
  }

 private:
  DType dtype_ = DType::float32;
  std::shared_ptr<const void> array_;
};

/// Output cotangent -> one cotangent per recorded input (empty where it contributes nothing).
using Pullback = std::function<std::vector<AnyArray>(const AnyArray&)>;

class Tracer {
 public:
  virtual ~Tracer() = default;
  /// Records an op named `op` whose inputs are the tape nodes `inputs` (0: an input that is not
  /// traced, which gets no cotangent); returns the output's node.
  virtual uint64_t record(const char* op, std::vector<uint64_t> inputs, Pullback pullback) = 0;
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

/// Whether an op on these inputs must record: a gradient is being taken and one of them is traced.
template <class... In>
bool tracing(const DistArray<In>&... inputs) {
  return active_tracer() != nullptr && ((inputs.trace_id() != 0) || ...);
}

using Cotangents = std::vector<AnyArray>;

/// Records `out = op(inputs...)` when tracing and `out` is differentiable (floating). Only then is
/// `make_pullback(need)` called (a generic lambda, so its body is not even compiled for integer
/// outputs); `need[i]` says whether input i is traced. It returns a callable
/// (const DistArray<Out>& g) -> Cotangents, one entry per input, empty where not needed.
template <class Out, class MakePullback, class... In>
void record(const char* op, DistArray<Out>& out, MakePullback&& make_pullback, const DistArray<In>&... inputs) {
  if constexpr (is_floating_v<Out>) {
    if (!tracing(inputs...)) return;
    auto pullback = make_pullback(std::array<bool, sizeof...(In)>{(inputs.trace_id() != 0)...});
    out.set_trace_id(active_tracer()->record(
        op, {inputs.trace_id()...},
        [pullback = std::move(pullback)](const AnyArray& g) { return pullback(g.template as<Out>()); }));
  }
}

/// For ops that have no gradient rule: taking a gradient through them is an error, never a
/// silent zero.
template <class... In>
void no_gradient(const char* op, const DistArray<In>&... inputs) {
  DAX_CHECK(!tracing(inputs...), op, " has no gradient rule, and a value being differentiated reached it; "
            "wrap its input in dax::stop_gradient if no gradient should flow through it");
}

/// Records an op over a list of same-typed inputs (concatenate, stack); make_pullback(need) as
/// above with `need` a std::vector<bool>.
template <class T, class MakePullback>
void record_list(const char* op, DistArray<T>& out, MakePullback&& make_pullback,
                 const std::vector<DistArray<T>>& inputs) {
  if constexpr (is_floating_v<T>) {
    if (active_tracer() == nullptr) return;
    std::vector<uint64_t> ids;
    std::vector<bool> need;
    for (const auto& x : inputs) {
      ids.push_back(x.trace_id());
      need.push_back(x.trace_id() != 0);
    }
    if (std::find(need.begin(), need.end(), true) == need.end()) return;
    auto pullback = make_pullback(need);
    out.set_trace_id(active_tracer()->record(
        op, std::move(ids), [pullback = std::move(pullback)](const AnyArray& g) { return pullback(g.template as<T>()); }));
  }
}

}  // namespace detail

/// x as a constant: no gradient flows back through it (the same data, shared).
template <class T>
DistArray<T> stop_gradient(const DistArray<T>& x) {
  DistArray<T> out = x;
  out.set_trace_id(0);
  return out;
}

}  // namespace dax
