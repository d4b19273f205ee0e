// slice (static start/stop/step), concatenate and stack. Slicing or joining along a split
// dimension gathers that dimension first; other dimensions keep their split, so slicing or
// joining along an unsplit dimension communicates nothing.
#pragma once

#include <vector>

#include <dax/array/reshard.hpp>
#include <dax/array/trace.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/ops/functors.hpp>
#include <dax/ops/shape.hpp>
#include <dax/sharding/build.hpp>

namespace dax {
namespace detail {

/// The cotangent of a unit-step slice: g placed at `lo` inside zeros of `shape` (each device writes
/// its own piece; the sliced dimensions are unsplit in g, the others split alike).
template <class T>
DistArray<T> pad_into(const DistArray<T>& g, const Shape& shape, const std::vector<int64_t>& lo) {
  const NamedSharding& s = g.sharding();
  if (!g.is_addressable()) return DistArray<T>(shape, s, nullptr);
  const Box piece = s.device_indices(Runtime::current().rank(), shape);
  auto buffer = dev::allocate(numel(piece) * sizeof(T));
  dev::fill(static_cast<T*>(buffer->data()), numel(piece), T(0));
  if (numel(g.local_index()) > 0) {
    Box placed = g.local_index();
    for (size_t d = 0; d < lo.size(); ++d) placed[d] = {placed[d].start + lo[d], placed[d].stop + lo[d]};
    dev::copy_region(g.local_data().data(), placed, static_cast<T*>(buffer->data()), piece, placed);
  }
  return DistArray<T>(shape, s, std::move(buffer));
}

}  // namespace detail

/// x[start:stop:step] along each dimension (missing entries take the whole dimension; step > 0).
template <class T>
DistArray<T> slice(const DistArray<T>& x, const std::vector<int64_t>& start, const std::vector<int64_t>& stop,
                   std::vector<int64_t> step = {}) {
  const size_t n = x.ndim();
  DAX_CHECK(start.size() <= n && stop.size() == start.size(), "slice: ", start.size(), " starts and ", stop.size(),
            " stops for an array of rank ", n);
  step.resize(start.size(), 1);
  Shape shape = x.shape();
  std::vector<int64_t> lo(n, 0), by(n, 1);
  NamedSharding s = x.sharding();
  for (size_t d = 0; d < start.size(); ++d) {
    DAX_CHECK(step[d] > 0, "slice: step must be positive, got ", step[d], " for dimension ", d);
    const int64_t a = std::clamp<int64_t>(start[d] < 0 ? start[d] + x.shape()[d] : start[d], 0, x.shape()[d]);
    const int64_t b = std::clamp<int64_t>(stop[d] < 0 ? stop[d] + x.shape()[d] : stop[d], 0, x.shape()[d]);
    shape[d] = b > a ? (b - a + step[d] - 1) / step[d] : 0;
    lo[d] = a;
    by[d] = step[d];
    if (shape[d] != x.shape()[d] || a != 0) s = detail::unsplit(s, n, d);
  }
  const auto record_slice = [](DistArray<T>& out, const DistArray<T>& x, const std::vector<int64_t>& lo,
                                 const std::vector<int64_t>& by) {
    detail::record("slice", out, [&](auto) {
      for (int64_t b : by)
        DAX_CHECK(b == 1, "slice: no gradient rule for a strided slice (step ", b, "); slice with step 1");
      return [from = x.shape(), lo](const DistArray<T>& g) {
        return detail::Cotangents{detail::AnyArray(detail::pad_into(g, from, lo))};
      };
    }, x);
  };
  const DistArray<T> in = detail::moved_to(x, s);
  if (!in.is_addressable()) {
    DistArray<T> out(shape, s, nullptr);
    record_slice(out, x, lo, by);
    return out;
  }
  const Box piece = s.device_indices(Runtime::current().rank(), shape);
  const Box src = in.local_index();
  auto buffer = detail::dev::allocate(numel(piece) * sizeof(T));
  if (numel(piece) == 0) {
    DistArray<T> out(shape, s, std::move(buffer));
    record_slice(out, x, lo, by);
    return out;
  }
  // out[j] = in[lo + (piece.start + j) * step] (indices relative to each piece): one strided read,
  // its offset and strides in the local input.
  std::vector<int64_t> strides(n);
  int64_t base = 0, stride = 1;
  for (size_t d = n; d-- > 0;) {
    base += (lo[d] + piece[d].start * by[d] - src[d].start) * stride;
    strides[d] = by[d] * stride;
    stride *= src[d].size();
  }
  detail::dev::broadcast_map(static_cast<T*>(buffer->data()), box_shape(piece), {std::move(strides)}, detail::fn::Identity{},
                             in.local_data().data() + base);
  DistArray<T> out(shape, s, std::move(buffer));
  record_slice(out, x, lo, by);
  return out;
}

/// The arrays joined along `axis` (same mesh; equal shapes elsewhere). The result is laid out like
/// the first array with `axis` unsplit.
template <class T>
DistArray<T> concatenate(const std::vector<DistArray<T>>& xs, int axis = 0) {
  DAX_CHECK(!xs.empty(), "concatenate: no arrays given");
  const size_t n = xs[0].ndim();
  const size_t d = detail::normalize_dim(axis, static_cast<int>(n), "concatenate");
  Shape shape = xs[0].shape();
  shape[d] = 0;
  for (const auto& x : xs) {
    Shape other = x.shape(), first = xs[0].shape();
    DAX_CHECK(other.size() == n, "concatenate: ranks differ: ", to_string(first), " and ", to_string(other));
    other[d] = first[d] = 0;
    DAX_CHECK(other == first, "concatenate: shapes ", to_string(xs[0].shape()), " and ", to_string(x.shape()),
              " differ off axis ", d);
    shape[d] += x.shape()[d];
  }
  const NamedSharding s = detail::unsplit(detail::with_unreduced_axes(xs[0].sharding(), n, {}), n, d);
  std::vector<DistArray<T>> parts;
  for (const auto& x : xs) {
    // Each part laid out like the result (its own shape), reduced.
    parts.push_back(detail::moved_to(x, s));
  }
  if (!parts[0].is_addressable()) return DistArray<T>(shape, s, nullptr);
  const Box piece = s.device_indices(Runtime::current().rank(), shape);
  auto buffer = detail::dev::allocate(numel(piece) * sizeof(T));
  int64_t offset = 0;
  for (const auto& p : parts) {
    Box region = p.local_index();  // the part's piece, in its own coordinates
    Box placed = region;
    placed[d] = {region[d].start + offset, region[d].stop + offset};
    // Copy the part's piece into the result's piece at its offset along `d`.
    Box src_block = region;
    src_block[d] = placed[d];
    detail::dev::copy_region(p.local_data().data(), src_block, static_cast<T*>(buffer->data()), piece, placed);
    offset += p.shape()[d];
  }
  DistArray<T> out(shape, s, std::move(buffer));
  detail::record_list("concatenate", out, [&](const std::vector<bool>& need) {
    std::vector<Shape> shapes;
    for (const auto& x : xs) shapes.push_back(x.shape());
    return [need, shapes, d](const DistArray<T>& g) {  // each input's cotangent is its slice of g
      detail::Cotangents out;
      int64_t at = 0;
      for (size_t i = 0; i < shapes.size(); ++i) {
        std::vector<int64_t> start(d + 1, 0), stop(d + 1);
        for (size_t k = 0; k < d; ++k) stop[k] = shapes[i][k];
        start[d] = at;
        stop[d] = at + shapes[i][d];
        at = stop[d];
        out.push_back(need[i] ? detail::AnyArray(slice(g, start, stop)) : detail::AnyArray());
      }
      return out;
    };
  }, xs);
  return out;
}

/// The arrays (equal shapes) stacked along a new dimension `axis`.
template <class T>
DistArray<T> stack(const std::vector<DistArray<T>>& xs, int axis = 0) {
  DAX_CHECK(!xs.empty(), "stack: no arrays given");
  const int d = detail::normalize_dim(axis, xs[0].ndim() + 1, "stack");
  std::vector<DistArray<T>> expanded;
  for (const auto& x : xs) expanded.push_back(expand_dims(x, d));
  return concatenate(expanded, d);
}

}  // namespace dax
