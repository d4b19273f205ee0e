// dax::reshard_async: the same reshard as dax::reshard, started and returned at once as a handle
// the program waits on, so the transfer can overlap work that does not need its result (the next
// layer's parameters gathered while this layer computes: FSDP prefetch). On the CPU its steps run
// on MPI's nonblocking collectives; call ready() between pieces of work to let MPI progress them
// (shared-memory MPI moves data only inside MPI calls). Transports without nonblocking calls run
// each step at once, so the handle is then already finished.
//
// Collectives start only where every rank is at the same point of the program: the plan's first
// communicating step in reshard_async, any later one in wait(). ready() finishes what has arrived
// and never starts a collective, because whether a transfer has arrived differs between ranks.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <dax/array/reshard.hpp>

namespace dax {

/// A reshard under way. wait() returns the array (later calls return it again); ready()
/// progresses the transfer and says whether its first collective has finished. Every rank must
/// start the same reshards in the same order, and wait for them in the same order, as with any
/// collective. Under autodiff the reshard is recorded when wait() returns, with the same backward as
/// dax::reshard's.
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

  /// Lets the transfer progress; true once nothing is left in flight (a plan of several
  /// collectives starts its later ones in wait()).
  bool ready() {
    if (!state_) return true;
    advance(Mode::progress);
    return !state_->in_flight;
  }

  /// The resharded array, after finishing the transfer.
  DistArray<T> wait() {
    DAX_CHECK(state_ || result_, "reshard_async: this handle was moved from; wait on the one it moved to");
    if (!state_) return *result_;
    State& s = *state_;
    {
      const detail::OpLabel label([&] { return s.label; });
      advance(Mode::finish);
    }
    DAX_CHECK(!s.failed, "reshard_async: this reshard failed (its error was thrown by an earlier ready() or wait()); "
              "it has no result");
    result_ = s.transposed ? DistArray<T>::swapped_view(s.x.shape(), s.target, s.piece)
                           : DistArray<T>(s.x.shape(), s.target, s.piece);
    detail::record("reshard", *result_, [&](auto) {
      return [from = s.x.sharding()](const DistArray<T>& g) {
        return detail::Cotangents{detail::AnyArray(detail::reshard_untraced(g, from))};
      };
    }, s.x);
    detail::note_moved_from(*result_, s.x.sharding());
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
    std::string label;                                // the op, in divergence reports
    uint64_t generation = 0;                          // of the runtime whose plan cache holds `program`
    const detail::ReshardProgram* program = nullptr;  // in the plan cache, cleared only at shutdown
    std::shared_ptr<detail::Buffer> piece;            // the last finished step's piece
    size_t next = 0;                                  // the step to start next
    detail::StepInFlight inflight;
    bool started_collective = false, in_flight = false, done = false, failed = false, transposed = false;
  };

  /// start: run local steps and start the first collective; progress: finish what has arrived and
  /// the local steps after it; finish: everything.
  enum class Mode { start, progress, finish };

  PendingArray() = default;

  void end_step_in_flight(State& s) {
    s.inflight.pending.reset();  // the request goes (waited for) before the buffers it uses
    s.inflight = {};
    s.in_flight = false;
  }

  void advance(Mode mode) {
    State& s = *state_;
    if (s.done) return;
    DAX_CHECK(detail::current_runtime() && detail::current_runtime()->generation() == s.generation,
              "reshard_async: the dax::Runtime that started this reshard has shut down");
    try {
      while (!s.done) {
        if (s.in_flight) {
          if (mode != Mode::finish && s.inflight.pending && !s.inflight.pending->test()) return;
          s.piece = detail::finish_step<T>(s.program->steps[s.next - 1], s.inflight);
          end_step_in_flight(s);
        }
        if (s.next == s.program->steps.size()) {
          s.done = true;
          return;
        }
        const detail::StepProgram& step = s.program->steps[s.next];
        if (step.communicates() && (mode == Mode::progress || (mode == Mode::start && s.started_collective))) return;
        s.inflight = detail::start_step<T>(step, s.piece, true);
        ++s.next;
        s.in_flight = true;
        s.started_collective = s.started_collective || step.communicates();
      }
    } catch (...) {
      // A failed step (a divergence, an MPI error) ends the reshard here, as it ends a blocking
      // one on the ranks that called that: no later step may start on this rank alone.
      s.done = s.failed = true;
      end_step_in_flight(s);
      throw;
    }
  }

  void finish_quietly() noexcept {
    if (!state_) return;
    try {
      if (!state_->done) {
        const detail::OpLabel label([&] { return state_->label; });
        advance(Mode::finish);
      }
    } catch (...) {  // no throwing from here; the group's next collective reports the failure
    }
    state_.reset();
  }

  std::unique_ptr<State> state_;
  std::optional<DistArray<T>> result_;
};

/// Starts reshard(x, target) and returns at once (same plan, same bytes, same checks); wait() on
/// the handle gives the array. Its first collective is under way when this returns.
template <class T>
PendingArray<T> reshard_async(const DistArray<T>& x, const NamedSharding& target) {
  detail::check_reshard(x.shape(), x.sharding(), target);
  Runtime& rt = Runtime::current();
  PendingArray<T> p;
  p.state_ = std::make_unique<typename PendingArray<T>::State>(x, target);
  auto& s = *p.state_;
  s.generation = rt.generation();
  if (!x.is_addressable()) {  // nothing to move here; wait() still records it, as reshard does
    s.done = true;
    return p;
  }
  s.label = detail::cat("reshard_async ", to_string(x.shape()), " ", to_string(dtype_v<T>), " ",
                        to_string(x.sharding().spec()), " -> ", to_string(target.spec()));
  s.transposed = x.stores_swapped();  // move the stored (transposed) piece; the result stays a lazy transpose
  const DistArray<T> stored = s.transposed ? detail::stored_array(x) : x;
  const NamedSharding stored_target = s.transposed ? detail::swap_last_two(target, x.ndim()) : target;
  s.program = &detail::reshard_programs()
                   .get(stored.shape(), stored.sharding(), stored_target, sizeof(T),
                        [&](const ReshardPlan& plan) { return detail::build_program(plan, rt.rank(), sizeof(T), rt); })
                   .extra;
  s.piece = stored.buffer();
  const detail::OpLabel label([&] { return s.label; });
  p.advance(PendingArray<T>::Mode::start);
  return p;
}

}  // namespace dax
