// What guards every collective: the settings (DAX_CHECK_COLLECTIVES, DAX_TIMEOUT_S), the label of
// the op whose collectives run now (for divergence reports), and the watchdog thread that turns a
// collective that never finishes into a report and an abort of the job instead of a hang.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include <dax/core/error.hpp>

namespace dax::detail {

struct CollectiveChecks {
  bool fingerprints = false;  // DAX_CHECK_COLLECTIVES=1: ranks compare each call before running it
  double timeout_s = 300;     // DAX_TIMEOUT_S: a collective running longer aborts the job; 0 = never
};

inline CollectiveChecks read_collective_checks() {
  CollectiveChecks c;
  if (const char* v = std::getenv("DAX_CHECK_COLLECTIVES")) c.fingerprints = *v != 0 && std::strcmp(v, "0") != 0;
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
/// nanoseconds); the thread wakes a few times per timeout and, once the armed call is overdue,
/// calls `expire` with its description (which reports and aborts the job).
class Watchdog {
 public:
  using Describe = std::string (*)(const void*);
  using Expire = void (*)(const std::string&);

  Watchdog(double timeout_s, Expire expire)
      : timeout_(timeout_s),
        period_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s))),
        expire_(expire) {
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

  void arm(const void* call, Describe describe) {
    std::lock_guard<std::mutex> lock(mutex_);
    call_ = call;
    describe_ = describe;
    deadline_ = Clock::now() + period_;
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    call_ = nullptr;
  }

 private:
  using Clock = std::chrono::steady_clock;

  void watch() {
    const auto step = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
        timeout_ / 4 < 1.0 ? timeout_ / 4 : 1.0));
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, step);
      if (stop_ || call_ == nullptr || Clock::now() < deadline_) continue;
      const std::string report = describe_(call_);  // the call is still blocked: its data is alive
      lock.unlock();
      expire_(report);
      return;
    }
  }

  double timeout_;
  Clock::duration period_;  // timeout_ as a clock duration, converted once
  Expire expire_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  const void* call_ = nullptr;
  Describe describe_ = nullptr;
  Clock::time_point deadline_{};
  std::thread thread_;
};

/// Arms the watchdog (if any) for one call while alive.
class Watched {
 public:
  Watched(Watchdog* dog, const void* call, Watchdog::Describe describe) : dog_(dog) {
    if (dog_) dog_->arm(call, describe);
  }
  ~Watched() {
    if (dog_) dog_->disarm();
  }
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

 private:
  Watchdog* dog_;
};

}  // namespace dax::detail
