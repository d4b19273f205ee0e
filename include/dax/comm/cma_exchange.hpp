// The single-copy path of a strided region exchange between processes of one node: each pair's
// region is copied straight from the sender's memory into the receiver's, either by the sender
// through its mapping of the receiver's piece (peer writes, comm/node_shared_memory.hpp), or with
// Linux's cross-memory attach (process_vm_readv by the receiver, or process_vm_writev by the
// sender), the runs of the two regions as the two iovec lists. Why: a shared-memory MPI moves a
// derived datatype through copy-in/copy-out fragments (two copies per byte), while it moves a
// contiguous message with one kernel copy; this gives strided regions (columns, blocks) that one
// copy too, and peer writes keep it at streaming speed for short runs. Measured in
// docs/performance.md.
//
// Only the geometry and the user-space copy live here (which byte ranges pair up, in what order
// they are copied); MpiCommunicator decides when to use it, agrees on it over the group and runs
// the copies between two small collectives.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <dax/core/shape.hpp>
#include <dax/core/stream_copy.hpp>

namespace dax::detail {

/// What this process's exchanges did, for tests and reports: exchanges run by cross-memory
/// attach, and groups on one node where the system refused it (a ptrace policy, a sandbox).
struct CmaCounts {
  int64_t exchanges = 0;
  int64_t groups_refused = 0;
  int64_t segments = 0;       // paired runs copied
  int64_t remote_iovecs = 0;  // the other process's side, after joining segments that follow on
  int64_t peer_writes = 0;    // segments written straight into another process's mapped piece
  int64_t published = 0;      // calls in which this process's receive piece was offered to its senders
  int64_t groups_across_nodes = 0;  // groups that found members on other nodes: their exchanges go by MPI
  int64_t mpi_exchanges = 0;        // strided exchanges that went through MPI's datatypes (MPI_Alltoallw)
};
inline CmaCounts& cma_counts() {
  static CmaCounts counts;
  return counts;
}

/// A region of a row-major block as equal runs of contiguous elements, in the region's own
/// row-major order: `length` elements each, `counts`/`strides` (elements) along the outer
/// dimensions the region does not span whole.
struct RegionRuns {
  static constexpr int kMaxOuter = 8;  // deeper regions are not described (they go by MPI)

  int64_t base = 0;      // offset of the region's first element in the block
  int64_t length = 0;    // elements per run (the whole region when it is contiguous)
  int64_t elements = 0;  // elements in all
  std::vector<int64_t> counts, strides;

  RegionRuns() = default;
  RegionRuns(const Box& block, const Box& region) : elements(numel(region)) {
    if (elements == 0) return;
    base = offset_in(block, region);
    length = elements;
    if (is_contiguous_in(block, region)) return;
    size_t cut = region.size() - 1;  // the innermost dimension the region does not span whole
    while (region[cut] == block[cut]) --cut;
    int64_t inner = 1;
    for (size_t i = region.size() - 1; i > cut; --i) inner *= block[i].size();
    length = region[cut].size() * inner;
    int64_t stride = inner * block[cut].size();
    for (size_t i = cut; i-- > 0;) {
      if (region[i].size() == 1) {  // a dimension of one run: no loop
        stride *= block[i].size();
        continue;
      }
      counts.insert(counts.begin(), region[i].size());
      strides.insert(strides.begin(), stride);
      stride *= block[i].size();
    }
  }
  int64_t runs() const { return length ? elements / length : 0; }
  /// Offset in the block of run `r`.
  int64_t run_offset(int64_t r) const {
    int64_t offset = base;
    for (size_t i = counts.size(); i-- > 0;) {
      offset += r % counts[i] * strides[i];
      r /= counts[i];
    }
    return offset;
  }

  /// As int64s for another member: [base, length, elements, outer, counts..., strides...],
  /// padded to `record_size`; -1 in the first field when too deep to describe.
  static constexpr int record_size = 4 + 2 * kMaxOuter;
  bool fits_record() const { return counts.size() <= static_cast<size_t>(kMaxOuter); }
  void write(int64_t* out) const {
    std::fill(out, out + record_size, 0);
    if (!fits_record()) {
      out[0] = -1;
      return;
    }
    out[0] = base, out[1] = length, out[2] = elements, out[3] = static_cast<int64_t>(counts.size());
    for (size_t i = 0; i < counts.size(); ++i) out[4 + i] = counts[i], out[4 + kMaxOuter + i] = strides[i];
  }
  static bool describable(const int64_t* in) { return in[0] >= 0; }
  static RegionRuns read(const int64_t* in) {
    RegionRuns r;
    r.base = in[0], r.length = in[1], r.elements = in[2];
    for (int64_t i = 0; i < in[3]; ++i) r.counts.push_back(in[4 + i]), r.strides.push_back(in[4 + kMaxOuter + i]);
    return r;
  }
};

/// One contiguous stretch copied: `bytes` from `from` bytes into the sender's block to `to` bytes
/// into the receiver's.
struct CopySegment {
  int64_t from = 0, to = 0, bytes = 0;
};

/// Whether the sender writes a pair's region into the receiver's memory (process_vm_writev)
/// rather than the receiver reading it (process_vm_readv). The kernel pins the other process's
/// pages iovec by iovec, so the side with fewer runs should be the other process's: a strided
/// send into a contiguous receive is pushed, the rest pulled. Both ends decide alike.
inline bool pushed(const RegionRuns& from, const RegionRuns& to) { return from.runs() > to.runs(); }

/// The segments that carry a sender's region (`from`, in its block) into the receiver's region
/// (`to`, in its block): both list the same elements in the same order, cut wherever either
/// side's run ends.
/// No segment is longer than `most_bytes`. Regions of different sizes pair nothing (the caller
/// checks sizes first).
inline std::vector<CopySegment> pair_runs(const RegionRuns& from, const RegionRuns& to, int64_t item,
                                          int64_t most_bytes = int64_t(1) << 30) {
  std::vector<CopySegment> out;
  if (from.elements != to.elements || from.elements == 0) return out;
  const int64_t most = std::max<int64_t>(1, most_bytes / item);
  int64_t r_run = 0, r_in = 0, l_run = 0, l_in = 0, done = 0;
  while (done < to.elements) {
    const int64_t n = std::min({from.length - r_in, to.length - l_in, most});
    out.push_back({(from.run_offset(r_run) + r_in) * item, (to.run_offset(l_run) + l_in) * item, n * item});  // from, to
    done += n, r_in += n, l_in += n;
    if (r_in == from.length) ++r_run, r_in = 0;
    if (l_in == to.length) ++l_run, l_in = 0;
  }
  return out;
}

/// The shortest run, in bytes, of the regions (INT64_MAX when there are none).
inline int64_t shortest_run_bytes(const std::vector<RegionRuns>& regions, int64_t item) {
  int64_t shortest = INT64_MAX;
  for (const RegionRuns& r : regions)
    if (r.elements) shortest = std::min(shortest, r.length * item);
  return shortest;
}

/// One stretch to copy in this process's address space (`to` may lie in another process's piece
/// mapped here).
struct CopyRun {
  char* to;
  const char* from;
  size_t bytes;
};

/// Copies `runs` in their order. Large copies stream: two runs whose sources do not follow on
/// (runs spread over memory) side by side, as cpu::copy_region streams strided runs; the rest one
/// after another. The caller fences (stream_fence) before another process may read.
inline void copy_runs(const std::vector<CopyRun>& runs) {
  size_t total = 0;
  for (const CopyRun& r : runs) total += r.bytes;
  if (total < static_cast<size_t>(kStreamingCopyFrom)) {
    for (const CopyRun& r : runs) std::memcpy(r.to, r.from, r.bytes);
    return;
  }
  for (size_t k = 0; k < runs.size();) {
    const CopyRun& a = runs[k];
    if (k + 1 < runs.size() && runs[k + 1].bytes == a.bytes && a.from + a.bytes != runs[k + 1].from &&
        a.from != runs[k + 1].from && a.bytes >= 64) {
      char* to[2] = {a.to, runs[k + 1].to};
      const char* from[2] = {a.from, runs[k + 1].from};
      stream_copy_side_by_side(to, from, 2, a.bytes);
      k += 2;
    } else {
      stream_copy(a.to, a.from, a.bytes);
      ++k;
    }
  }
}

/// The segments of several destinations in the order of their sources (stable: a destination's
/// own order where sources tie), as (destination, segment) pairs. Copied in this order, a source
/// is read once front to back while the destinations fill side by side: a row split between this
/// member's piece and a peer's is read whole, not half now and half later.
inline std::vector<std::pair<int, int64_t>> in_source_order(const std::vector<const std::vector<CopySegment>*>& lists) {
  std::vector<std::pair<int, int64_t>> order;
  for (size_t d = 0; d < lists.size(); ++d)
    for (size_t k = 0; k < lists[d]->size(); ++k) order.emplace_back(static_cast<int>(d), static_cast<int64_t>(k));
  std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    return (*lists[a.first])[a.second].from < (*lists[b.first])[b.second].from;
  });
  return order;
}

}  // namespace dax::detail
