// dax::reshard_async: the same reshard as dax::reshard, started and returned at once as a handle
// the program waits on, so the transfer can overlap work that does not need its result (the next
// layer's parameters gathered while this layer computes: FSDP prefetch). On the CPU its steps run
// on MPI's nonblocking collectives; call ready() between pieces of work to let MPI progress them
// (shared-memory MPI moves data only inside MPI calls). Transports without nonblocking calls run
// each step at once, so the handle is then already finished.
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include <dax/array/reshard.hpp>

namespace dax {

/// A reshard under way. wait() returns the array (once; later calls return it again); ready()
/// progresses the transfer and says whether wait() would return at once. Every rank must start the
/// same reshards in the same order, as with any collective. Under autodiff the reshard is recorded
/// when wait() returns, with the same backward as dax::reshard's.
template <class T>
class PendingArray {
 public:
  PendingArray(const PendingArray&) = delete;
  PendingArray& operator=(const PendingArray&) = delete;
  PendingArray(PendingArray&&) noexcept = default;
  PendingArray& operator=(PendingArray&& other) noexcept {
    if (this == &other) return *this;
    finish_quietly();  // the reshard this handle held still runs to its end
    state_ = std::move(other.state_);
    result_ = std::move(other.result_);
    return *this;
  }
  /// A handle dropped before wait() still runs every step (the other ranks run them too), and
  /// leaves the array unused.
  ~PendingArray() { finish_quietly(); }

  /// Lets the transfer progress; true once every step has finished.
  bool ready() {
    if (!state_) return true;
    advance(false);
    return state_->done;
  }

  /// The resharded array, after finishing the transfer.
  DistArray<T> wait() {
    if (!state_) return *result_;
    advance(true);
    DAX_CHECK(!state_->failed, "reshard_async: this reshard failed (its error was thrown by an earlier ready() or "
              "wait()); it has no result");
    result_ = state_->transposed ? DistArray<T>::swapped_view(state_->x.shape(), state_->target, state_->piece)
                                 : DistArray<T>(state_->x.shape(), state_->target, state_->piece);
    detail::record("reshard", *result_, [&](auto) {
      return [from = state_->x.sharding()](const DistArray<T>& g) {
        return detail::Cotangents{detail::AnyArray(detail::reshard_untraced(g, from))};
      };
    }, state_->x);
    state_.reset();
    return *result_;
  }

 private:
  template <class U>
  friend PendingArray<U> reshard_async(const DistArray<U>& x, const NamedSharding& target);

  struct State {
    State(DistArray<T> x_, NamedSharding target_) : x(std::move(x_)), target(std::move(target_)) {}
    DistArray<T> x;  // the source (kept: its piece is being sent)
    NamedSharding target;
    const detail::ReshardProgram* program = nullptr;  // in the plan cache, which never evicts
    std::shared_ptr<detail::Buffer> piece;            // the last finished step's piece
    size_t next = 0;                                  // the step to start after the one in flight
    detail::StepInFlight inflight;
    bool in_flight = false, done = false, failed = false, transposed = false;
  };

  PendingArray() = default;

  void finish_quietly() noexcept {
    if (!state_) return;
    try {
      advance(true);
    } catch (...) {  // no throwing from here; the group's next collective reports the failure
    }
    state_.reset();
  }

  /// Finishes the step in flight when it has ended (or, `block`, waits for it), and starts the
  /// following ones, until one is still running or all have run.
  void advance(bool block) {
    State& s = *state_;
    try {
      while (!s.done) {
        if (s.in_flight) {
          const detail::StepProgram& step = s.program->steps[s.next - 1];
          if (!block && s.inflight.pending && !s.inflight.pending->test()) return;
          s.piece = detail::finish_step<T>(step, s.inflight);
          s.inflight = {};
          s.in_flight = false;
        }
        if (s.next == s.program->steps.size()) {
          s.done = true;
          return;
        }
        s.inflight = detail::start_step<T>(s.program->steps[s.next], s.piece, true);
        ++s.next;
        s.in_flight = true;
      }
    } catch (...) {
      // A failed step (a divergence, an MPI error) ends the reshard here, as it ends a blocking
      // one on the ranks that called that: no later step may start on this rank alone.
      s.done = s.failed = true;
      s.inflight = {};
      s.in_flight = false;
      throw;
    }
  }

  std::unique_ptr<State> state_;
  std::optional<DistArray<T>> result_;
};

/// Starts reshard(x, target) and returns at once (same plan, same bytes, same checks); wait() on
/// the handle gives the array. Its first step's collective is under way when this returns.
template <class T>
PendingArray<T> reshard_async(const DistArray<T>& x, const NamedSharding& target) {
  detail::check_reshard(x.shape(), x.sharding(), target);
  PendingArray<T> p;
  if (!x.is_addressable()) {
    p.result_ = DistArray<T>(x.shape(), target, nullptr);
    return p;
  }
  p.state_ = std::make_unique<typename PendingArray<T>::State>(x, target);
  auto& s = *p.state_;
  s.transposed = x.stores_swapped();  // move the stored (transposed) piece; the result stays a lazy transpose
  const DistArray<T> stored = s.transposed ? detail::stored_array(x) : x;
  const NamedSharding stored_target = s.transposed ? detail::swap_last_two(target, x.ndim()) : target;
  Runtime& rt = Runtime::current();
  const detail::OpLabel label([&] {
    return detail::cat("reshard_async ", to_string(x.shape()), " ", to_string(dtype_v<T>), " ",
                       to_string(x.sharding().spec()), " -> ", to_string(target.spec()));
  });
  s.program = &detail::reshard_programs()
                   .get(stored.shape(), stored.sharding(), stored_target, sizeof(T),
                        [&](const ReshardPlan& plan) { return detail::build_program(plan, rt.rank(), sizeof(T), rt); })
                   .extra;
  s.piece = stored.buffer();
  p.advance(false);
  return p;
}

}  // namespace dax
