// The enclosing shard_map as the collectives see it: its mesh, this rank's one-device view of it,
// and the named-axis groups (resolved to mesh axes and a communicator ranked in the order named).
#pragma once

#include <dax/core/compiled_mode.hpp>
#include <memory>
#include <string>
#include <vector>

#include <dax/array/dist_array.hpp>
#include <dax/reshard/explain.hpp>
#include <dax/runtime/runtime.hpp>
#include <dax/sharding/partition_spec.hpp>

namespace dax {

/// The mesh axes a collective runs over: one name, or dax::axes("a", "b") (the first major).
class AxisNames {
 public:
  AxisNames(const char* name) : names_{name} {}
  AxisNames(std::string name) : names_{std::move(name)} {}
  AxisNames(AxisTuple tuple) : names_(std::move(tuple.names)) {}
  AxisNames(std::vector<std::string> names) : names_(std::move(names)) {}
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::vector<std::string> names_;
};

namespace detail {

struct ManualContext {
  Mesh mesh;
  NamedSharding local;  // this rank alone, every mesh axis of size 1: local blocks are replicated on it
};

/// The enclosing shard_maps, innermost last. Shared: a gradient's tape keeps the context of the
/// body it recorded, and re-enters it to run that body's pullbacks (which use its collectives).
inline std::vector<std::shared_ptr<const ManualContext>>& manual_stack() {
  thread_local std::vector<std::shared_ptr<const ManualContext>> stack;
  return stack;
}

inline const ManualContext& manual_context(const char* op) {
  DAX_CHECK(!manual_stack().empty(), op, ": called outside dax::shard_map; collectives over named mesh axes "
            "exist only inside a mapped function");
  return *manual_stack().back();
}

/// Makes `ctx` the enclosing context while alive. A shard_map body may not hold another one; the
/// backward re-enters a recorded body's context (`nested_ok`), wherever the gradient is taken.
class ManualScope {
 public:
  explicit ManualScope(std::shared_ptr<const ManualContext> ctx, bool nested_ok = false) {
    DAX_CHECK(nested_ok || manual_stack().empty(), "shard_map: a shard_map inside another shard_map is not supported");
    manual_stack().push_back(std::move(ctx));
  }
  ~ManualScope() { manual_stack().pop_back(); }
  ManualScope(const ManualScope&) = delete;
  ManualScope& operator=(const ManualScope&) = delete;
};

/// The one-device view of `mesh` on this rank.
inline NamedSharding local_view(const Mesh& mesh, int rank) {
  return NamedSharding(Mesh(Shape(mesh.num_axes(), 1), mesh.axis_names(), {rank}), P());
}

/// The devices of one named-axis group, as seen by this rank.
struct AxisGroup {
  const ManualContext* ctx;
  std::vector<int> axes;  // mesh axes, in the order named
  int size = 1;           // devices in the group
  int index = 0;          // this rank's position in it (first named axis major)

  Communicator& comm() const { return Runtime::current().group(ctx->mesh, axes); }
  /// The group's mesh axes as bits (replication typing, array/trace.hpp).
  uint64_t mask() const {
    uint64_t m = 0;
    for (int a : axes) m |= uint64_t{1} << a;
    return m;
  }
  std::string text() const { return axes_text(ctx->mesh, axes); }
};

DAX_OUTLINE AxisGroup axis_group(const AxisNames& names, const char* op)
#if DAX_HEADER_DEFINITIONS
{
  const ManualContext& ctx = manual_context(op);
  DAX_CHECK(!names.names().empty(), op, ": needs at least one mesh axis name");
  AxisGroup g{&ctx, {}, 1, 0};
  const auto coords = ctx.mesh.coords(Runtime::current().rank());
  for (const std::string& name : names.names()) {
    const int a = ctx.mesh.find_axis(name);
    DAX_CHECK(a >= 0, op, ": no mesh axis named '", name, "' in ", to_string(ctx.mesh));
    for (int b : g.axes) DAX_CHECK(b != a, op, ": mesh axis '", name, "' is named twice");
    g.axes.push_back(a);
    g.size *= static_cast<int>(ctx.mesh.axis_size(a));
    g.index = g.index * static_cast<int>(ctx.mesh.axis_size(a)) + static_cast<int>(coords[a]);
  }
  return g;
}
#else
;
#endif

/// The mesh axes named by the bits of `mask`, in mesh order.
inline AxisNames axes_of_mask(const Mesh& mesh, uint64_t mask) {
  std::vector<std::string> names;
  for (int a = 0; a < mesh.num_axes(); ++a)
    if (mask & (uint64_t{1} << a)) names.push_back(mesh.axis_names()[a]);
  return AxisNames(std::move(names));
}

/// Throws unless `x` is a local block of the enclosing shard_map.
template <class T>
void check_local_block(const DistArray<T>& x, const AxisGroup& g, const char* op) {
  DAX_CHECK(x.sharding().mesh() == g.ctx->local.mesh(), op, ": expects a local block inside dax::shard_map "
            "(an array on this device's view of the mesh), got an array on ", to_string(x.sharding().mesh()));
}

}  // namespace detail

/// The sharding of local blocks inside the enclosing shard_map (this device alone), for arrays the
/// mapped function creates: dax::zeros<float>({4, 4}, dax::local_sharding()).
inline const NamedSharding& local_sharding() { return detail::manual_context("local_sharding").local; }

}  // namespace dax
