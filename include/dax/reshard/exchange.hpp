// What one device sends, receives and keeps in one step: the block-intersection rule every step
// kind shares. For a target piece, the source of each (source piece, partial) is the device that
// holds it and agrees with the receiver on every other mesh axis of the group, so a device is its
// own source whenever it holds the data, and replicas share the sending evenly.
#pragma once

#include <dax/core/compiled_mode.hpp>
#include <algorithm>
#include <cstdint>
#include <vector>

#include <dax/core/shape.hpp>
#include <dax/reshard/piece_math.hpp>
#include <dax/reshard/step.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax::detail {

struct Exchange {
  std::vector<int> members;  // device ids of the group, in communicator rank order
  int self = 0;              // this device's position in `members`
  Box from_block, to_block;  // this device's piece before and after the step
  Box keep;                  // the part of to_block it holds already (added when reducing)
  std::vector<Box> send;     // send[j]: region for member j (empty when none; empty for self)
  std::vector<Box> recv;     // recv[j]: region from member j, copied or summed into to_block
  bool reduce = false;
};

inline bool has_axis(const std::vector<int>& axes, int axis) {
  for (int a : axes)
    if (a == axis) return true;
  return false;
}

/// Whether device `s` supplies data to device `d` in a step from `from`: they must agree on every
/// mesh axis except those splitting `from` (different pieces) and those being reduced (different
/// partials).
inline bool is_source(const NamedSharding& from, const std::vector<int>& reduce_axes,
                      const std::vector<int64_t>& s, const std::vector<int64_t>& d) {
  for (int a = 0; a < from.mesh().num_axes(); ++a)
    if (s[a] != d[a] && !from.splits(a) && !has_axis(reduce_axes, a)) return false;
  return true;
}

/// The exchange of `device` in a step from `from` to `to` over the mesh axes `axes`.
DAX_OUTLINE Exchange exchange_for(const Shape& shape, const NamedSharding& from, const NamedSharding& to,
                             const std::vector<int>& axes, const std::vector<int>& reduce_axes,
                             int device)
#if DAX_HEADER_DEFINITIONS
{
  const Mesh& mesh = from.mesh();
  Exchange ex;
  ex.members = group_members(mesh, axes, device);
  ex.reduce = !reduce_axes.empty();
  const auto dc = mesh.coords(device);
  ex.from_block = from.box_at(dc, shape);
  ex.to_block = to.box_at(dc, shape);
  ex.keep = intersect(ex.from_block, ex.to_block);
  ex.send.resize(ex.members.size());
  ex.recv.resize(ex.members.size());
  for (size_t j = 0; j < ex.members.size(); ++j) {
    const int peer = ex.members[j];
    if (peer == device) {
      ex.self = static_cast<int>(j);
      ex.send[j] = ex.recv[j] = empty_box(shape.size());
      continue;
    }
    const auto pc = mesh.coords(peer);
    ex.recv[j] = is_source(from, reduce_axes, pc, dc) ? intersect(from.box_at(pc, shape), ex.to_block)
                                                      : empty_box(shape.size());
    ex.send[j] = is_source(from, reduce_axes, dc, pc) ? intersect(ex.from_block, to.box_at(pc, shape))
                                                      : empty_box(shape.size());
  }
  return ex;
}
#else
;
#endif

inline int64_t received_elements(const Exchange& ex) {
  int64_t n = 0;
  for (size_t j = 0; j < ex.recv.size(); ++j)
    if (static_cast<int>(j) != ex.self) n += numel(ex.recv[j]);
  return n;
}

/// What a step's closed-form analysis found, remembered for the last few steps asked about on
/// this thread: the planner asks the same questions of one pair of shardings from several
/// catalog files (all-gather, all-to-all and the general exchange share their group and bytes).
struct StepFacts {
  Shape shape;
  NamedSharding from, to;
  std::vector<int> reduce_axes;
  std::vector<int> involved;
  int64_t received = 0;
};

DAX_OUTLINE std::vector<int> find_involved_axes(const StepGeometry& g, const Shape& shape, const Mesh& mesh,
                                           const std::vector<int>& reduce_axes)
#if DAX_HEADER_DEFINITIONS
{
  std::vector<int> out;
  if (numel(shape) == 0) return out;
  // Per mesh axis splitting the source: its dimension, stride and size; decided in one pass.
  struct Candidate {
    int axis;
    size_t dim;
    int64_t stride, size, chunk;
    bool reaches = false;
  };
  std::vector<Candidate> open;
  std::vector<bool> involved(mesh.num_axes(), false);
  for (int a = 0; a < mesh.num_axes(); ++a) {
    if (mesh.axis_size(a) == 1) continue;
    if (has_axis(reduce_axes, a)) {
      involved[a] = true;
      continue;
    }
    for (size_t d = 0; d < shape.size(); ++d)
      if (g.from_split(d).uses(a))
        open.push_back({a, d, g.from_split(d).stride_of(a), mesh.axis_size(a), g.from_chunk(d)});
  }
  // A device with a non-empty target piece in every dimension, failing the test in one: its
  // group's samples decide, provided every other group has such a device.
  if (!open.empty() && some_target_nonempty(g)) {
    for (Candidate& k : open) {
      const size_t grp = g.group_of(k.dim);
      for (size_t i = 0; i < g.num_samples(grp) && !k.reaches; ++i) {
        const auto c = g.sample(grp, i);
        if (!g.target_nonempty(grp, c)) continue;
        // The source pieces meeting this device's target piece, [j0, j1]: do they all share its
        // coordinate on the axis? If not, some other coordinate sends to it.
        const Slice t = g.to_piece(k.dim, c);
        const int64_t j0 = t.start / k.chunk, j1 = (t.stop - 1) / k.chunk;
        k.reaches = !(j0 / k.stride == j1 / k.stride && (j0 / k.stride) % k.size == c[k.axis]);
      }
    }
  }
  for (const Candidate& k : open) involved[k.axis] = involved[k.axis] || k.reaches;
  for (int a = 0; a < mesh.num_axes(); ++a)
    if (involved[a]) out.push_back(a);
  return out;
}
#else
;
#endif

/// The facts of a step from `from` to `to` reducing over `reduce_axes`: its group (the mesh
/// axes over which some device must receive data: a reduced axis when the array has elements; an
/// axis splitting the source when some device's target piece reaches a source piece whose
/// coordinate on that axis differs from its own) and the most a device receives in it.
inline std::pair<std::vector<StepFacts>, size_t>& step_facts_memo() {
  thread_local std::pair<std::vector<StepFacts>, size_t> memo;
  return memo;
}

/// Forgets this thread's remembered step geometries and facts, so the next question about any
/// step is answered from scratch (benchmarks timing a new plan use it).
inline void forget_step_memos() {
  geometry_memo() = {};
  step_facts_memo() = {};
}

DAX_OUTLINE const StepFacts& step_facts(const Shape& shape, const NamedSharding& from, const NamedSharding& to,
                                   const std::vector<int>& reduce_axes)
#if DAX_HEADER_DEFINITIONS
{
  auto& [recent, next] = step_facts_memo();
  for (const StepFacts& f : recent)
    if (f.from == from && f.to == to && f.shape == shape && f.reduce_axes == reduce_axes) return f;
  const auto geometry = step_geometry(shape, from, to);
  const StepGeometry& g = *geometry;
  StepFacts f{shape, from, to, reduce_axes, find_involved_axes(g, shape, from.mesh(), reduce_axes), 0};
  int64_t k = 1;
  for (int a : reduce_axes) k *= from.mesh().axis_size(a);
  f.received = f.involved.empty() ? 0 : most_received(g, k);
  if (recent.size() < 8) {
    recent.push_back(std::move(f));
    return recent.back();
  }
  next = (next + 1) % recent.size();
  recent[next] = std::move(f);
  return recent[next];
}
#else
;
#endif

/// The mesh axes over which some device must receive data in a step (see step_facts).
inline std::vector<int> involved_axes(const Shape& shape, const NamedSharding& from, const NamedSharding& to,
                                      const std::vector<int>& reduce_axes) {
  return step_facts(shape, from, to, reduce_axes).involved;
}

/// Max over devices of the elements an exchange over `involved_axes(...)` receives.
inline int64_t max_received(const Shape& shape, const NamedSharding& from, const NamedSharding& to,
                            const std::vector<int>& reduce_axes) {
  return step_facts(shape, from, to, reduce_axes).received;
}

/// Whether every region any device sends or receives in a step from `from` to `to` is one
/// contiguous run of its block (`is_contiguous_in`), decided per dimension from the specs, so the
/// devices of a group agree without looking at each other. Conservative: it may answer false where
/// every region happens to be contiguous (the step then goes by strided datatypes, still exact).
inline bool regions_contiguous(const Shape& shape, const NamedSharding& from, const NamedSharding& to) {
  const auto geometry = step_geometry(shape, from, to);
  const StepGeometry& g = *geometry;
  // A region is narrower than its block in dimension d only where the other side's pieces can cut
  // the block's piece: its pieces neither contain nor avoid it.
  auto cuts = [&](size_t d, bool block_is_source) {
    const DimRelation r = g.relation(d);
    if (r == DimRelation::same) return false;
    if (block_is_source) return !(r == DimRelation::to_whole || r == DimRelation::from_finer);
    return !(r == DimRelation::from_whole || r == DimRelation::to_finer);
  };
  for (bool block_is_source : {true, false})
    for (size_t d = 0; d < shape.size(); ++d) {
      if (!cuts(d, block_is_source)) continue;
      for (size_t e = 0; e < d; ++e)  // earlier dimensions must be one index wide
        if (std::min(largest_chunk(shape[e], g.from_split(e).pieces), largest_chunk(shape[e], g.to_split(e).pieces)) > 1)
          return false;
    }
  return true;
}

}  // namespace dax::detail
