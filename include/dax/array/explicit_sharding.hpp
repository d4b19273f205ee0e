// Explicit sharding (JAX's explicit mesh axes are the counterpart): a scope in which no op moves an
// input to another layout on its own. Ops choose their inputs' layouts by their sharding rules
// and, eagerly, reshard an input that is laid out otherwise; inside an ExplicitSharding scope such
// a move raises a dax::Error naming the op, the array, both shardings and the planner's steps, so
// that a program can prove it moves only what it wrote (dax::reshard, with_sharding_constraint,
// shard_map's in_specs, an op's out_sharding, the optimizer's state layout). What stays allowed,
// as in JAX: the op's own collective on its result (a matmul's partial sums reduced to the layout
// asked for), moves of no bytes (a replicated input sliced to its split), and the backward pass,
// whose moves follow from the forward's layouts. docs/sharding.md "Explicit sharding".
#pragma once

#include <dax/core/compiled_mode.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <dax/core/dtype.hpp>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/reshard/explain.hpp>
#include <dax/reshard/planner.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax {

class ExplicitSharding;
struct ImplicitReshard;
namespace detail {
inline void note_implicit_reshard(ExplicitSharding& scope, ImplicitReshard r);
}

/// One move an op would have made of an input on its own.
struct ImplicitReshard {
  std::string op;  // the op that needed it ("matmul", "add", "layer_norm", ...)
  Shape shape;
  DType dtype;
  NamedSharding from, to;
  int64_t bytes = 0;  // received per device (the most any device receives), as the planner counts
  std::string plan;   // the planner's steps, as dax::explain(x, target) prints them
};

/// While alive, ops on this thread move no input implicitly. `raise` (the default): such a move
/// throws a dax::Error before any byte moves, on every rank alike (the decision depends only on
/// shapes and shardings). `record`: the move happens and is listed in seen(), to find every
/// implicit move of a step in one run. Scopes nest; the innermost decides.
class ExplicitSharding {
 public:
  enum class Action { raise, record };
  explicit ExplicitSharding(Action action = Action::raise) : action_(action), previous_(innermost()) {
    innermost() = this;
  }
  ~ExplicitSharding() { innermost() = previous_; }
  ExplicitSharding(const ExplicitSharding&) = delete;
  ExplicitSharding& operator=(const ExplicitSharding&) = delete;

  Action action() const { return action_; }
  /// The implicit moves seen under `record`, in the order the ops ran.
  const std::vector<ImplicitReshard>& seen() const { return seen_; }

  /// The scope in force on this thread, or null.
  static ExplicitSharding*& innermost() {
    thread_local ExplicitSharding* scope = nullptr;
    return scope;
  }

 private:
  friend void detail::note_implicit_reshard(ExplicitSharding& scope, ImplicitReshard r);
  Action action_;
  ExplicitSharding* previous_;
  std::vector<ImplicitReshard> seen_;
};

/// Inside, ops may move inputs again (the tape's backward pass, whose moves the forward's layouts
/// already decide): the scope in force is set aside for the lifetime of this object.
struct ImplicitResharding {
  ImplicitResharding() : saved_(ExplicitSharding::innermost()) { ExplicitSharding::innermost() = nullptr; }
  ~ImplicitResharding() { ExplicitSharding::innermost() = saved_; }
  ImplicitResharding(const ImplicitResharding&) = delete;
  ImplicitResharding& operator=(const ImplicitResharding&) = delete;

 private:
  ExplicitSharding* saved_;
};

namespace detail {

inline void note_implicit_reshard(ExplicitSharding& scope, ImplicitReshard r) { scope.seen_.push_back(std::move(r)); }

/// Called by an op about to move an input from `from` to `to` (they differ) while a scope is in
/// force: raises or records it, or lets it pass when it moves no bytes.
DAX_OUTLINE void implicit_reshard(const char* op, const Shape& shape, DType dtype, int64_t item_bytes,
                                  const NamedSharding& from, const NamedSharding& to)
#if DAX_HEADER_DEFINITIONS
{
  ExplicitSharding* scope = ExplicitSharding::innermost();
  const ReshardPlan plan = plan_reshard(shape, from, to);
  if (plan.elements == 0) return;  // every device already holds what it needs: a local slice
  ImplicitReshard r{op, shape, dtype, from, to, plan.elements * item_bytes, explain_plan(plan, item_bytes)};
  if (scope->action() == ExplicitSharding::Action::record) {
    note_implicit_reshard(*scope, std::move(r));
    return;
  }
  throw Error(cat("explicit sharding: ", op, " would reshard its input ", to_string(dtype), to_string(shape), " from ",
                  to_string(from.spec()), " to ", to_string(to.spec()), " (", r.bytes,
                  " bytes/device); write the move (dax::reshard), or give the op inputs it takes as they are:\n",
                  r.plan));
}
#else
;
#endif

}  // namespace detail
}  // namespace dax
