// dax::make_mesh and dax::create_device_mesh: meshes over the running job's devices (jax.make_mesh
// and mesh_utils.create_device_mesh). A device is an MPI rank; dax orders them row-major by rank,
// so the last mesh axis varies fastest and its groups are consecutive ranks — under mpirun's
// default by-slot placement the ranks of one node, which is where the fastest links are.
#pragma once

#include <string>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/runtime/runtime.hpp>
#include <dax/sharding/mesh.hpp>

namespace dax {

/// The device ids of a mesh of shape `mesh_shape` (row-major), taken from `devices` in order:
/// the first numel(mesh_shape) of them. With no `devices`, the job's ranks 0..size-1.
/// Throws when there are fewer devices than the mesh holds.
inline std::vector<int> create_device_mesh(const Shape& mesh_shape, std::vector<int> devices = {}) {
  if (devices.empty()) {
    devices.resize(static_cast<size_t>(Runtime::current().size()));
    for (size_t i = 0; i < devices.size(); ++i) devices[i] = static_cast<int>(i);
  }
  for (int64_t n : mesh_shape)
    DAX_CHECK(n >= 1, "create_device_mesh: mesh axes must have size >= 1, got mesh shape ", to_string(mesh_shape));
  const int64_t needed = numel(mesh_shape);
  DAX_CHECK(needed <= static_cast<int64_t>(devices.size()), "create_device_mesh: number of devices ",
            devices.size(), " must be >= the product of the mesh shape ", to_string(mesh_shape), " (", needed,
            "); launch with mpirun -np ", needed, " or more");
  devices.resize(static_cast<size_t>(needed));
  return devices;
}

/// A mesh of axis sizes `axis_shapes` named `axis_names` over the job's first numel(axis_shapes)
/// ranks, row-major (jax.make_mesh): make_mesh({4, 2}, {"data", "model"}) on 8 ranks puts ranks
/// 0,1 in the first data row and ranks 0,2,4,6 in the first model column. `devices` picks other
/// ranks (in that order).
inline Mesh make_mesh(const Shape& axis_shapes, std::vector<std::string> axis_names, std::vector<int> devices = {}) {
  DAX_CHECK(axis_shapes.size() == axis_names.size(), "make_mesh: ", axis_shapes.size(), " axis sizes ",
            to_string(axis_shapes), " but ", axis_names.size(), " axis names");
  std::vector<int> ids = create_device_mesh(axis_shapes, std::move(devices));
  Mesh mesh(axis_shapes, std::move(axis_names), std::move(ids));
  Runtime::current().check_mesh(mesh);
  return mesh;
}

}  // namespace dax
