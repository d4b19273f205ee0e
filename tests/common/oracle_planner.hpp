// The reshard planner as it was before planning became symbolic: every candidate checked by
// intersecting every device's piece with every other's, O(P^2). Kept only as the tests' oracle:
// the library's planner must give the same steps, bytes and lower bound.
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include <dax/reshard/exchange.hpp>
#include <dax/reshard/make_unreduced.hpp>
#include <dax/reshard/reduction_axes.hpp>
#include <dax/sharding/build.hpp>

namespace dax::oracle {

using namespace dax::detail;  // the shared step types and exchange rule

/// The mesh axes over which some device must receive data in a step from `from` to `to`
/// (reducing over `reduce_axes`): the smallest group that makes the step possible.
inline std::vector<int> involved_axes(const Shape& shape, const NamedSharding& from,
                                      const NamedSharding& to, const std::vector<int>& reduce_axes) {
  const Mesh& mesh = from.mesh();
  std::vector<bool> involved(mesh.num_axes(), false);
  for (int d : mesh.devices()) {
    const auto dc = mesh.coords(d);
    const Box target = to.box_at(dc, shape);
    if (numel(target) == 0) continue;
    for (int s : mesh.devices()) {
      if (s == d) continue;
      const auto sc = mesh.coords(s);
      if (!is_source(from, reduce_axes, sc, dc)) continue;
      if (numel(intersect(from.box_at(sc, shape), target)) == 0) continue;
      for (int a = 0; a < mesh.num_axes(); ++a)
        if (sc[a] != dc[a]) involved[a] = true;
    }
  }
  std::vector<int> out;
  for (int a = 0; a < mesh.num_axes(); ++a)
    if (involved[a]) out.push_back(a);
  return out;
}

/// Max over devices of the elements a plain exchange receives.
inline int64_t max_received(const Shape& shape, const NamedSharding& from, const NamedSharding& to,
                            const std::vector<int>& axes, const std::vector<int>& reduce_axes) {
  int64_t most = 0;
  for (int d : from.mesh().devices()) {
    const int64_t n = received_elements(exchange_for(shape, from, to, axes, reduce_axes, d));
    most = n > most ? n : most;
  }
  return most;
}




inline std::optional<ReshardStep> plan_local_slice(const Shape& shape, const NamedSharding& from,
                                                   const NamedSharding& to) {
  if (from.unreduced_axes() != to.unreduced_axes()) return std::nullopt;
  for (int d : from.mesh().devices()) {
    const auto c = from.mesh().coords(d);
    if (!contains(from.box_at(c, shape), to.box_at(c, shape))) return std::nullopt;
  }
  return ReshardStep{StepKind::local_slice, from, to, {}, {}, 0};
}




inline std::optional<ReshardStep> plan_all_gather(const Shape& shape, const NamedSharding& from,
                                                  const NamedSharding& to) {
  if (from.unreduced_axes() != to.unreduced_axes()) return std::nullopt;
  const auto axes = involved_axes(shape, from, to, {});
  if (axes.empty()) return std::nullopt;
  int64_t most = 0;
  for (int d : from.mesh().devices()) {
    const Exchange ex = exchange_for(shape, from, to, axes, {}, d);
    for (size_t j = 0; j < ex.members.size(); ++j) {
      if (static_cast<int>(j) == ex.self) continue;
      const auto pc = from.mesh().coords(ex.members[j]);
      // Everyone in the group wants the same piece, and each sends all peers what it has of it.
      if (to.box_at(pc, shape) != ex.to_block) return std::nullopt;
      if (!same_region(ex.send[j], ex.keep)) return std::nullopt;
    }
    most = std::max(most, received_elements(ex));
  }
  return ReshardStep{StepKind::all_gather, from, to, axes, {}, most};
}




inline std::optional<ReshardStep> plan_all_to_all(const Shape& shape, const NamedSharding& from,
                                                   const NamedSharding& to) {
  if (from.unreduced_axes() != to.unreduced_axes()) return std::nullopt;
  const auto axes = involved_axes(shape, from, to, {});
  if (axes.empty()) return std::nullopt;
  return ReshardStep{StepKind::all_to_all, from, to, axes, {}, max_received(shape, from, to, axes, {})};
}




inline std::optional<ReshardStep> plan_reduce_scatter(const Shape& shape, const NamedSharding& from,
                                                      const NamedSharding& to) {
  const auto reduce = reduced_axes(from, to);
  if (reduce.empty()) return std::nullopt;
  // The target splits each dimension as the source does, then by reduced axes only.
  std::vector<bool> placed(from.mesh().num_axes(), false);
  for (size_t d = 0; d < shape.size(); ++d) {
    const auto& src = from.dim_axes(d);
    const auto& dst = to.dim_axes(d);
    if (dst.size() < src.size() || !std::equal(src.begin(), src.end(), dst.begin())) return std::nullopt;
    for (size_t i = src.size(); i < dst.size(); ++i) {
      if (!has_axis(reduce, dst[i])) return std::nullopt;
      placed[dst[i]] = true;
    }
  }
  for (int a : reduce)
    if (!placed[a]) return std::nullopt;
  // Every member's new piece must lie inside the piece the group shares (uneven splits may not).
  for (int d : from.mesh().devices()) {
    const auto c = from.mesh().coords(d);
    if (!contains(from.box_at(c, shape), to.box_at(c, shape))) return std::nullopt;
  }
  return ReshardStep{StepKind::reduce_scatter, from, to, reduce, reduce,
                     max_received(shape, from, to, reduce, reduce)};
}




inline std::optional<ReshardStep> plan_all_reduce(const Shape& shape, const NamedSharding& from,
                                                  const NamedSharding& to) {
  const auto reduce = reduced_axes(from, to);
  if (reduce.empty()) return std::nullopt;
  for (size_t d = 0; d < shape.size(); ++d)
    if (from.dim_axes(d) != to.dim_axes(d)) return std::nullopt;
  const int64_t k = group_size(from.mesh(), reduce);
  int64_t most = 0;
  for (int d : from.mesh().devices())
    most = std::max(most, 2 * (k - 1) * numel(from.box_at(from.mesh().coords(d), shape)) / k);
  return ReshardStep{StepKind::all_reduce, from, to, reduce, reduce, most};
}




inline std::optional<ReshardStep> plan_general_exchange(const Shape& shape, const NamedSharding& from,
                                                        const NamedSharding& to) {
  for (int a : to.unreduced_axes())
    if (!from.is_unreduced_over(a)) return std::nullopt;
  const auto reduce = reduced_axes(from, to);
  const auto axes = involved_axes(shape, from, to, reduce);
  return ReshardStep{StepKind::general_exchange, from, to, axes, reduce,
                     max_received(shape, from, to, axes, reduce)};
}




/// Every device already holds exactly its target piece (the shardings, with the same unreduced
/// axes, differ only in axes of size 1 or in how they are written).
inline bool same_layout(const Shape& shape, const NamedSharding& a, const NamedSharding& b) {
  for (int d : a.mesh().devices()) {
    const auto c = a.mesh().coords(d);
    if (a.box_at(c, shape) != b.box_at(c, shape)) return false;
  }
  return true;
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
  int64_t most = 0;
  for (int d : from.mesh().devices()) {
    const auto c = from.mesh().coords(d);
    const Box target = to.box_at(c, shape);
    most = std::max(most, numel(target) - numel(intersect(target, from.box_at(c, shape))));
  }
  return most;
}

inline int64_t largest_piece(const Shape& shape, const NamedSharding& s) {
  int64_t most = 0;
  for (int d : s.mesh().devices()) most = std::max(most, numel(s.box_at(s.mesh().coords(d), shape)));
  return most;
}

inline std::vector<int> minus(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  for (int x : a)
    if (!has_axis(b, x)) out.push_back(x);
  return out;
}

inline ReshardPlan plan_reshard(const Shape& shape, const NamedSharding& src, const NamedSharding& dst) {
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


}  // namespace dax::oracle
