// dax::memory_stats_per_device: every device's memory_stats() at once, gathered over the job's
// world (one rank = one device), so rank 0 can print what each device holds.
#pragma once

#include <vector>

#include <dax/backend/memory_stats.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax {

/// memory_stats() of every rank, indexed by rank (= device id). Collective over the world: every
/// rank calls it, and every rank gets the whole list.
inline std::vector<MemoryStats> memory_stats_per_device() {
  const MemoryStats mine = memory_stats();
  const std::vector<int64_t> all = Runtime::current().world().host().all_gather_host(
      {mine.bytes_in_use, mine.peak_bytes_in_use, mine.bytes_reserved, mine.num_allocs});
  std::vector<MemoryStats> out(all.size() / 4);
  for (size_t r = 0; r < out.size(); ++r)
    out[r] = MemoryStats{all[4 * r], all[4 * r + 1], all[4 * r + 2], all[4 * r + 3], {}};  // (parts: memory_stats())
  return out;
}

}  // namespace dax
