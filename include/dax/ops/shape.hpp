// Shape ops that need no data movement beyond what their sharding forces: expand_dims, squeeze
// (dimensions of 1, relabelled in place), broadcast_to (each device stretches its own piece).
// transpose lives in array/transpose.hpp (x.T() needs it).
#pragma once

#include <algorithm>
#include <vector>

#include <dax/array/reshard.hpp>
#include <dax/array/trace.hpp>
#include <dax/array/transpose.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/ops/functors.hpp>
#include <dax/ops/elementwise_rule.hpp>
#include <dax/ops/elementwise_vjp.hpp>
#include <dax/sharding/build.hpp>

namespace dax {
namespace detail {

/// The same data under another shape and sharding (only for inserting or dropping dimensions of
/// size 1 that no mesh axis splits: the local piece's bytes are unchanged).
template <class T>
DistArray<T> relabel(const DistArray<T>& x, Shape shape, NamedSharding sharding) {
  return DistArray<T>(std::move(shape), std::move(sharding), x.buffer());
}

/// x with a dimension of 1 inserted at `dim`, unsplit.
template <class T>
DistArray<T> insert_unit_dim(const DistArray<T>& x, size_t dim) {
  Shape shape = x.shape();
  shape.insert(shape.begin() + dim, 1);
  auto dims = dims_of(x.sharding(), x.ndim());
  dims.insert(dims.begin() + dim, std::vector<int>{});
  return relabel(x, shape, make_sharding(x.sharding().mesh(), dims, x.sharding().unreduced_axes()));
}

/// x without its unsplit dimension of 1 at `dim`.
template <class T>
DistArray<T> drop_unit_dim(const DistArray<T>& x, size_t dim) {
  Shape shape = x.shape();
  shape.erase(shape.begin() + dim);
  auto dims = dims_of(x.sharding(), x.ndim());
  dims.erase(dims.begin() + dim);
  return relabel(x, shape, make_sharding(x.sharding().mesh(), dims, x.sharding().unreduced_axes()));
}

/// `s` with dimension `dim` unsplit.
inline NamedSharding unsplit(const NamedSharding& s, size_t ndim, size_t dim) {
  auto dims = dims_of(s, ndim);
  dims[dim].clear();
  return make_sharding(s.mesh(), dims, s.unreduced_axes());
}

inline int normalize_dim(int d, int rank, const char* op) {
  DAX_CHECK(d >= -rank && d < rank, op, ": axis ", d, " is out of range for rank ", rank);
  return d < 0 ? d + rank : d;
}

/// g stretched to `shape` and laid out like `target` (its dimensions' splits), each device
/// stretching its own piece: the backward of a reduction or a broadcast, which must not replicate
/// a cotangent the forward value had sharded. g's partial sums stay unreduced (stretching is
/// linear) unless `target` splits a dimension over one of those axes; then g is reduced first.
template <class T>
DistArray<T> broadcast_in(const DistArray<T>& g, const Shape& shape, const NamedSharding& target) {
  const Mesh& mesh = target.mesh();
  const size_t lead = shape.size() - g.shape().size();
  std::vector<int> unreduced = g.sharding().unreduced_axes();
  auto dims = dims_of(target, shape.size());
  for (const auto& d : dims)
    for (int a : d)
      if (has_axis(unreduced, a)) unreduced.clear();
  std::vector<std::vector<int>> g_dims(g.shape().size());
  for (size_t d = 0; d < g_dims.size(); ++d)
    if (g.shape()[d] == shape[lead + d]) g_dims[d] = dims[lead + d];
  const NamedSharding out = make_sharding(mesh, dims, unreduced);
  const DistArray<T> in = moved_to(g, make_sharding(mesh, g_dims, unreduced));
  if (!in.is_addressable()) return DistArray<T>(shape, out, nullptr);
  const Shape local = box_shape(out.device_indices(Runtime::current().rank(), shape));
  auto buffer = dev::allocate(numel(local) * sizeof(T));
  dev::broadcast_map(static_cast<T*>(buffer->data()), local, {broadcast_strides(in.local_shape(), local)},
                     fn::Identity{}, in.local_data().data());
  return DistArray<T>(shape, out, std::move(buffer));
}

}  // namespace detail

/// x with a new dimension of 1 at `dim` (negative counts from the end of the result).
template <class T>
DistArray<T> expand_dims(const DistArray<T>& x, int dim) {
  const int d = detail::normalize_dim(dim, x.ndim() + 1, "expand_dims");
  auto out = detail::insert_unit_dim(x, d);
  detail::record("expand_dims", out, [&](auto) {
    return [d](const DistArray<T>& g) { return detail::Cotangents{detail::AnyArray(squeeze(g, {d}))}; };
  }, x);
  return out;
}

/// x without its dimensions of 1 listed in `dims` (all of them when empty). A split dimension of 1
/// is gathered first.
template <class T>
DistArray<T> squeeze(const DistArray<T>& x, std::vector<int> dims = {}) {
  if (dims.empty())
    for (int d = 0; d < x.ndim(); ++d)
      if (x.shape()[d] == 1) dims.push_back(d);
  std::vector<bool> seen(x.ndim(), false);
  for (int& d : dims) {
    d = detail::normalize_dim(d, x.ndim(), "squeeze");
    DAX_CHECK(x.shape()[d] == 1, "squeeze: dimension ", d, " of ", to_string(x.shape()), " is not of size 1");
    DAX_CHECK(!seen[d], "squeeze: dimension ", d, " is given twice");
    seen[d] = true;
  }
  NamedSharding unsplit_dims = x.sharding();
  for (int d : dims) unsplit_dims = detail::unsplit(unsplit_dims, x.ndim(), d);
  DistArray<T> y = detail::operand_to(x, unsplit_dims, "squeeze");
  std::sort(dims.rbegin(), dims.rend());
  for (int d : dims) y = detail::drop_unit_dim(y, d);
  detail::record("squeeze", y, [&](auto) {
    return [shape = x.shape()](const DistArray<T>& g) { return detail::Cotangents{detail::AnyArray(reshape(g, shape))}; };
  }, x);
  return y;
}

/// x stretched to `shape` by NumPy's rules; stretched dimensions are replicated.
template <class T>
DistArray<T> broadcast_to(const DistArray<T>& x, const Shape& shape) {
  const Mesh& mesh = x.sharding().mesh();
  const NamedSharding whole = detail::make_sharding(mesh, std::vector<std::vector<int>>(shape.size()), {});
  // The elementwise rule with a stand-in operand of the target shape; stretching is exact on
  // partial sums, so x may stay unreduced.
  const detail::ElementwiseRule rule =
      detail::elementwise_rule({x.shape(), shape}, {x.sharding(), whole}, detail::Linearity::scaling);
  DAX_CHECK(rule.out_shape == shape, "broadcast_to: ", to_string(x.shape()), " does not broadcast to ",
            to_string(shape));
  const DistArray<T> in = detail::operand_to(x, rule.inputs[0], "broadcast_to");
  if (!in.is_addressable()) return DistArray<T>(shape, rule.output, nullptr);
  const Shape local = box_shape(rule.output.device_indices(Runtime::current().rank(), shape));
  auto buffer = detail::dev::allocate(numel(local) * sizeof(T));
  detail::dev::broadcast_map(static_cast<T*>(buffer->data()), local,
                             {detail::broadcast_strides(in.local_shape(), local)}, detail::fn::Identity{},
                             in.local_data().data());
  DistArray<T> out(shape, rule.output, std::move(buffer));
  detail::record("broadcast_to", out, [&](auto) {
    return [from = x.shape()](const DistArray<T>& g) { return detail::Cotangents{detail::AnyArray(detail::sum_to(g, from))}; };
  }, x);
  return out;
}

}  // namespace dax
