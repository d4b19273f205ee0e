// DAX_STATS_FILE=path: when a process's runtime ends, it writes what its device received and held
// (every collective kind per mesh-axis group, its calls and bytes; peak and final memory, by part)
// as JSON to `path`, "%r" replaced by its rank. Two runs of one program then compare: a real job
// against each of its ranks simulated alone with DAX_SIMULATE=N:rank (the meta backend), as
// tests/simulation/compare_runs.py does for every example.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include <dax/backend/memory_stats.hpp>
#include <dax/comm/comm_stats.hpp>
#include <dax/core/json_string.hpp>

namespace dax::detail {

/// Writes the file DAX_STATS_FILE names, if set (nothing otherwise). Never throws: it runs while
/// the runtime shuts down; a file it cannot write is reported on stderr.
inline void write_stats_file(int rank, int size, const char* backend) noexcept {
  const char* pattern = std::getenv("DAX_STATS_FILE");
  if (!pattern || !*pattern) return;
  try {
    std::string path = pattern;
    if (const size_t at = path.find("%r"); at != std::string::npos) path.replace(at, 2, std::to_string(rank));
    const MemoryStats m = memory_stats();
    std::string text = "{\"rank\": " + std::to_string(rank) + ", \"size\": " + std::to_string(size) +
                       ", \"backend\": \"" + backend + "\", \"peak_bytes\": " + std::to_string(m.peak_bytes_in_use) +
                       ", \"final_bytes\": " + std::to_string(m.bytes_in_use) + ", \"parts\": [";
    for (size_t i = 0; i < m.parts.size(); ++i)
      text += (i ? ", " : "") + std::string("{\"name\": ") + json_string(m.parts[i].name) +
              ", \"at_peak\": " + std::to_string(m.parts[i].at_peak) + "}";
    text += "], \"collectives\": [";
    bool first = true;
    for (const auto& [key, count] : comm_stats().entries()) {
      text += (first ? "" : ", ") + std::string("{\"kind\": ") + json_string(key.first) +
              ", \"axes\": " + json_string(key.second) + ", \"calls\": " + std::to_string(count.calls) +
              ", \"bytes\": " + std::to_string(count.bytes) + "}";
      first = false;
    }
    text += "]}\n";
    std::FILE* f = std::fopen(path.c_str(), "w");
    const bool written = f && std::fputs(text.c_str(), f) >= 0;
    if (!(f && std::fclose(f) == 0 && written))
      std::fprintf(stderr, "dax: could not write DAX_STATS_FILE %s\n", path.c_str());
  } catch (...) {
    std::fprintf(stderr, "dax: could not write DAX_STATS_FILE\n");
  }
}

}  // namespace dax::detail
