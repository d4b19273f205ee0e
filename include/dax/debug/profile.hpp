// dax::profile: the counterpart of jax.profiler.trace. A scope that records every op and every
// collective this rank runs (name, start, duration, bytes, mesh axes; each op with the bytes its
// collectives received) and, when it ends, writes one Chrome / Perfetto trace (JSON, the "trace
// event format") holding every rank's events, one process per rank. Open it in ui.perfetto.dev or
// chrome://tracing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include <dax/array/profile_hook.hpp>
#include <dax/core/error.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax {

class Profile {
 public:
  /// Starts recording on this rank; collective over the world (a barrier lines the ranks' clocks
  /// up at time 0). `path`: where rank 0 writes the trace when the profile stops.
  explicit Profile(std::string path) : path_(std::move(path)) {
    DAX_CHECK(detail::active_profile() == nullptr, "dax::profile: a profile is already running on this thread");
    Runtime& rt = Runtime::current();
    rank_ = rt.rank();
    rt.world().host().barrier();
    log_.origin_ns = detail::profile_clock_ns();
    detail::active_profile() = &log_;
  }
  /// Stops and writes the trace, unless stop() did. While an exception unwinds it only stops (a
  /// rank that threw must not wait in a collective for ranks that did not).
  ~Profile() {
    if (!running_) return;
    if (std::uncaught_exceptions() > unwinding_) {
      halt();
      return;
    }
    try {
      stop();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dax::profile: writing %s failed: %s\n", path_.c_str(), e.what());
    }
  }
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  /// Stops recording, gathers every rank's events on rank 0 and writes the trace there.
  /// Collective over the world.
  void stop() {
    if (!running_) return;
    halt();
    const std::string mine = events_json();
    detail::Communicator& world = Runtime::current().world().host();
    const std::vector<int64_t> lengths = world.all_gather_host({static_cast<int64_t>(mine.size())});
    int64_t longest = 0;
    for (int64_t n : lengths) longest = std::max(longest, n);
    std::vector<int64_t> words(static_cast<size_t>((longest + 7) / 8), 0);  // text packed 8 bytes a word
    std::memcpy(words.data(), mine.data(), mine.size());
    const std::vector<int64_t> all = words.empty() ? std::vector<int64_t>{} : world.all_gather_host(words);
    if (rank_ != 0) return;
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    DAX_CHECK(out.good(), "dax::profile: cannot open '", path_, "' for writing");
    out << "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n";
    bool first = true;
    for (size_t r = 0; r < lengths.size(); ++r) {
      if (lengths[r] == 0) continue;
      const char* text = reinterpret_cast<const char*>(all.data() + r * words.size());
      out << (first ? "" : ",\n");
      out.write(text, lengths[r]);
      first = false;
    }
    out << "\n]}\n";
    DAX_CHECK(out.good(), "dax::profile: writing '", path_, "' failed");
  }

  /// This rank's events so far (in the order they ended).
  const std::vector<detail::ProfileEvent>& events() const { return log_.events; }
  const std::string& path() const { return path_; }

 private:
  void halt() {
    running_ = false;
    if (detail::active_profile() == &log_) detail::active_profile() = nullptr;
  }

  /// This rank's part of the trace: a process name, then one complete ("X") event per op and
  /// collective, times in microseconds.
  std::string events_json() const {
    const std::string pid = std::to_string(rank_);
    std::string s = "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + pid +
                    ", \"tid\": 0, \"args\": {\"name\": \"rank " + pid + "\"}}";
    for (const auto& e : log_.events) {
      s += ",\n{\"name\": " + detail::json_string(e.name) + ", \"cat\": " + detail::json_string(e.category) +
           ", \"ph\": \"X\", \"pid\": " + pid + ", \"tid\": 0, \"ts\": " + micros(e.start_ns) +
           ", \"dur\": " + micros(e.duration_ns) + ", \"args\": {\"rank\": " + pid;
      for (const auto& [key, value] : e.args) s += ", " + detail::json_string(key) + ": " + value;
      s += "}}";
    }
    return s;
  }

  static std::string micros(int64_t ns) {
    const int64_t whole = ns / 1000, frac = ns % 1000;
    std::string f = std::to_string(frac < 0 ? -frac : frac);
    return std::to_string(whole) + "." + std::string(3 - f.size(), '0') + f;
  }

  std::string path_;
  int rank_ = 0;
  bool running_ = true;
  int unwinding_ = std::uncaught_exceptions();
  detail::ProfileLog log_;
};

/// `auto scope = dax::profile("/tmp/trace.json");` records until the scope ends (or
/// scope.stop()), then rank 0 writes the trace of every rank to the path.
inline Profile profile(std::string path) { return Profile(std::move(path)); }

}  // namespace dax
