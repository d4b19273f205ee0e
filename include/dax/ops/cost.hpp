// What a sharding rule pays: the elements a device receives to move an operand between shardings,
// from the reshard planner (pure; rules are cached, so this runs once per op signature).
#pragma once

#include <dax/reshard/planner.hpp>

namespace dax::detail {

inline int64_t reshard_cost(const Shape& shape, const NamedSharding& from, const NamedSharding& to) {
  if (from == to) return 0;
  return plan_reshard(shape, from, to).elements;
}

}  // namespace dax::detail
