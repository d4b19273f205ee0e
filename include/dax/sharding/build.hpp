// Building shardings from mesh-axis indices, for code (planner, op rules) that derives new
// shardings from old ones.
#pragma once

#include <dax/core/compiled_mode.hpp>
#include <string>
#include <vector>

#include <dax/sharding/named_sharding.hpp>

namespace dax::detail {

/// A sharding on `mesh` whose dimension d is split over mesh axes dims[d] (major first) and
/// whose value is unreduced over the mesh axes `unreduced`.
DAX_OUTLINE NamedSharding make_sharding(const Mesh& mesh, const std::vector<std::vector<int>>& dims,
                                   const std::vector<int>& unreduced)
#if DAX_HEADER_DEFINITIONS
{
  std::vector<PartitionSpec::Entry> entries;
  for (const auto& axes_of_dim : dims) {
    if (axes_of_dim.empty()) {
      entries.emplace_back(none);
    } else if (axes_of_dim.size() == 1) {
      entries.emplace_back(mesh.axis_names()[axes_of_dim[0]]);
    } else {
      std::vector<std::string> names;
      for (int a : axes_of_dim) names.push_back(mesh.axis_names()[a]);
      entries.emplace_back(axes(names));
    }
  }
  std::vector<std::string> names;
  for (int a : unreduced) names.push_back(mesh.axis_names()[a]);
  return NamedSharding(mesh, PartitionSpec(entries).with_unreduced(names));
}
#else
;
#endif

/// The split axes of every dimension of `s` up to rank `ndim`.
inline std::vector<std::vector<int>> dims_of(const NamedSharding& s, size_t ndim) {
  std::vector<std::vector<int>> dims(ndim);
  for (size_t d = 0; d < ndim; ++d) dims[d] = s.dim_axes(d);
  return dims;
}

/// `s` with its value unreduced over exactly `unreduced`.
inline NamedSharding with_unreduced_axes(const NamedSharding& s, size_t ndim,
                                         const std::vector<int>& unreduced) {
  return make_sharding(s.mesh(), dims_of(s, ndim), unreduced);
}

}  // namespace dax::detail
