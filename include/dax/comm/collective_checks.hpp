// What guards every collective: the settings (DAX_CHECK_COLLECTIVES, DAX_TIMEOUT_S), the label of
// the op whose collectives run now (for divergence reports), the watchdog thread that turns a
// collective (or a wait for the GPU) that never finishes into a report and an abort of the job
// instead of a hang, and the hooks that abort run first (ncclCommAbort).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <dax/core/env.hpp>
#include <dax/core/error.hpp>

namespace dax::detail {

struct CollectiveChecks {
  bool fingerprints = false;  // DAX_CHECK_COLLECTIVES=1: ranks compare each call before running it
  // The default (DAX_CHECK_COLLECTIVES unset): each member sends the others a small record of the
  // call while the call itself runs, and checks the records once it is done, or, while it waits,
  // from the watchdog thread. Off with DAX_CHECK_COLLECTIVES=0; replaced by the full check with =1.
  bool light = true;
  // DAX_CHECK_BOARD=0: members on one node send each other their records as messages, as members
  // on different nodes do, instead of posting them on the node's shared board (call_board.hpp).
  // For testing the message path on one machine.
  bool board = true;
  double timeout_s = 300;     // DAX_TIMEOUT_S: a collective running longer aborts the job; 0 = never
};

inline CollectiveChecks read_collective_checks() {
  CollectiveChecks c;
  if (const char* v = std::getenv("DAX_CHECK_COLLECTIVES"); v && *v) {  // set and not empty
    c.fingerprints = *v != 0 && std::strcmp(v, "0") != 0;
    c.light = false;
  }
  if (env_turned_off("DAX_CHECK_BOARD")) c.board = false;
  if (const char* v = std::getenv("DAX_TIMEOUT_S")) {
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    DAX_CHECK(end != v && *end == 0 && t >= 0, "DAX_TIMEOUT_S: expected seconds (0 for no timeout), got '", v, "'");
    c.timeout_s = t;
  }
  return c;
}

/// The settings, read from the environment once per process.
inline const CollectiveChecks& collective_checks() {
  static const CollectiveChecks c = read_collective_checks();
  return c;
}

inline const std::string*& current_op_label() {
  thread_local const std::string* label = nullptr;
  return label;
}

/// Names the op whose collectives follow ("psum (3, 2) float32 over ('x',)"), so a divergence
/// report says what each rank was doing. Built only when fingerprints are checked.
class OpLabel {
 public:
  template <class Describe>
  explicit OpLabel(Describe&& describe) {
    if (!collective_checks().fingerprints) return;
    text_ = describe();
    previous_ = current_op_label();
    current_op_label() = &text_;
    active_ = true;
  }
  ~OpLabel() {
    if (active_) current_op_label() = previous_;
  }
  OpLabel(const OpLabel&) = delete;
  OpLabel& operator=(const OpLabel&) = delete;

 private:
  std::string text_;
  const std::string* previous_ = nullptr;
  bool active_ = false;
};

/// One thread that watches the collective in flight. Arming and disarming take a mutex (tens of
/// nanoseconds); the thread wakes every quarter of the timeout (at most 0.2 s apart) and, once the
/// armed call is overdue, calls `expire` with its description (which reports and aborts the job).
/// A call may also come with a `poll`, asked at every wake whether the call can no longer finish
/// (a peer sent a record of another call, or left the program): a report from it goes to
/// `failed` (or `expire` when none is given). A timeout of 0 means no deadline (polls still run).
class Watchdog {
 public:
  using Describe = std::string (*)(const void*);
  using Poll = std::string (*)(const void*, double armed_s);
  using Expire = void (*)(const std::string&);

  Watchdog(double timeout_s, Expire expire, Expire failed = nullptr)
      : timeout_(timeout_s),
        period_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s))),
        expire_(expire),
        failed_(failed ? failed : expire) {
    thread_ = std::thread([this] { watch(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  double timeout_s() const { return timeout_; }

  using Clock = std::chrono::steady_clock;

  /// What the watchdog watches: a call (null for none), how to describe it, and its deadline.
  struct Armed {
    const void* call = nullptr;
    Describe describe = nullptr;
    Clock::time_point since{};
    Poll poll = nullptr;
  };

  /// Watches `call` from now on; returns what was watched before, for restore().
  Armed arm(const void* call, Describe describe, Poll poll = nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Armed before = armed_;
    armed_ = Armed{call, describe, Clock::now(), poll};
    return before;
  }
  /// Watches what arm() returned again (a call around a nested wait keeps its own deadline).
  void restore(const Armed& before) {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = before;
  }

 private:

  void watch() {
    const double step_s = timeout_ > 0 && timeout_ / 4 < 0.2 ? timeout_ / 4 : 0.2;
    const auto step = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(step_s));
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, step);
      if (stop_ || armed_.call == nullptr) continue;
      const auto now = Clock::now();
      if (armed_.poll) {  // still blocked: the call's data is alive
        std::string report = armed_.poll(armed_.call, std::chrono::duration<double>(now - armed_.since).count());
        if (!report.empty()) {
          lock.unlock();
          failed_(report);
          return;
        }
      }
      if (timeout_ <= 0 || now < armed_.since + period_) continue;
      const std::string report = armed_.describe(armed_.call);
      lock.unlock();
      expire_(report);
      return;
    }
  }

  double timeout_;
  Clock::duration period_;  // timeout_ as a clock duration, converted once
  Expire expire_, failed_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  Armed armed_;
  std::thread thread_;
};

/// Arms the watchdog (if any) for one call while alive, then gives the watch back to whatever it
/// watched before (the collective around a nested wait for the device).
class Watched {
 public:
  Watched(Watchdog* dog, const void* call, Watchdog::Describe describe, Watchdog::Poll poll = nullptr) : dog_(dog) {
    if (dog_) before_ = dog_->arm(call, describe, poll);
  }
  ~Watched() {
    if (dog_) dog_->restore(before_);
  }
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

 private:
  Watchdog* dog_;
  Watchdog::Armed before_;
};

/// The watchdog of the running job (null when no runtime is up, or with DAX_TIMEOUT_S=0 and
/// DAX_CHECK_COLLECTIVES=0). Set by the
/// runtime; read by waits that are not collectives but can hang on one, like a wait for the GPU.
inline Watchdog*& job_watchdog() {
  static Watchdog* dog = nullptr;
  return dog;
}

/// The collective most recently queued on the device (NCCL returns once a call is queued, so a
/// hang shows in a later wait for the device, which names it from here). Pointers to strings
/// that live as long as the communicators.
struct QueuedCollective {
  std::atomic<const char*> call{nullptr};
  std::atomic<const std::string*> group{nullptr};
  std::atomic<int> world_rank{-1};
};
inline QueuedCollective& last_queued_collective() {
  static QueuedCollective last;
  return last;
}

/// Work to do before a timed-out job exits, such as ncclCommAbort, which stops NCCL kernels that
/// wait for a peer that will never come. Each hook is keyed by its owner, which removes it.
class AbortHooks {
 public:
  void add(const void* key, std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mutex_);
    hooks_.emplace_back(key, std::move(hook));
  }
  void remove(const void* key) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(hooks_, [key](const auto& h) { return h.first == key; });
  }
  /// Runs the hooks in order on a thread of their own and waits at most `limit` for them: a hook
  /// stuck on a broken device must not keep the job from ending. False if they did not finish.
  bool run(std::chrono::milliseconds limit) {
    struct State {
      std::mutex mutex;
      std::condition_variable done_cv;
      bool done = false;
    };
    auto state = std::make_shared<State>();
    std::vector<std::pair<const void*, std::function<void()>>> hooks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      hooks = hooks_;
    }
    if (hooks.empty()) return true;
    std::thread([state, hooks = std::move(hooks)] {
      for (const auto& h : hooks) h.second();
      std::lock_guard<std::mutex> lock(state->mutex);
      state->done = true;
      state->done_cv.notify_all();
    }).detach();
    std::unique_lock<std::mutex> lock(state->mutex);
    return state->done_cv.wait_for(lock, limit, [&] { return state->done; });
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<const void*, std::function<void()>>> hooks_;
};

inline AbortHooks& abort_hooks() {
  static AbortHooks hooks;
  return hooks;
}

/// The notice a rank sends every other when it leaves the program (returns from main with its
/// runtime destroyed, or calls exit): the runtime posts a receive for one at startup, MPI fills it
/// in while this rank waits in any MPI call, and the watchdog reads it from here without calling
/// MPI. `check` makes a half-written notice read as none.
struct DepartureNotice {
  int64_t world_rank = -1;
  int64_t length = 0;
  char text[232] = {};
  uint64_t check = 0;
};

inline uint64_t departure_check(int64_t world_rank, int64_t length, const char* text) {
  uint64_t h = 0x6465706172747572ull ^ static_cast<uint64_t>(world_rank) * 0x9e3779b97f4a7c15ull;
  h ^= static_cast<uint64_t>(length) + 0x632be59bd9b4e019ull + (h << 6) + (h >> 2);
  for (int64_t i = 0; i < length && i < static_cast<int64_t>(sizeof(DepartureNotice::text)); ++i)
    h = (h ^ static_cast<unsigned char>(text[i])) * 0x100000001b3ull;
  return h | 1;
}

/// Where the runtime's receive for a departure notice lands.
inline DepartureNotice& departure_buffer() {
  alignas(64) static DepartureNotice notice;
  return notice;
}

/// Reads the notice MPI may be writing at this moment: word by word, then checked.
inline bool read_departure(DepartureNotice& out) {
  const DepartureNotice& in = departure_buffer();
  static_assert(sizeof(DepartureNotice) % 8 == 0);
  const auto* from = reinterpret_cast<const uint64_t*>(&in);
  auto* to = reinterpret_cast<uint64_t*>(&out);
  for (size_t i = 0; i < sizeof(DepartureNotice) / 8; ++i) to[i] = __atomic_load_n(from + i, __ATOMIC_ACQUIRE);
  if (out.check == 0 || out.length < 0 || out.length > static_cast<int64_t>(sizeof(out.text))) return false;
  return out.check == departure_check(out.world_rank, out.length, out.text);
}

inline std::string departure_text(const DepartureNotice& d) { return std::string(d.text, static_cast<size_t>(d.length)); }

}  // namespace dax::detail
