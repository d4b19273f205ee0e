// Which unreduced axes a step from `from` to `to` sums over, and what an all-reduce over them receives.
#pragma once

#include <vector>

#include <dax/sharding/named_sharding.hpp>

namespace dax::detail {

/// Axes unreduced in `from` but not in `to`; empty when `to` is not a reduction of `from`
/// (it keeps an axis `from` lacks).
inline std::vector<int> reduced_axes(const NamedSharding& from, const NamedSharding& to) {
  std::vector<int> out;
  for (int a : to.unreduced_axes())
    if (!from.is_unreduced_over(a)) return {};
  for (int a : from.unreduced_axes())
    if (!to.is_unreduced_over(a)) out.push_back(a);
  return out;
}

inline int64_t group_size(const Mesh& mesh, const std::vector<int>& axes) {
  int64_t k = 1;
  for (int a : axes) k *= mesh.axis_size(a);
  return k;
}

/// Elements each member receives in an all-reduce of `count` elements over `k` members, at the
/// bandwidth-optimal 2(k-1)/k (nccl-tests' busbw factor), in whole elements (rounded down): the
/// one figure the planner costs, explain prints and comm_stats counts (times the element size).
inline int64_t all_reduce_received(int64_t count, int64_t k) { return 2 * (k - 1) * count / k; }

}  // namespace dax::detail
