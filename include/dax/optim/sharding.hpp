// Where an optimizer keeps a parameter's state and reduces its gradient. By default both take the
// parameter's own sharding (a sharded parameter gets sharded state: ZeRO-3 / FSDP for free); a
// ShardingFn gives other ones (ZeRO-1: replicated parameters, sharded state; ZeRO-2: gradients
// reduce-scattered to that sharding too). shard_over(axis) is the usual choice.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/sharding/build.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax::optim {

/// (the parameter's path in its tree, its sharding, its shape) -> a sharding on the same mesh.
using ShardingFn =
    std::function<NamedSharding(const std::string& path, const NamedSharding& param, const Shape& shape)>;

/// The parameter's sharding further split over mesh axis `axis` (ZeRO's partitioning): on the
/// first dimension whose size its pieces times the axis size divide evenly, else on the largest
/// dimension with at least that many elements (uneven pieces), the axis added as the minor one so
/// each device's new piece lies inside its old one (moving a parameter there is a local slice).
/// Unchanged when the parameter already uses `axis`, or no dimension is large enough (scalars,
/// small biases stay whole).
inline ShardingFn shard_over(std::string axis) {
  return [axis = std::move(axis)](const std::string&, const NamedSharding& param, const Shape& shape) {
    const Mesh& mesh = param.mesh();
    const int a = mesh.axis_index(axis);
    if (param.splits(a) || param.is_unreduced_over(a)) return param;
    int best = -1;
    for (size_t d = 0; d < shape.size() && best < 0; ++d)
      if (shape[d] % (param.num_pieces(d) * mesh.axis_size(a)) == 0 && shape[d] > 0) best = static_cast<int>(d);
    for (size_t d = 0; d < shape.size() && best < 0; ++d)
      if (shape[d] >= param.num_pieces(d) * mesh.axis_size(a) &&
          (best < 0 || shape[d] > shape[static_cast<size_t>(best)]))
        best = static_cast<int>(d);
    if (best < 0 || mesh.axis_size(a) == 1) return param;
    std::vector<std::vector<int>> dims = detail::dims_of(param, shape.size());
    dims[static_cast<size_t>(best)].push_back(a);
    return detail::make_sharding(mesh, dims, param.unreduced_axes());
  };
}

}  // namespace dax::optim
