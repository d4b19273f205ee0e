// Communication counters (like DTensor's CommDebugMode): calls and bytes this rank received, per
// collective kind and per mesh-axis group, since the last reset.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace dax {

class CommStats {
 public:
  struct Count {
    int64_t calls = 0;
    int64_t bytes = 0;
  };

  void record(const std::string& kind, const std::string& axes, int64_t bytes) {
    auto& c = counts_[{kind, axes}];
    ++c.calls;
    c.bytes += bytes;
  }
  void reset() { counts_.clear(); }

  int64_t total_bytes() const {
    int64_t n = 0;
    for (const auto& [key, c] : counts_) n += c.bytes;
    return n;
  }
  int64_t total_calls() const {
    int64_t n = 0;
    for (const auto& [key, c] : counts_) n += c.calls;
    return n;
  }
  /// Totals of one collective kind ("all_gather", "all_reduce", ...), over every axis group.
  Count of(const std::string& kind) const {
    Count sum;
    for (const auto& [key, c] : counts_)
      if (key.first == kind) sum.calls += c.calls, sum.bytes += c.bytes;
    return sum;
  }
  /// Totals of one kind over one axis group, written as in explain: "('data',)", "('x', 'y')".
  Count of(const std::string& kind, const std::string& axes) const {
    auto it = counts_.find({kind, axes});
    return it == counts_.end() ? Count{} : it->second;
  }
  const std::map<std::pair<std::string, std::string>, Count>& entries() const { return counts_; }

 private:
  std::map<std::pair<std::string, std::string>, Count> counts_;
};

/// This process's counters.
inline CommStats& comm_stats() {
  static CommStats stats;
  return stats;
}

}  // namespace dax
