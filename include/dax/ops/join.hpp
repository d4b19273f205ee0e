// slice (static start/stop/step), concatenate and stack. A slice keeps its input's spec: a split
// dimension stays split over the same mesh axes (pieces by the ceil-chunk rule for its new length),
// and each device receives only the kept elements of its new piece that it does not hold (one
// all-to-all over the axes of the dimensions where some do; nothing when none do). Its cotangent
// moves the same elements back. Joining along a split dimension gathers that dimension first; the
// other dimensions keep their split, so joining along an unsplit dimension communicates nothing.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <dax/array/reshard.hpp>
#include <dax/array/slice_program.hpp>
#include <dax/array/trace.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/ops/functors.hpp>
#include <dax/ops/shape.hpp>
#include <dax/reshard/slice_exchange.hpp>
#include <dax/sharding/build.hpp>

namespace dax {
namespace detail {

/// The cotangent of a unit-step slice: g placed at `lo` inside zeros of `shape`, laid out like the
/// slice's input `x_sharding` (unreduced where g is): the slice's exchange reversed, so the
/// elements of g whose owner in x's layout differs, and only those, move.
template <class T>
DistArray<T> pad_into(const DistArray<T>& g_in, const Shape& shape, const std::vector<int64_t>& lo,
                      const NamedSharding& x_sharding) {
  const size_t n = shape.size();
  // g's splits are normally x's already (the slice kept them); bring any other layout to them,
  // reducing partial sums over an axis that splits x.
  std::vector<int> unreduced;
  for (int a : g_in.sharding().unreduced_axes())
    if (!x_sharding.splits(a)) unreduced.push_back(a);
  const NamedSharding s = make_sharding(x_sharding.mesh(), dims_of(x_sharding, n), unreduced);
  const DistArray<T> g = moved_to(g_in, s);
  if (!g.is_addressable()) return DistArray<T>(shape, s, nullptr);
  const ProfiledOp profiled("pad", g);
  const auto program = window_step(Window{shape, lo, std::vector<int64_t>(n, 1), g.shape()}, s, false, sizeof(T));
  const OpLabel label([&] {
    return cat("slice's cotangent ", to_string(g.shape()), " into ", to_string(shape), " ", to_string(s.spec()));
  });
  return DistArray<T>(shape, s, run_step<T>(*program, g.buffer()));
}

/// The window x[start:stop:step] takes of an array of shape `whole` (missing entries take the whole
/// dimension; negative indices count from its end; bounds are clamped to it; step > 0).
inline Window slice_window(const Shape& whole, const std::vector<int64_t>& start, const std::vector<int64_t>& stop,
                           std::vector<int64_t> step) {
  const size_t n = whole.size();
  DAX_CHECK(start.size() <= n && stop.size() == start.size(), "slice: ", start.size(), " starts and ", stop.size(),
            " stops for an array of rank ", n);
  step.resize(start.size(), 1);
  Window w{whole, std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 1), whole};
  for (size_t d = 0; d < start.size(); ++d) {
    DAX_CHECK(step[d] > 0, "slice: step must be positive, got ", step[d], " for dimension ", d);
    const int64_t a = std::clamp<int64_t>(start[d] < 0 ? start[d] + whole[d] : start[d], 0, whole[d]);
    const int64_t b = std::clamp<int64_t>(stop[d] < 0 ? stop[d] + whole[d] : stop[d], 0, whole[d]);
    w.shape[d] = b > a ? (b - a + step[d] - 1) / step[d] : 0;
    w.lo[d] = a;
    w.step[d] = step[d];
  }
  return w;
}

}  // namespace detail

/// x[start:stop:step] along each dimension (missing entries take the whole dimension; step > 0).
/// The result keeps x's sharding: each device receives only the kept elements of its new piece
/// that it does not hold (nothing at all when only unsplit dimensions are sliced).
template <class T>
DistArray<T> slice(const DistArray<T>& x, const std::vector<int64_t>& start, const std::vector<int64_t>& stop,
                   std::vector<int64_t> step = {}) {
  const size_t n = x.ndim();
  const detail::Window w = detail::slice_window(x.shape(), start, stop, std::move(step));
  const Shape& shape = w.shape;
  const std::vector<int64_t>& lo = w.lo;
  const std::vector<int64_t>& by = w.step;
  const NamedSharding& s = x.sharding();
  const auto record_slice = [](DistArray<T>& out, const DistArray<T>& x, const std::vector<int64_t>& lo,
                                 const std::vector<int64_t>& by) {
    detail::record("slice", out, [&](auto) {
      for (int64_t b : by)
        DAX_CHECK(b == 1, "slice: no gradient rule for a strided slice (step ", b, "); slice with step 1");
      return [from = x.shape(), lo, xs = x.sharding()](const DistArray<T>& g) {
        return detail::Cotangents{detail::AnyArray(detail::pad_into(g, from, lo, xs))};
      };
    }, x);
  };
  if (!x.is_addressable()) {
    DistArray<T> out(shape, s, nullptr);
    record_slice(out, x, lo, by);
    return out;
  }
  const detail::ProfiledOp profiled("slice", x);
  const auto program = detail::window_step(w, s, true, sizeof(T));
  const detail::Exchange& ex = program->ex;
  const Box& src = x.local_index();
  // Reads the window's region `region` (result indices, inside what this device holds) of the
  // local input into a new row-major buffer of its shape: one strided read.
  const auto read_kept = [&](const Box& region) {
    auto to = detail::dev::allocate(numel(region) * sizeof(T));
    if (numel(region) == 0) return to;
    std::vector<int64_t> strides(n);
    int64_t base = 0, stride = 1;
    for (size_t d = n; d-- > 0;) {
      base += (lo[d] + region[d].start * by[d] - src[d].start) * stride;
      strides[d] = by[d] * stride;
      stride *= src[d].size();
    }
    detail::dev::broadcast_map(static_cast<T*>(to->data()), box_shape(region), {std::move(strides)},
                               detail::fn::Identity{}, x.local_data().data() + base);
    return to;
  };
  std::shared_ptr<detail::Buffer> buffer;
  if (!program->comm) {  // every device holds its whole new piece
    buffer = read_kept(ex.to_block);
  } else {
    const detail::OpLabel label([&] {
      return detail::cat("slice ", to_string(x.shape()), " ", to_string(dtype_v<T>), " ", to_string(s.spec()), " -> ",
                         to_string(shape));
    });
    // With unit steps the local input is the exchange's source as it is; a strided window's kept
    // elements are gathered into one dense block first (the step's from_block).
    buffer = detail::run_step<T>(*program, detail::unit_step(w) ? x.buffer() : read_kept(ex.from_block));
  }
  DistArray<T> out_array(shape, s, std::move(buffer));
  record_slice(out_array, x, lo, by);
  return out_array;
}

namespace detail {

/// x placed at the start of zeros of `shape` (each dimension as long or longer), in x's layout:
/// split dimensions stay split, and only the elements whose owner changes move (NumPy's n / s
/// padding, jnp.pad's zeros at the end). Its cotangent is the slice back.
template <class T>
DistArray<T> padded_with_zeros(const DistArray<T>& x, const Shape& shape) {
  const std::vector<int64_t> lo(x.ndim(), 0);
  DistArray<T> out = pad_into(x, shape, lo, x.sharding());
  record("pad", out, [&](auto) {
    return [lo, stop = x.shape()](const DistArray<T>& g) {
      return Cotangents{AnyArray(dax::slice(g, lo, std::vector<int64_t>(stop.begin(), stop.end())))};
    };
  }, x);
  return out;
}

/// x[..., lo:hi, ...] along `dim`, without a copy where that is one contiguous run of this device's
/// piece (every dimension before `dim` of extent 1 here, `dim` and the ones after it unsplit, no
/// pending sums, nothing recorded): then a view into x's buffer, which keeps all of it alive.
/// Otherwise slice's copy. For a kernel's operands inside a rule's body, where x outlives them
/// anyway (ring attention's chunks of a block).
template <class T>
DistArray<T> window_along(const DistArray<T>& x, size_t dim, int64_t lo, int64_t hi) {
  const Shape& shape = x.shape();
  const size_t n = shape.size();
  DAX_CHECK(dim < n && 0 <= lo && lo <= hi && hi <= shape[dim], "window_along: expected [lo, hi) inside dimension ",
            dim, " of ", to_string(shape), ", got [", lo, ", ", hi, ")");
  bool view = x.is_addressable() && !tracing(x) && x.sharding().unreduced_axes().empty();
  for (size_t d = 0; view && d < n; ++d)
    view = d < dim ? x.local_index()[d].size() == 1 : x.sharding().dim_axes(d).empty();
  std::vector<int64_t> start(n, 0), stop(shape.begin(), shape.end());
  start[dim] = lo, stop[dim] = hi;
  if (!view) return dax::slice(x, start, stop);
  int64_t inner = 1;
  for (size_t d = dim + 1; d < n; ++d) inner *= shape[d];
  Shape window = shape;
  window[dim] = hi - lo;
  const size_t item = sizeof(T);
  return DistArray<T>(window, x.sharding(),
                      make_view(x.buffer(), static_cast<size_t>(lo * inner) * item, static_cast<size_t>((hi - lo) * inner) * item));
}

/// acc[..., lo:lo + x.shape()[dim], ...] += x on this device's piece, in place when acc's buffer is
/// its handle's alone, not a view and not a swapped piece's row-major copy (which the array's
/// copies share); else into a copy of it, which acc then holds. acc and x are laid out alike
/// apart from `dim`, which neither splits; nothing is recorded. For an accumulator in a rule's
/// body that sums windows of itself (ring attention's gradients of a block, chunk by chunk).
template <class T>
void add_into_window(DistArray<T>& acc, const DistArray<T>& x, size_t dim, int64_t lo) {
  const size_t n = static_cast<size_t>(acc.ndim());
  bool fits = static_cast<size_t>(x.ndim()) == n && dim < n && lo >= 0 && lo + x.shape()[dim] <= acc.shape()[dim] &&
              acc.sharding().mesh() == x.sharding().mesh() && acc.sharding().unreduced_axes().empty() &&
              x.sharding().unreduced_axes().empty();
  for (size_t d = 0; fits && d < n; ++d)
    fits = d == dim ? acc.sharding().dim_axes(d).empty() && x.sharding().dim_axes(d).empty()
                    : acc.shape()[d] == x.shape()[d] && acc.sharding().dim_axes(d) == x.sharding().dim_axes(d);
  DAX_CHECK(fits, "add_into_window: expected a window of ", to_string(acc.shape()), " ", to_string(acc.sharding().spec()),
            " along unsplit dimension ", dim, " from ", lo, ", got ", to_string(x.shape()), " ",
            to_string(x.sharding().spec()));
  if (!acc.is_addressable()) return;
  const size_t bytes = static_cast<size_t>(numel(acc.local_index())) * sizeof(T);
  if (acc.stores_swapped() || acc.buffer().use_count() != 1 || acc.buffer()->is_view()) {
    auto own = dev::allocate(bytes);
    dev::copy(own->data(), acc.buffer()->data(), bytes);
    acc = DistArray<T>(acc.shape(), acc.sharding(), std::move(own));
  }
  Box from = x.local_index();  // in acc's indices
  from[dim] = Slice{from[dim].start + lo, from[dim].stop + lo};
  dev::copy_region(x.local_data().data(), from, static_cast<T*>(acc.buffer()->data()), acc.local_index(), from,
                   CopyMode::add);
}

}  // namespace detail

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
    parts.push_back(detail::operand_to(x, s, "concatenate"));
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
