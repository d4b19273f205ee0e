// take (gather rows of a table by integer ids) and one_hot. Both keep the table's / the depth's
// split where it is and never gather a table:
// - take(table, ids, axis): each device looks its ids up in the rows it holds (ids outside them
//   read zeros), so with the indexed dimension split over mesh axes A the local results are
//   partial sums over A, reduced by one all-reduce (Megatron's vocab-parallel embedding), or by a
//   reduce-scatter when `out` splits the result over A (sequence parallelism's embedding). The
//   other table dimensions keep their splits; ids keep theirs except over axes the table uses.
//   Its VJP is a scatter-add into the rows each device holds: no communication, the cotangent left
//   unreduced over the axes that split the ids (reduced once, with the other gradients).
// - one_hot(ids, depth, split): each device builds its own columns of the depth dimension.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <dax/array/creation.hpp>
#include <dax/array/reshard.hpp>
#include <dax/array/trace.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/ops/functors.hpp>
#include <dax/ops/rule_cache.hpp>
#include <dax/ops/shape.hpp>
#include <dax/sharding/build.hpp>

namespace dax {
namespace detail {

template <class I>
inline constexpr bool is_index_type_v = std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t>;

inline bool uses_axis(const std::vector<std::vector<int>>& dims, int axis) {
  for (const auto& d : dims)
    if (has_axis(d, axis)) return true;
  return false;
}

/// `dims` without the mesh axes in `taken` (they split something else).
inline std::vector<std::vector<int>> without_axes(std::vector<std::vector<int>> dims,
                                                  const std::vector<std::vector<int>>& taken) {
  for (auto& d : dims) std::erase_if(d, [&](int a) { return uses_axis(taken, a); });
  return dims;
}

struct TakeRule {
  Shape out_shape;
  NamedSharding table;    // the table's sharding for the lookup: its own, reduced
  NamedSharding ids;      // the ids': their own, without the axes the table uses
  NamedSharding partial;  // the local lookups: unreduced over the axes splitting the indexed dim
  NamedSharding output;   // `partial` reduced (one all-reduce, or nothing)
};

/// The sharding rule of take (pure).
inline TakeRule take_rule(const Shape& table, const NamedSharding& ts, const Shape& ids, const NamedSharding& is,
                          int axis) {
  const Mesh& mesh = ts.mesh();
  DAX_CHECK(is.mesh() == mesh, "take: table and ids must be on the same mesh, got ", to_string(mesh), " and ",
            to_string(is.mesh()));
  const auto tdims = dims_of(ts, table.size());
  const auto idims = without_axes(dims_of(is, ids.size()), tdims);
  Shape out_shape(table.begin(), table.begin() + axis);
  std::vector<std::vector<int>> odims(tdims.begin(), tdims.begin() + axis);
  out_shape.insert(out_shape.end(), ids.begin(), ids.end());
  odims.insert(odims.end(), idims.begin(), idims.end());
  out_shape.insert(out_shape.end(), table.begin() + axis + 1, table.end());
  odims.insert(odims.end(), tdims.begin() + axis + 1, tdims.end());
  return TakeRule{out_shape, make_sharding(mesh, tdims, {}), make_sharding(mesh, idims, {}),
                  make_sharding(mesh, odims, tdims[axis]), make_sharding(mesh, odims, {})};
}

inline RuleCache<TakeRule>& take_rules() {
  static RuleCache<TakeRule> cache;
  return cache;
}

/// The local piece of `t` (table-shaped) viewed as (outer, rows, inner) around `axis`, and the
/// global index of its first row.
struct RowView {
  int64_t outer = 1, rows = 0, inner = 1, first = 0;
};
inline RowView row_view(const Box& piece, int axis) {
  RowView v;
  for (int d = 0; d < static_cast<int>(piece.size()); ++d) {
    const int64_t n = piece[d].stop - piece[d].start;
    if (d < axis) v.outer *= n;
    else if (d == axis) v.rows = n, v.first = piece[d].start;
    else v.inner *= n;
  }
  return v;
}

}  // namespace detail

/// The slices of `table` along `axis` named by `ids` (int32 or int64, any shape): the result's
/// shape is table's with dimension `axis` replaced by ids' shape (jnp.take(table, ids, axis)).
/// An id outside [0, table.shape()[axis]) gives zeros. Differentiable in `table` (a scatter-add).
/// `out` fixes the result's sharding (as matmul's does), else the rule picks it.
template <class T, class I>
DistArray<T> take(const DistArray<T>& table, const DistArray<I>& ids, int axis = 0,
                  const std::optional<NamedSharding>& out_sharding = std::nullopt) {
  static_assert(detail::is_index_type_v<I>, "dax::take: ids must be int32_t or int64_t");
  DAX_CHECK(table.ndim() >= 1, "take: the table must have rank >= 1, got shape ", to_string(table.shape()));
  axis = detail::normalize_dim(axis, table.ndim(), "take");
  const detail::TakeRule& rule = detail::take_rules().get(
      detail::RuleKey{3100, {table.shape(), ids.shape()}, {table.sharding(), ids.sharding()}, {axis}},
      [&] { return detail::take_rule(table.shape(), table.sharding(), ids.shape(), ids.sharding(), axis); });
  if (out_sharding)
    DAX_CHECK(out_sharding->mesh() == table.sharding().mesh(), "take: out must be on the table's mesh ",
              to_string(table.sharding().mesh()), ", got ", to_string(out_sharding->mesh()));
  const NamedSharding& output = out_sharding ? *out_sharding : rule.output;
  const DistArray<T> tm = detail::operand_to(table, rule.table, "take");
  const DistArray<I> im = detail::operand_to(ids, rule.ids, "take");
  DistArray<T> out = [&] {
    if (!tm.is_addressable()) return DistArray<T>(rule.out_shape, output, nullptr);
    const detail::RowView v = detail::row_view(tm.local_index(), axis);
    const int64_t count = im.local_size();
    auto buffer = detail::dev::allocate(v.outer * count * v.inner * sizeof(T));
    detail::dev::gather_rows(tm.local_data().data(), v.outer, v.rows, v.inner, im.local_data().data(), count, v.first,
                             static_cast<T*>(buffer->data()));
    return detail::moved_to(DistArray<T>(rule.out_shape, rule.partial, std::move(buffer)), output);
  }();
  detail::record("take", out, [&](auto) {
    return [tm, im, axis, partial = rule.partial, n = ids.ndim()](const DistArray<T>& g) {
      // g laid out like the lookup, keeping the partial sums it can: those over axes the lookup
      // does not split by (scatter-add is linear); the rest are reduced first.
      const Mesh& mesh = partial.mesh();
      const auto odims = detail::dims_of(partial, g.ndim());
      const auto tdims = detail::dims_of(tm.sharding(), tm.ndim());
      std::vector<int> keep;
      for (int a : g.sharding().unreduced_axes())
        if (!detail::uses_axis(odims, a) && !detail::uses_axis(tdims, a)) keep.push_back(a);
      const DistArray<T> gm = detail::moved_to(g, detail::make_sharding(mesh, odims, keep));
      // The table's cotangent: partial over the axes that split the ids, and over `keep`.
      std::vector<int> unreduced = keep;
      for (int d = axis; d < axis + n; ++d)
        for (int a : odims[d])
          if (!detail::has_axis(unreduced, a)) unreduced.push_back(a);
      std::sort(unreduced.begin(), unreduced.end());
      const NamedSharding ds = detail::make_sharding(mesh, tdims, unreduced);
      if (!tm.is_addressable()) return detail::Cotangents{detail::AnyArray(DistArray<T>(tm.shape(), ds, nullptr)), detail::AnyArray()};
      const detail::RowView v = detail::row_view(tm.local_index(), axis);
      auto buffer = detail::dev::allocate(tm.local_size() * sizeof(T));
      detail::dev::scatter_add_rows(gm.local_data().data(), v.outer, im.local_size(), v.inner, im.local_data().data(),
                                    v.rows, v.first, static_cast<T*>(buffer->data()));
      return detail::Cotangents{detail::AnyArray(DistArray<T>(tm.shape(), ds, std::move(buffer))), detail::AnyArray()};
    };
  }, table, ids);  // ids: no gradient, but their replication typing (inside shard_map)
  return out;
}

/// ids (int32 or int64, any shape) as one-hot vectors of `depth` elements of type T along a new
/// last dimension: 1 where the column equals the id, else 0 (an id outside [0, depth) gives a row
/// of zeros). `split` splits the depth dimension over mesh axes of ids' mesh: each device builds
/// its own columns, with no communication (ids are gathered over those axes if split over them).
template <class T = float, class I>
DistArray<T> one_hot(const DistArray<I>& ids, int64_t depth, const PartitionSpec::Entry& split = none) {
  static_assert(detail::is_index_type_v<I>, "dax::one_hot: ids must be int32_t or int64_t");
  DAX_CHECK(depth >= 0, "one_hot: depth must be >= 0, got ", depth);
  const Mesh& mesh = ids.sharding().mesh();
  const NamedSharding columns(mesh, P(split));
  const std::vector<std::vector<int>> ddims{columns.dim_axes(0)};
  auto dims = detail::without_axes(detail::dims_of(ids.sharding(), ids.ndim()), ddims);
  const DistArray<I> im = detail::operand_to(ids, detail::make_sharding(mesh, dims, {}), "one_hot");
  dims.push_back(ddims[0]);
  Shape shape = ids.shape();
  shape.push_back(depth);
  const NamedSharding out = detail::make_sharding(mesh, dims, {});
  if (!im.is_addressable()) return DistArray<T>(shape, out, nullptr);
  const DistArray<I> iota = arange<I>(Shape{depth}, detail::make_sharding(mesh, ddims, {}));  // this device's columns
  const Shape local = box_shape(out.device_indices(Runtime::current().rank(), shape));
  Shape ids_local = im.local_shape();
  ids_local.push_back(1);
  auto buffer = detail::dev::allocate(numel(local) * sizeof(T));
  detail::dev::broadcast_map(static_cast<T*>(buffer->data()), local,
                             {detail::broadcast_strides(ids_local, local), detail::broadcast_strides(iota.local_shape(), local)},
                             detail::fn::OneHot<T>{}, im.local_data().data(), iota.local_data().data());
  DistArray<T> result(shape, out, std::move(buffer));
  detail::record_typing("one_hot", result, ids);
  return result;
}

}  // namespace dax
