// Communication counters (like DTensor's CommDebugMode): calls and bytes this rank received, per
// collective kind and per mesh-axis group, since the last reset; and the same per call site
// (core/call_site.hpp: the dax::NamedScope or explicit move that asked for it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>

namespace dax {

class CommStats {
 public:
  struct Count {
    int64_t calls = 0;
    int64_t bytes = 0;
  };

  void record(const std::string& kind, const std::string& axes, int64_t bytes, const std::string& site = {}) {
    auto& c = counts_[{kind, axes}];
    ++c.calls;
    c.bytes += bytes;
    auto& s = sites_[{kind, axes, site}];
    ++s.calls;
    s.bytes += bytes;
  }
  void reset() {
    counts_.clear();
    sites_.clear();
  }

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
  /// The same per (kind, axes, call site); the site is "" for collectives outside every scope.
  const std::map<std::tuple<std::string, std::string, std::string>, Count>& by_site() const { return sites_; }

 private:
  std::map<std::pair<std::string, std::string>, Count> counts_;
  std::map<std::tuple<std::string, std::string, std::string>, Count> sites_;
};

/// This process's counters.
inline CommStats& comm_stats() {
  static CommStats stats;
  return stats;
}

}  // namespace dax
