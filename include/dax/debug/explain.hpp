// dax::explain: the plan a reshard would run, as text (steps, mesh axes, bytes per device, the
// lower bound and the general exchange's bytes). Pure: nothing moves.
#pragma once

#include <string>

#include <dax/array/dist_array.hpp>
#include <dax/reshard/explain.hpp>
#include <dax/reshard/planner.hpp>

namespace dax {

inline std::string explain(const Shape& shape, DType dtype, const NamedSharding& from, const NamedSharding& to) {
  return detail::explain_plan(detail::plan_reshard(shape, from, to), itemsize(dtype));
}

template <class T>
std::string explain(const DistArray<T>& x, const NamedSharding& target) {
  return explain(x.shape(), x.dtype(), x.sharding(), target);
}

}  // namespace dax
