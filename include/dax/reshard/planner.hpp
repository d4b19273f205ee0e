// The reshard planner: a pure function from (global shape, source sharding, target sharding) to
// the cheapest plan among a few candidates, each a short chain of catalog steps:
//   no reduction:   one move (local slice / all-gather / all-to-all), at the lower bound;
//   with reduction: reduce-scatter (+ all-reduce of the rest) then a move,
//                   all-reduce then a move, or the general exchange alone;
// then make_unreduced when the target adds unreduced axes.
// Every decision and every count (max over devices) is computed from the specs and the axis
// sizes (piece_math.hpp), so every rank reaches the same plan without visiting every device pair.
#pragma once

#include <dax/core/compiled_mode.hpp>
#include <algorithm>
#include <optional>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/reshard/all_gather.hpp>
#include <dax/reshard/all_reduce.hpp>
#include <dax/reshard/all_to_all.hpp>
#include <dax/reshard/general_exchange.hpp>
#include <dax/reshard/local_slice.hpp>
#include <dax/reshard/make_unreduced.hpp>
#include <dax/reshard/reduce_scatter.hpp>
#include <dax/sharding/build.hpp>

namespace dax::detail {

/// Every device already holds exactly its target piece (the shardings, with the same unreduced
/// axes, differ only in axes of size 1 or in how they are written, or in splits of empty pieces).
inline bool same_layout(const Shape& shape, const NamedSharding& a, const NamedSharding& b) {
  return same_pieces(*step_geometry(shape, a, b));
}

/// The steps that move data from `from` to `to` (same unreduced axes): nothing, a local slice,
/// an all-gather, or an all-to-all, whichever is the first that applies.
inline std::vector<ReshardStep> plan_move(const Shape& shape, const NamedSharding& from,
                                          const NamedSharding& to) {
  if (same_layout(shape, from, to)) return {};
  if (auto s = plan_local_slice(shape, from, to)) return {*s};
  if (auto s = plan_all_gather(shape, from, to)) return {*s};
  return {*plan_all_to_all(shape, from, to)};
}

inline int64_t plan_elements(const std::vector<ReshardStep>& steps) {
  int64_t n = 0;
  for (const auto& s : steps) n += s.elements;
  return n;
}

/// Elements a device is missing: of its target piece, what it does not hold (max over devices).
inline int64_t missing_elements(const Shape& shape, const NamedSharding& from, const NamedSharding& to) {
  return max_received(shape, from, to, {});  // what an exchange without reduction receives
}

inline std::vector<int> minus(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  for (int x : a)
    if (!has_axis(b, x)) out.push_back(x);
  return out;
}

DAX_OUTLINE ReshardPlan plan_reshard(const Shape& shape, const NamedSharding& src, const NamedSharding& dst)
#if DAX_HEADER_DEFINITIONS
{
  DAX_CHECK(src.mesh() == dst.mesh(), "reshard: source and target must be on the same mesh, got ",
            to_string(src.mesh()), " and ", to_string(dst.mesh()));
  src.check_rank(shape);
  dst.check_rank(shape);
  const size_t ndim = shape.size();
  const Mesh& mesh = src.mesh();

  std::vector<int> kept, reduce, added;  // unreduced axes kept, summed, and new in the target
  for (int a : src.unreduced_axes()) (dst.is_unreduced_over(a) ? kept : reduce).push_back(a);
  for (int a : dst.unreduced_axes())
    if (!src.is_unreduced_over(a)) added.push_back(a);
  const NamedSharding dst_reduced = with_unreduced_axes(dst, ndim, kept);

  ReshardPlan plan{shape, src, dst, {}, 0, 0, 0};
  const auto general = plan_general_exchange(shape, src, dst_reduced);
  plan.general_exchange_elements = general->elements;

  if (reduce.empty()) {
    plan.steps = plan_move(shape, src, dst_reduced);
    plan.lower_bound = missing_elements(shape, src, dst_reduced);
  } else {
    std::vector<std::vector<ReshardStep>> candidates;
    // Reduce-scatter over the reduced axes the target splits with, all-reduce the rest, move.
    std::vector<int> scattered;
    auto dims = dims_of(src, ndim);
    for (size_t d = 0; d < ndim; ++d)
      for (int a : dst.dim_axes(d))
        if (has_axis(reduce, a)) {
          dims[d].push_back(a);
          scattered.push_back(a);
        }
    std::sort(scattered.begin(), scattered.end());
    if (!scattered.empty()) {
      const NamedSharding mid = make_sharding(mesh, dims, minus(src.unreduced_axes(), scattered));
      if (auto rs = plan_reduce_scatter(shape, src, mid)) {
        std::vector<ReshardStep> steps{*rs};
        NamedSharding cur = mid;
        if (scattered.size() < reduce.size()) {
          const NamedSharding reduced = make_sharding(mesh, dims, kept);
          steps.push_back(*plan_all_reduce(shape, cur, reduced));
          cur = reduced;
        }
        for (auto& s : plan_move(shape, cur, dst_reduced)) steps.push_back(s);
        candidates.push_back(steps);
      }
    }
    // All-reduce, then move.
    const NamedSharding reduced = with_unreduced_axes(src, ndim, kept);
    std::vector<ReshardStep> steps{*plan_all_reduce(shape, src, reduced)};
    for (auto& s : plan_move(shape, reduced, dst_reduced)) steps.push_back(s);
    candidates.push_back(steps);
    // The general exchange alone.
    candidates.push_back({*general});

    // Cheapest; on a tie, fewer steps, then the earlier candidate (fast paths come first).
    size_t best = 0;
    for (size_t i = 1; i < candidates.size(); ++i) {
      const int64_t a = plan_elements(candidates[i]), b = plan_elements(candidates[best]);
      if (a < b || (a == b && candidates[i].size() < candidates[best].size())) best = i;
    }
    plan.steps = candidates[best];
    // A device holds none of its target values while partial sums of them live elsewhere, so it
    // must receive its whole target piece (at least once, pre-summed). Reduction collectives pay
    // more than this: (k-1)/k of the reduced data for reduce-scatter, 2(k-1)/k for all-reduce.
    plan.lower_bound = group_size(mesh, reduce) > 1 ? largest_piece(shape, dst_reduced)
                                                    : missing_elements(shape, src, dst_reduced);
  }
  if (!added.empty()) plan.steps.push_back(*plan_make_unreduced(shape, dst_reduced, dst));
  plan.elements = plan_elements(plan.steps);
  return plan;
}
#else
;
#endif

}  // namespace dax::detail
