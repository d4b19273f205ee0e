// A reshard plan made concrete for this rank: per step, its exchange, its communicator and the
// counts and displacements the collective takes, decided once per plan and cached. Pieces that
// are contiguous in a buffer go to the collective in place; the rest are packed in one pass.
#pragma once

#include <dax/core/compiled_mode.hpp>
#include <memory>
#include <string>
#include <vector>

#include <dax/comm/communicator.hpp>
#include <dax/reshard/exchange.hpp>
#include <dax/reshard/explain.hpp>
#include <dax/reshard/make_unreduced.hpp>
#include <dax/reshard/plan_cache.hpp>
#include <dax/reshard/reduction_axes.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax::detail {

struct StepProgram {
  StepKind kind;
  Exchange ex;
  Communicator* comm = nullptr;  // null when this device's group is itself alone
  bool share = false;            // the device keeps its buffer as it is
  bool view = false;             // the new piece is a contiguous run of the old one: no copy
  int64_t view_offset = 0;
  bool zero = false;             // the device ends with zeros (make_unreduced off coordinate 0)
  bool starts_zeroed = false;    // the new piece is zeros where the exchange writes nothing (a pad)
  std::vector<int64_t> send_counts, send_displs, recv_counts, recv_displs;
  bool send_direct = false;      // send regions used in place in the source buffer
  bool recv_direct = false;      // receive regions land in place in the target buffer
  int64_t send_offset = 0;       // reduce-scatter: where the in-place send starts
  int64_t send_staging = 0, recv_staging = 0;  // elements of staging each side needs
  int64_t received = 0;          // elements this device receives (for comm_stats)
  std::shared_ptr<PreparedExchange> prepared;  // strided regions sent and received in place
  std::string axes_text;

  /// Whether running the step calls its group's collective (it does unless this device is alone
  /// in its group or keeps, views or zeroes its piece).
  bool communicates() const { return comm && !share && !view && !zero; }
};

struct ReshardProgram {
  std::vector<StepProgram> steps;
};

/// Displacements of parts laid one after another; returns the elements they take.
inline int64_t packed(const std::vector<int64_t>& counts, std::vector<int64_t>& displs) {
  int64_t total = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    displs[j] = total;
    total += counts[j];
  }
  return total;
}

/// Counts and displacements of `regions` inside `block`: in place when every region is one
/// contiguous run of the block's buffer, else packed one after another. Returns whether in place.
inline bool layout(const Box& block, const std::vector<Box>& regions, std::vector<int64_t>& counts,
                   std::vector<int64_t>& displs, int64_t& staging) {
  counts.assign(regions.size(), 0);
  displs.assign(regions.size(), 0);
  bool direct = true;
  for (size_t j = 0; j < regions.size(); ++j) {
    counts[j] = numel(regions[j]);
    direct = direct && is_contiguous_in(block, regions[j]);
  }
  staging = 0;
  if (!direct) {
    staging = packed(counts, displs);
    return false;
  }
  for (size_t j = 0; j < regions.size(); ++j) displs[j] = counts[j] ? offset_in(block, regions[j]) : 0;
  return true;
}

/// The part of a step that talks to its group: the group's communicator and what this device
/// receives in it (counted in comm_stats).
inline void join_group(StepProgram& p, const Mesh& mesh, const std::vector<int>& axes, Runtime& rt) {
  p.comm = &rt.group(mesh, axes);
  p.received = received_elements(p.ex);
}

/// An all-to-all's counts, displacements and staging for its exchange: each side in place when all
/// its regions are contiguous runs of its block, else packed. Each device decides its own sides:
/// the collective is the same either way.
inline void lay_out_all_to_all(StepProgram& p) {
  p.send_direct = layout(p.ex.from_block, p.ex.send, p.send_counts, p.send_displs, p.send_staging);
  p.recv_direct = layout(p.ex.to_block, p.ex.recv, p.recv_counts, p.recv_displs, p.recv_staging);
}

/// Whether every member of this device's group sends and receives only contiguous runs. The
/// group must agree on it: it decides which collective they all call. Decided from the step's
/// specs (never by visiting every member's exchange, which would cost O(P^2) on a large group).
inline bool group_is_contiguous(const Shape& shape, const ReshardStep& step, const Exchange&) {
  return regions_contiguous(shape, step.from, step.to);
}

DAX_OUTLINE StepProgram build_step(const Shape& shape, const ReshardStep& step, int device, int64_t item_bytes,
                              Runtime& rt)
#if DAX_HEADER_DEFINITIONS
{
  StepProgram p;
  p.kind = step.kind;
  p.axes_text = axes_text(step.from.mesh(), step.axes);
  if (step.kind == StepKind::make_unreduced) {
    p.share = keeps_value(step, step.from.mesh().coords(device));
    p.zero = !p.share;
    return p;
  }
  p.ex = exchange_for(shape, step.from, step.to, step.axes, step.reduce_axes, device);
  const Exchange& ex = p.ex;
  if (ex.members.size() == 1 || step.kind == StepKind::local_slice) {
    p.share = ex.from_block == ex.to_block;
    // A view keeps its whole parent buffer alive: only worth it when it keeps most of it. A
    // replicated -> split slice copies its part, so sharding a parameter (FSDP, ZeRO-3) leaves each
    // device holding its piece, not the whole array behind a view.
    p.view = !p.share && is_contiguous_in(ex.from_block, ex.to_block) &&
             2 * numel(ex.to_block) > numel(ex.from_block);
    p.view_offset = p.view && numel(ex.to_block) ? offset_in(ex.from_block, ex.to_block) : 0;
    return p;
  }
  join_group(p, step.from.mesh(), step.axes, rt);
  const size_t n = ex.members.size();
  switch (step.kind) {
    case StepKind::all_gather: {
      std::vector<Box> parts(ex.recv);
      parts[ex.self] = ex.keep;
      p.recv_direct = layout(ex.to_block, parts, p.recv_counts, p.recv_displs, p.recv_staging) &&
                      group_is_contiguous(shape, step, ex);
      if (!p.recv_direct) {  // strided parts go by derived datatypes, straight into place
        p.recv_staging = 0;
        p.prepared =
            p.comm->prepare_exchange_keeping(ex.from_block, ex.send, ex.to_block, ex.recv, ex.keep, item_bytes);
      }
      break;
    }
    case StepKind::all_to_all:
    case StepKind::general_exchange:
      lay_out_all_to_all(p);
      if (ex.reduce && p.recv_direct) {  // received partials are summed in from staging
        p.recv_direct = false;
        p.recv_staging = packed(p.recv_counts, p.recv_displs);
      }
      if (!ex.reduce && !group_is_contiguous(shape, step, ex)) {  // strided: derived datatypes, no staging
        p.send_staging = p.recv_staging = 0;
        p.prepared =
            p.comm->prepare_exchange_keeping(ex.from_block, ex.send, ex.to_block, ex.recv, ex.keep, item_bytes);
      }
      break;
    case StepKind::reduce_scatter: {
      std::vector<Box> parts(ex.send);
      parts[ex.self] = ex.keep;
      p.send_direct = layout(ex.from_block, parts, p.send_counts, p.send_displs, p.send_staging);
      // In place only when the parts follow one another in member order.
      int64_t next = -1;
      for (size_t j = 0; j < n && p.send_direct; ++j) {
        if (p.send_counts[j] == 0) continue;
        if (next >= 0 && p.send_displs[j] != next) p.send_direct = false;
        if (next < 0) p.send_offset = p.send_displs[j];
        next = p.send_displs[j] + p.send_counts[j];
      }
      if (!p.send_direct) {
        p.send_staging = packed(p.send_counts, p.send_displs);
        p.send_offset = 0;
      }
      break;
    }
    case StepKind::all_reduce: {
      const int64_t k = static_cast<int64_t>(n);
      p.received = all_reduce_received(numel(ex.from_block), k);
      break;
    }
    default: break;
  }
  return p;
}
#else
;
#endif

DAX_OUTLINE ReshardProgram build_program(const ReshardPlan& plan, int device, int64_t item_bytes, Runtime& rt)
#if DAX_HEADER_DEFINITIONS
{
  ReshardProgram program;
  for (const auto& step : plan.steps) program.steps.push_back(build_step(plan.shape, step, device, item_bytes, rt));
  return program;
}
#else
;
#endif

/// `cache` (process-wide, never destroyed, holding programs with the runtime's communicators)
/// tied to the current runtime: cleared when that runtime shuts down, and when a new one is first
/// seen (`tied_to`: the generation it was last tied to).
template <class Cache>
Cache& tied_to_runtime(Cache& cache, uint64_t& tied_to) {
  Runtime& rt = Runtime::current();
  if (rt.generation() != tied_to) {
    cache.clear();
    tied_to = rt.generation();
    rt.at_shutdown([&cache] { cache.clear(); });
  }
  return cache;
}

/// The process's cache of plans with this rank's programs.
inline PlanCache<ReshardProgram>& reshard_programs() {
  static auto* cache = new PlanCache<ReshardProgram>();
  static uint64_t tied_to = 0;
  return tied_to_runtime(*cache, tied_to);
}

}  // namespace dax::detail
