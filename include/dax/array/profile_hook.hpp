// What ops and collectives report to dax::profile (debug/profile.hpp) while one is running: each
// op opens a ProfiledOp scope (its name, its inputs' shapes and shardings, its start), each
// collective reports its kind, mesh axes, bytes and start when it ends. With no profile running
// the check is one thread-local load, so eager ops pay nothing. Lives in array/ so that the ops in
// array/, ops/ and manual/ report through it without pointing up at debug/, as trace.hpp does for
// autodiff.
#pragma once

#include <dax/core/json_string.hpp>
#include <dax/core/compiled_mode.hpp>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <dax/backend/device_ops.hpp>
#include <dax/backend/memory_stats.hpp>
#include <dax/comm/bus_bandwidth.hpp>
#include <dax/comm/comm_stats.hpp>
#include <dax/comm/in_flight.hpp>
#include <dax/core/call_site.hpp>
#include <dax/core/dtype.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax {

template <class T>
class DistArray;

namespace detail {

/// One finished op or collective, as the trace will show it. `args` are (key, JSON value) pairs.
struct ProfileEvent {
  std::string name;
  std::string category;  // "op" or "collective"
  int64_t start_ns = 0;  // since the profile started
  int64_t duration_ns = 0;
  std::vector<std::pair<std::string, std::string>> args;
};

/// The events of the profile running on this thread, and the ops open now (innermost last).
struct ProfileLog {
  int64_t origin_ns = 0;
  std::vector<ProfileEvent> events;
  struct OpenOp {
    int64_t comm_bytes = 0;
    int64_t collectives = 0;
    const char* name = "";
  };
  std::vector<OpenOp> open;
};

inline ProfileLog*& active_profile() {
  thread_local ProfileLog* log = nullptr;
  return log;
}

inline int64_t profile_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Waits for the device's queued work, so a GPU op's time is its kernels' and not their launch.
inline void profile_wait_for_device() {
#if DAX_CUDA_BACKEND
  if (dev::on_gpu()) cuda::synchronize();
#endif
}

/// The op an elementwise function object's pretty signature names, as function_name<F>() spells
/// it. One function for every F: only the static below is per type.
DAX_OUTLINE std::string function_name_from(std::string text)
#if DAX_HEADER_DEFINITIONS
{
  const size_t at = text.find("F = ");
  text = at == std::string::npos ? "elementwise" : text.substr(at + 4);
  text = text.substr(0, text.find_first_of(";]"));
  for (const char* bind : {"BindRight<", "BindLeft<"}) {  // a scalar bound to a binary op: name the op
    const size_t b = text.find(bind);
    if (b != std::string::npos) text = text.substr(b + std::string(bind).size());
  }
  text = text.substr(0, text.find_first_of("<,"));
  const size_t colon = text.rfind("::");
  if (colon != std::string::npos) text = text.substr(colon + 2);
  std::string snake;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c >= 'A' && c <= 'Z') {
      if (i > 0) snake += '_';
      snake += static_cast<char>(c - 'A' + 'a');
    } else {
      snake += c;
    }
  }
  return snake.empty() ? std::string("elementwise") : snake;
}
#else
;
#endif

/// The op an elementwise function object stands for, from its type's name: fn::Add -> "add",
/// fn::BindRight<fn::Multiply, float> -> "multiply" (a scalar operand), fn::Tanh -> "tanh".
template <class F>
const char* function_name() {
  // "... [with F = dax::detail::fn::Tanh]" (GCC), "... [F = ...]" (Clang)
  static const std::string name = function_name_from(__PRETTY_FUNCTION__);
  return name.c_str();
}

/// When a collective starts: the clock while a profile runs, else 0 (and no clock read).
inline int64_t collective_start() {
  if (active_profile() == nullptr) return 0;
  profile_wait_for_device();
  return profile_clock_ns();
}

/// Counts a finished collective in comm_stats() and, while a profile runs, adds it to the trace
/// (with its group size and nccl-tests' algorithm and bus bandwidths) and to the comm bytes of
/// every op open around it (`started`: collective_start()'s value; `bytes`: received here).
DAX_OUTLINE void count_collective(const std::string& kind, const std::string& axes, int64_t bytes, int64_t started,
                                  int group_size)
#if DAX_HEADER_DEFINITIONS
{
  const std::string site = current_site();
  comm_stats().record(kind, axes, bytes, site);
  ProfileLog* log = active_profile();
  if (log == nullptr) return;
  profile_wait_for_device();
  const int64_t now = profile_clock_ns();
  for (auto& op : log->open) op.comm_bytes += bytes, ++op.collectives;
  ProfileEvent e{kind, "collective", started - log->origin_ns, now - started, {}};
  e.args = {{"kind", json_string(kind)},
            {"mesh_axes", json_string(axes)},
            {"bytes", std::to_string(bytes)},
            {"op", json_string(log->open.empty() ? "" : log->open.back().name)},
            {"site", json_string(site)},
            {"group_size", std::to_string(group_size)}};
  // GB/s (1e9 bytes a second), as nccl-tests prints them; 0 for a collective too short to time.
  const double seconds = double(now - started) * 1e-9, factor = bus_bandwidth_factor(kind, group_size);
  const double bus = seconds > 0 ? double(bytes) / seconds / 1e9 : 0.0;
  e.args.emplace_back("busbw_GBps", cat(bus));  // 6 significant digits, for a scalar's all-reduce too
  e.args.emplace_back("algbw_GBps", cat(factor > 0 ? bus / factor : 0.0));
  log->events.push_back(std::move(e));
}
#else
;
#endif

/// What the profile records of one input (or the result) of an op.
struct ProfiledArray {
  const Shape& shape;
  DType type;
  const NamedSharding& sharding;
};

/// Marks one op for the profile for the lifetime of the scope: its time, the bytes it leaves
/// allocated (its result, net of temporaries), the bytes its collectives received. The inline part
/// is the check whether a profile runs; the rest is compiled once, for every op (DAX_OUTLINE).
class ProfiledOp {
 public:
  template <class... In>
  explicit ProfiledOp(const char* name, const DistArray<In>&... inputs) {
    progress_in_flight();  // transfers started by reshard_async move on while ops run
    log_ = active_profile();
    if (log_ != nullptr) open(name, "inputs", {ProfiledArray{inputs.shape(), dtype_v<In>, inputs.sharding()}...});
  }
  /// An op that makes an array from nothing but its description (creation, random sampling).
  ProfiledOp(const char* name, const Shape& shape, DType type, const NamedSharding& sharding) {
    progress_in_flight();
    log_ = active_profile();
    if (log_ != nullptr) open(name, "result", {ProfiledArray{shape, type, sharding}});
  }
  ~ProfiledOp() {
    if (log_ != nullptr) close();
  }
  ProfiledOp(const ProfiledOp&) = delete;
  ProfiledOp& operator=(const ProfiledOp&) = delete;

 private:
  DAX_OUTLINE void open(const char* name, const char* role, std::initializer_list<ProfiledArray> arrays);
  DAX_OUTLINE void close();

  ProfileLog* log_ = nullptr;
  const char* name_ = "";
  int64_t start_ = 0, bytes_before_ = 0;
  std::vector<std::pair<std::string, std::string>> args_;
};

#if DAX_HEADER_DEFINITIONS
DAX_OUTLINE void ProfiledOp::open(const char* name, const char* role, std::initializer_list<ProfiledArray> arrays) {
  name_ = name;
  std::string shapes, shardings, axes;
  for (const ProfiledArray& a : arrays) {
    if (!shapes.empty()) shapes += "; ", shardings += "; ";
    shapes += to_string(a.type) + to_string(a.shape);
    shardings += to_string(a.sharding.spec());
    for (int i = 0; i < a.sharding.mesh().num_axes(); ++i) {
      if (!a.sharding.splits(i) && !a.sharding.is_unreduced_over(i)) continue;
      const std::string quoted = "'" + a.sharding.mesh().axis_names()[i] + "'";
      if (axes.find(quoted) == std::string::npos) axes += (axes.empty() ? "" : ", ") + quoted;
    }
  }
  args_ = {{role, json_string(shapes)}, {"shardings", json_string(shardings)}, {"mesh_axes", json_string(axes)}};
  log_->open.push_back({0, 0, name});
  profile_wait_for_device();
  bytes_before_ = detail::bytes_in_use();
  start_ = profile_clock_ns();
}

DAX_OUTLINE void ProfiledOp::close() {
  profile_wait_for_device();
  const int64_t now = profile_clock_ns();
  const ProfileLog::OpenOp done = log_->open.back();
  log_->open.pop_back();
  ProfileEvent e{name_, "op", start_ - log_->origin_ns, now - start_, std::move(args_)};
  e.args.emplace_back("bytes", std::to_string(detail::bytes_in_use() - bytes_before_));
  e.args.emplace_back("comm_bytes", std::to_string(done.comm_bytes));
  e.args.emplace_back("collectives", std::to_string(done.collectives));
  log_->events.push_back(std::move(e));
}
#endif

}  // namespace detail
}  // namespace dax
