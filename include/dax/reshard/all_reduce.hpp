// All-reduce: partial sums over some axes are added, every member keeping the whole piece.
// Counted with the bandwidth-optimal algorithm's 2(k-1)/k (nccl-tests' busbw factor).
#pragma once

#include <optional>

#include <dax/reshard/exchange.hpp>
#include <dax/reshard/reduction_axes.hpp>

namespace dax::detail {

inline std::optional<ReshardStep> plan_all_reduce(const Shape& shape, const NamedSharding& from,
                                                  const NamedSharding& to) {
  const auto reduce = reduced_axes(from, to);
  if (reduce.empty()) return std::nullopt;
  for (size_t d = 0; d < shape.size(); ++d)
    if (from.dim_axes(d) != to.dim_axes(d)) return std::nullopt;
  const int64_t k = group_size(from.mesh(), reduce);
  return ReshardStep{StepKind::all_reduce, from, to, reduce, reduce, all_reduce_received(largest_piece(shape, from), k)};
}

}  // namespace dax::detail
