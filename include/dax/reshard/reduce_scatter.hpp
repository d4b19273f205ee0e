// Reduce-scatter: partial sums over some axes are added and split at once, those axes becoming
// the minor splitting axes of the dimensions the target shards with them.
#pragma once

#include <optional>

#include <dax/reshard/exchange.hpp>
#include <dax/reshard/reduction_axes.hpp>

namespace dax::detail {

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
  if (!target_inside_source(*step_geometry(shape, from, to))) return std::nullopt;
  // Each member receives its new piece from every other member of the group.
  return ReshardStep{StepKind::reduce_scatter, from, to, reduce, reduce,
                     (group_size(from.mesh(), reduce) - 1) * largest_piece(shape, to)};
}

}  // namespace dax::detail
