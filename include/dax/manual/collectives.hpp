// The named-axis collectives of shard_map, with JAX's shape rules: psum / pmean / pmax / pmin,
// all_gather, psum_scatter, all_to_all, all_to_allv (uneven rows), ppermute, pvary, axis_index,
// axis_size. Each takes a local block and runs one collective on the communicator of exactly the
// named axes (members ranked with the first named axis major); the dimension moves around it are
// local transposes.
#pragma once

#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <dax/array/transpose.hpp>
#include <dax/array/profile_hook.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/comm/comm_stats.hpp>
#include <dax/core/call_site.hpp>
#include <dax/manual/context.hpp>
#include <dax/reshard/reduction_axes.hpp>
#include <dax/ops/elementwise.hpp>

namespace dax {
namespace detail {

template <class T>
DistArray<T> local_block(const AxisGroup& g, Shape shape, std::shared_ptr<Buffer> buffer) {
  return DistArray<T>(std::move(shape), g.ctx->local, std::move(buffer));
}

/// Records collective `op` (out from x over group g) for autodiff: it sees its input varying over
/// g's axes (an invariant input is broadcast first; the tape sums its cotangent back), and psum
/// (`reduces`) makes its output invariant over them. make_pullback() returns ct -> x's cotangent.
template <class T, class MakePullback>
void record_collective(const char* op, DistArray<T>& out, const DistArray<T>& x, const AxisGroup& g, bool reduces,
                       MakePullback&& make_pullback) {
  if (!tracing(x)) return;
  Pullback pullback;
  if constexpr (is_differentiable_v<T>) {
    // An empty cotangent means the output reached nothing on this device: the pullback still runs,
    // on zeros, so that its collective meets the other devices' (Varying::collective).
    if (needs_gradient(x))
      pullback = [p = make_pullback(), shape = out.shape(), sharding = out.sharding()](const AnyArray& ct) {
        return Cotangents{AnyArray(p(ct.empty() ? zeros<T>(shape, sharding) : ct.as<T>()))};
      };
  }
  out.set_trace_id(active_tracer()->record(op, {x.trace_id()}, std::move(pullback),
                                           Varying{g.mask(), reduces ? g.mask() : 0, false, true}));
}

/// Runs a collective's data movement with recording off (its internal transposes are not ops of
/// the program); the collective records itself once.
template <class F>
auto untraced(F&& f) {
  NoTrace no_trace;
  return f();
}

/// A local block with dimension `from` moved to position `to`, the others in order.
template <class T>
DistArray<T> move_dim(const DistArray<T>& x, int from, int to) {
  if (from == to) return x;
  std::vector<int> perm;
  for (int i = 0; i < x.ndim(); ++i)
    if (i != from) perm.push_back(i);
  perm.insert(perm.begin() + to, from);
  return transpose(x, perm);
}

/// The same bytes read under another shape (row-major, same element count), as a local block.
template <class T>
DistArray<T> with_shape(const DistArray<T>& x, Shape shape) {
  return DistArray<T>(std::move(shape), manual_context("shard_map").local, x.buffer());
}

/// `dim` of x split into (n, dim / n), the n-part major.
template <class T>
DistArray<T> split_dim(const DistArray<T>& x, int dim, int64_t n) {
  Shape s = x.shape();
  s[dim] /= n;
  s.insert(s.begin() + dim, n);
  return with_shape(x, s);
}

/// Dimensions dim and dim + 1 of x merged into one.
template <class T>
DistArray<T> merge_dims(const DistArray<T>& x, int dim) {
  Shape s = x.shape();
  s[dim] *= s[dim + 1];
  s.erase(s.begin() + dim + 1);
  return with_shape(x, s);
}

template <class T>
std::string manual_label(const char* op, const DistArray<T>& x, const AxisGroup& g) {
  return cat(op, " of ", to_string(x.shape()), " ", to_string(dtype_v<T>), " over ", g.text());
}

/// x cut along `dim` into one part per member of `g`, part j contiguous and j-th along a new
/// leading dimension: `dim` itself (untiled: its size must be the group's) or its n-way split.
template <class T>
DistArray<T> parts_in_front(const DistArray<T>& x, int dim, const AxisGroup& g, bool tiled, const char* op,
                            const char* what) {
  const int64_t n = g.size, extent = x.shape()[dim];
  if (tiled) {
    DAX_CHECK(extent % n == 0, op, ": tiled ", what, " ", dim, " has size ", extent, ", which the ", n,
              " devices of ", g.text(), " do not divide evenly");
    return move_dim(split_dim(x, dim, n), dim, 0);
  }
  DAX_CHECK(extent == n, op, ": ", what, " ", dim, " has size ", extent, " but must equal the ", n, " devices of ",
            g.text(), " (or pass tiled = true)");
  return move_dim(x, dim, 0);
}

inline int dim_in_range(int dim, int count, const char* op, const char* what) {
  DAX_CHECK(dim >= -count && dim < count, op, ": ", what, " ", dim, " is out of range for ", count,
            " position", count == 1 ? "" : "s");
  return dim < 0 ? dim + count : dim;
}

template <class T>
DistArray<T> reduce_over(const DistArray<T>& x, const AxisNames& names, ReduceOp op, const char* name) {
  static_assert(!std::is_same_v<T, bool>, "dax: reductions over mesh axes need a numeric element type");
  const AxisGroup g = axis_group(names, name);
  check_local_block(x, g, name);
  if (op != ReduceOp::sum) no_gradient(name, x);
  DistArray<T> out = local_block<T>(g, x.shape(), x.buffer());
  if (g.size > 1) {
    const OpLabel label([&] { return manual_label(name, x, g); });
    auto reduced = dev::allocate(x.size() * sizeof(T));
    Communicator& comm = g.comm();
    const int64_t started = collective_start();
    comm.all_reduce(x.local_data().data(), reduced->data(), x.size(), dtype_v<T>, op);
    count_collective("all_reduce", g.text(), all_reduce_received(x.size(), g.size) * int64_t(sizeof(T)), started, g.size);
    out = local_block<T>(g, x.shape(), std::move(reduced));
  }
  // psum's transpose is the identity (its output is invariant over the axes, and so is its
  // cotangent); an input invariant over them was broadcast first, which the tape sums back.
  record_collective(name, out, x, g, /*reduces=*/true, [] { return [](const DistArray<T>& ct) { return ct; }; });
  return out;
}

}  // namespace detail

/// The sum of x over every device of the named axes (same shape).
template <class T>
DistArray<T> psum(const DistArray<T>& x, const AxisNames& axes, SourceLine at = SourceLine::current()) {
  const detail::SiteScope site("psum", at);
  return detail::reduce_over(x, axes, detail::ReduceOp::sum, "psum");
}

/// The mean of x over the named axes (integer types divide with truncation, like dax::mean).
template <class T>
DistArray<T> pmean(const DistArray<T>& x, const AxisNames& axes, SourceLine at = SourceLine::current()) {
  const detail::SiteScope site("pmean", at);
  const detail::AxisGroup g = detail::axis_group(axes, "pmean");
  return detail::reduce_over(x, axes, detail::ReduceOp::sum, "pmean") / static_cast<T>(g.size);
}

template <class T>
DistArray<T> pmax(const DistArray<T>& x, const AxisNames& axes, SourceLine at = SourceLine::current()) {
  const detail::SiteScope site("pmax", at);
  return detail::reduce_over(x, axes, detail::ReduceOp::max, "pmax");
}

template <class T>
DistArray<T> pmin(const DistArray<T>& x, const AxisNames& axes, SourceLine at = SourceLine::current()) {
  const detail::SiteScope site("pmin", at);
  return detail::reduce_over(x, axes, detail::ReduceOp::min, "pmin");
}

/// x, typed as varying over the named axes (JAX's pvary): the same data. Replication typing follows
/// the values that enter the body; a value built there from axis_index (or from anything else
/// that differs per device without coming from a split argument) must be marked with pvary for
/// gradients to be right. Its transpose sums the cotangent over the axes.
template <class T>
DistArray<T> pvary(const DistArray<T>& x, const AxisNames& axes) {
  const detail::AxisGroup g = detail::axis_group(axes, "pvary");
  detail::check_local_block(x, g, "pvary");
  DistArray<T> out = detail::local_block<T>(g, x.shape(), x.buffer());
  if (detail::Tracer* tracer = detail::active_tracer()) {
    detail::Pullback pullback;
    if constexpr (detail::is_differentiable_v<T>) {
      if (detail::needs_gradient(x)) pullback = [](const detail::AnyArray& ct) { return detail::Cotangents{ct}; };
    }
    out.set_trace_id(tracer->record("pvary", {x.trace_id()}, std::move(pullback), detail::Varying{g.mask(), 0, false}));
  }
  return out;
}

/// The number of devices over the named axes.
inline int axis_size(const AxisNames& axes) { return detail::axis_group(axes, "axis_size").size; }

/// This device's position over the named axes (first named axis major).
inline int axis_index(const AxisNames& axes) { return detail::axis_group(axes, "axis_index").index; }

/// Every member's block, in member order: stacked as a new dimension `dim` (untiled) or
/// concatenated along `dim` (tiled).
template <class T>
DistArray<T> all_gather(const DistArray<T>& x, const AxisNames& axes, int dim = 0, bool tiled = false,
                        SourceLine at = SourceLine::current()) {
  const detail::SiteScope site("all_gather", at);
  DistArray<T> out = detail::untraced([&]() -> DistArray<T> {
    const detail::AxisGroup g = detail::axis_group(axes, "all_gather");
    detail::check_local_block(x, g, "all_gather");
    const detail::OpLabel label([&] { return detail::manual_label("all_gather", x, g); });
    dim = detail::dim_in_range(dim, x.ndim() + (tiled ? 0 : 1), "all_gather", "dim");
    const int64_t n = g.size;
    Shape stacked = x.shape();
    stacked.insert(stacked.begin(), n);
    auto buffer = detail::dev::allocate(n * x.size() * sizeof(T));
    if (n == 1) {
      detail::dev::copy(buffer->data(), x.local_data().data(), x.local_data().size_bytes());
    } else {
      std::vector<int64_t> counts(n, x.size()), displs(n);
      for (int64_t j = 0; j < n; ++j) displs[j] = j * x.size();
      const int64_t started = detail::collective_start();
      g.comm().all_gatherv(x.local_data().data(), buffer->data(), counts, displs, dtype_v<T>);
      detail::count_collective("all_gather", g.text(), (n - 1) * x.size() * int64_t(sizeof(T)), started, g.size);
    }
    const DistArray<T> moved = detail::move_dim(detail::local_block<T>(g, stacked, std::move(buffer)), 0, dim);
    return tiled ? detail::merge_dims(moved, dim) : moved;
  });
  // Transpose: the sum over the group of each member's cotangent for this member's block.
  detail::record_collective("all_gather", out, x, detail::axis_group(axes, "all_gather"), false, [&] {
    return [axes, dim, tiled](const DistArray<T>& ct) { return psum_scatter(ct, axes, dim, tiled); };
  });
  return out;
}

/// The sum over the named axes, of which each member keeps its block along `scatter_dim`: block i
/// of size 1 dropped (untiled: the dimension must equal the group size) or of size d / n (tiled).
template <class T>
DistArray<T> psum_scatter(const DistArray<T>& x, const AxisNames& axes, int scatter_dim = 0, bool tiled = false,
                          SourceLine at = SourceLine::current()) {
  const detail::SiteScope site("psum_scatter", at);
  DistArray<T> out = detail::untraced([&]() -> DistArray<T> {
    const detail::AxisGroup g = detail::axis_group(axes, "psum_scatter");
    detail::check_local_block(x, g, "psum_scatter");
    const detail::OpLabel label([&] { return detail::manual_label("psum_scatter", x, g); });
    const int d = detail::dim_in_range(scatter_dim, x.ndim(), "psum_scatter", "scatter_dim");
    const int64_t n = g.size;
    const DistArray<T> parts = detail::parts_in_front(x, d, g, tiled, "psum_scatter", "scatter_dim");
    Shape out_shape(parts.shape().begin() + 1, parts.shape().end());
    const int64_t count = numel(out_shape);
    auto piece = detail::dev::allocate(count * sizeof(T));
    if (n == 1) {
      detail::dev::copy(piece->data(), parts.local_data().data(), parts.local_data().size_bytes());
    } else {
      const int64_t started = detail::collective_start();
      g.comm().reduce_scatter(parts.local_data().data(), piece->data(), std::vector<int64_t>(n, count), dtype_v<T>,
                              detail::ReduceOp::sum);
      detail::count_collective("reduce_scatter", g.text(), (n - 1) * count * int64_t(sizeof(T)), started, g.size);
    }
    return detail::local_block<T>(g, std::move(out_shape), std::move(piece));
  });
  // Transpose: every member gets every member's cotangent block back.
  detail::record_collective("psum_scatter", out, x, detail::axis_group(axes, "psum_scatter"), false, [&] {
    return [axes, scatter_dim, tiled](const DistArray<T>& ct) { return all_gather(ct, axes, scatter_dim, tiled); };
  });
  return out;
}

/// Blocks exchanged over the named axes: x's `split_dim` is cut into one part per member (untiled:
/// the dimension must equal the group size and is dropped), part j goes to member j, and the parts
/// received are stacked as a new dimension `concat_dim` (untiled) or concatenated along it (tiled),
/// in member order.
template <class T>
DistArray<T> all_to_all(const DistArray<T>& x, const AxisNames& axes, int split_dim, int concat_dim,
                        bool tiled = false, SourceLine at = SourceLine::current()) {
  const detail::SiteScope site("all_to_all", at);
  DistArray<T> out = detail::untraced([&]() -> DistArray<T> {
    const detail::AxisGroup g = detail::axis_group(axes, "all_to_all");
    detail::check_local_block(x, g, "all_to_all");
    const detail::OpLabel label([&] { return detail::manual_label("all_to_all", x, g); });
    const int split = detail::dim_in_range(split_dim, x.ndim(), "all_to_all", "split_dim");
    const int concat = detail::dim_in_range(concat_dim, x.ndim(), "all_to_all", "concat_dim");
    const int64_t n = g.size;
    const DistArray<T> parts = detail::parts_in_front(x, split, g, tiled, "all_to_all", "split_dim");
    const int64_t count = numel(parts.shape()) / n;
    auto received = detail::dev::allocate(numel(parts.shape()) * sizeof(T));
    if (n == 1) {
      detail::dev::copy(received->data(), parts.local_data().data(), parts.local_data().size_bytes());
    } else {
      std::vector<int64_t> counts(n, count), displs(n);
      for (int64_t j = 0; j < n; ++j) displs[j] = j * count;
      const int64_t started = detail::collective_start();
      g.comm().all_to_allv(parts.local_data().data(), counts, displs, received->data(), counts, displs, dtype_v<T>);
      detail::count_collective("all_to_all", g.text(), (n - 1) * count * int64_t(sizeof(T)), started, g.size);
    }
    const DistArray<T> moved =
        detail::move_dim(detail::local_block<T>(g, parts.shape(), std::move(received)), 0, concat);
    return tiled ? detail::merge_dims(moved, concat) : moved;
  });
  // Transpose: the reverse exchange, with the split and concatenated dimensions swapped.
  detail::record_collective("all_to_all", out, x, detail::axis_group(axes, "all_to_all"), false, [&] {
    return [axes, split_dim, concat_dim, tiled](const DistArray<T>& ct) {
      return all_to_all(ct, axes, concat_dim, split_dim, tiled);
    };
  });
  return out;
}

/// What each member of the named axes sends this one in all_to_allv, from what this one sends each
/// (one small exchange of the counts).
inline std::vector<int64_t> all_to_allv_counts(const std::vector<int64_t>& send_counts, const AxisNames& axes) {
  const detail::AxisGroup g = detail::axis_group(axes, "all_to_allv");
  DAX_CHECK(static_cast<int>(send_counts.size()) == g.size, "all_to_allv: expected ", g.size,
            " send counts (one per member of ", g.text(), "), got ", send_counts.size());
  for (int64_t c : send_counts) DAX_CHECK(c >= 0, "all_to_allv: expected counts >= 0, got ", c);
  if (g.size == 1) return send_counts;
  const std::vector<int64_t> all = g.comm().host().all_gather_host(send_counts);  // member-major
  std::vector<int64_t> recv(static_cast<size_t>(g.size));
  for (int j = 0; j < g.size; ++j) recv[size_t(j)] = all[size_t(j) * size_t(g.size) + size_t(g.index)];
  return recv;
}

/// Rows exchanged over the named axes in uneven counts (a mixture of experts' token dispatch, MPI's
/// Alltoallv): x's first dimension holds, in member order, `send_counts[j]` rows for member j (they
/// sum to x's first dimension); the result holds the rows every member sent this one, in member
/// order. `recv_counts` (what each member sends here) may be given; else one small exchange of the
/// counts finds them (all_to_allv_counts). Bytes received: the rows that come from other members.
/// The transpose sends the cotangent's rows back with the counts swapped.
template <class T>
DistArray<T> all_to_allv(const DistArray<T>& x, const AxisNames& axes, const std::vector<int64_t>& send_counts,
                         std::vector<int64_t> recv_counts = {}, SourceLine at = SourceLine::current()) {
  const detail::SiteScope site("all_to_allv", at);
  if (recv_counts.empty()) recv_counts = all_to_allv_counts(send_counts, axes);
  DistArray<T> out = detail::untraced([&]() -> DistArray<T> {
    const detail::AxisGroup g = detail::axis_group(axes, "all_to_allv");
    detail::check_local_block(x, g, "all_to_allv");
    // Each member sends its own number of rows: the label (compared across the group when calls
    // are checked) names the rows' shape, not their count.
    const detail::OpLabel label([&] {
      return detail::cat("all_to_allv of rows ", to_string(Shape(x.shape().begin() + (x.ndim() > 0 ? 1 : 0), x.shape().end())),
                         " ", to_string(dtype_v<T>), " over ", g.text());
    });
    DAX_CHECK(x.ndim() >= 1, "all_to_allv: expected an array of rows (rank >= 1), got shape ", to_string(x.shape()));
    DAX_CHECK(static_cast<int>(send_counts.size()) == g.size && static_cast<int>(recv_counts.size()) == g.size,
              "all_to_allv: expected ", g.size, " send and receive counts (one per member of ", g.text(), "), got ",
              send_counts.size(), " and ", recv_counts.size());
    int64_t sent = 0, received = 0;
    for (int64_t c : send_counts) sent += c;
    for (int64_t c : recv_counts) received += c;
    DAX_CHECK(sent == x.shape()[0], "all_to_allv: the send counts add up to ", sent, " rows, but x has ",
              x.shape()[0], " (shape ", to_string(x.shape()), ")");
    const int64_t row = numel(Shape(x.shape().begin() + 1, x.shape().end()));
    Shape out_shape = x.shape();
    out_shape[0] = received;
    auto piece = detail::dev::allocate(received * row * sizeof(T));
    if (g.size == 1) {
      detail::dev::copy(piece->data(), x.local_data().data(), x.local_data().size_bytes());
    } else {
      std::vector<int64_t> sc(size_t(g.size)), sd(size_t(g.size)), rc(size_t(g.size)), rd(size_t(g.size));
      for (int j = 0; j < g.size; ++j) {
        sc[size_t(j)] = send_counts[size_t(j)] * row, rc[size_t(j)] = recv_counts[size_t(j)] * row;
        if (j > 0) sd[size_t(j)] = sd[size_t(j) - 1] + sc[size_t(j) - 1], rd[size_t(j)] = rd[size_t(j) - 1] + rc[size_t(j) - 1];
      }
      const int64_t started = detail::collective_start();
      g.comm().all_to_allv(x.local_data().data(), sc, sd, piece->data(), rc, rd, dtype_v<T>);
      const int64_t from_others = (received - recv_counts[size_t(g.index)]) * row;
      detail::count_collective("all_to_allv", g.text(), from_others * int64_t(sizeof(T)), started, g.size);
    }
    return detail::local_block<T>(g, std::move(out_shape), std::move(piece));
  });
  detail::record_collective("all_to_allv", out, x, detail::axis_group(axes, "all_to_allv"), false, [&] {
    return [axes, send_counts, recv_counts](const DistArray<T>& ct) { return all_to_allv(ct, axes, recv_counts, send_counts); };
  });
  return out;
}

namespace detail {

/// ppermute's partners for this member of g: (whom it sends to, whom it receives from), -1 for
/// none, after checking the pairs.
inline std::pair<int, int> ppermute_partners(const AxisGroup& g, const std::vector<std::pair<int, int>>& perm) {
  std::vector<int> dst_of(size_t(g.size), -1), src_of(size_t(g.size), -1);
  for (const auto& [src, dst] : perm) {
    DAX_CHECK(src >= 0 && src < g.size && dst >= 0 && dst < g.size, "ppermute: pair (", src, ", ", dst,
              ") is out of range for the ", g.size, " devices of ", g.text());
    DAX_CHECK(dst_of[size_t(src)] < 0, "ppermute: source ", src, " appears in more than one pair");
    DAX_CHECK(src_of[size_t(dst)] < 0, "ppermute: destination ", dst, " appears in more than one pair");
    dst_of[size_t(src)] = dst;
    src_of[size_t(dst)] = src;
  }
  return {dst_of[size_t(g.index)], src_of[size_t(g.index)]};
}

/// ppermute's transpose: the inverse permutation.
template <class T>
void record_ppermute(DistArray<T>& out, const DistArray<T>& x, const AxisNames& axes,
                     const std::vector<std::pair<int, int>>& perm) {
  detail::record_collective("ppermute", out, x, detail::axis_group(axes, "ppermute"), false, [&] {
    std::vector<std::pair<int, int>> inverse;
    for (const auto& [src, dst] : perm) inverse.emplace_back(dst, src);
    return [axes, inverse](const DistArray<T>& ct) { return ppermute(ct, axes, inverse); };
  });
}

}  // namespace detail

/// x sent along the pairs (source, destination) of positions over the named axes; each position
/// is a source at most once and a destination at most once. A device no pair sends to gets zeros.
template <class T>
DistArray<T> ppermute(const DistArray<T>& x, const AxisNames& axes, const std::vector<std::pair<int, int>>& perm,
                      SourceLine at = SourceLine::current()) {
  const detail::SiteScope site("ppermute", at);
  DistArray<T> out = detail::untraced([&]() -> DistArray<T> {
    const detail::AxisGroup g = detail::axis_group(axes, "ppermute");
    detail::check_local_block(x, g, "ppermute");
    const detail::OpLabel label([&] { return detail::manual_label("ppermute", x, g); });
    const auto [to, from] = detail::ppermute_partners(g, perm);
    auto piece = detail::dev::allocate(x.size() * sizeof(T));
    T* o = static_cast<T*>(piece->data());
    if (from == g.index) detail::dev::copy(o, x.local_data().data(), x.local_data().size_bytes());
    else if (from < 0) detail::dev::fill(o, x.size(), T(0));
    if (g.size > 1) {
      // Every member takes part, with -1 where it has no partner on another device, so the call is
      // numbered and compared across the group like every collective.
      const int peer_to = to == g.index ? -1 : to, peer_from = from == g.index ? -1 : from;
      const int64_t started = detail::collective_start();
      g.comm().send_recv(x.local_data().data(), peer_to, o, peer_from, x.size(), dtype_v<T>);
      if (peer_from >= 0) detail::count_collective("ppermute", g.text(), x.size() * int64_t(sizeof(T)), started, g.size);
    }
    return detail::local_block<T>(g, x.shape(), std::move(piece));
  });
  detail::record_ppermute(out, x, axes, perm);
  return out;
}

/// A ppermute started and not yet waited for (ppermute_start). wait() returns what ppermute
/// would have (a second wait() the same array), recorded for autodiff then, with ppermute's
/// transpose (which runs blocking in the backward).
template <class T>
class PendingPpermute {
 public:
  PendingPpermute(DistArray<T> x, AxisNames axes, std::vector<std::pair<int, int>> perm, DistArray<T> out,
                  std::unique_ptr<detail::PendingCollective> call, std::string group, int64_t bytes, int64_t started,
                  int members)
      : x_(std::move(x)), axes_(std::move(axes)), perm_(std::move(perm)), out_(std::move(out)), call_(std::move(call)),
        group_(std::move(group)), bytes_(bytes), started_(started), members_(members), site_(detail::current_site()) {}
  PendingPpermute(PendingPpermute&&) noexcept = default;
  // Not assignable: a defaulted move assignment would free the old exchange's buffers before its
  // wait (members go in order), while MPI may still write into them.
  PendingPpermute& operator=(PendingPpermute&&) = delete;
  ~PendingPpermute() {
    if (call_) {  // dropped unwaited: the peers run it to the end, so this side does too
      try {
        finish();
      } catch (...) {
      }
    }
  }

  DistArray<T> wait() {
    if (call_) {
      finish();
      detail::record_ppermute(out_, x_, axes_, perm_);
    }
    return out_;
  }

 private:
  void finish() {  // counted as ppermute counts, once it has arrived
    const auto call = std::move(call_);
    call->wait();
    const detail::SiteScope started_at(site_, "");  // counted at the site that started it
    if (bytes_ >= 0) detail::count_collective("ppermute", group_, bytes_, started_, members_);
  }

  DistArray<T> x_;  // kept alive (its piece is being sent) and for the tape
  AxisNames axes_;
  std::vector<std::pair<int, int>> perm_;
  DistArray<T> out_;
  std::unique_ptr<detail::PendingCollective> call_;
  std::string group_;
  int64_t bytes_, started_;  // bytes received (-1: none), when it started (count_collective)
  int members_;
  std::string site_;  // the call site it started at (core/call_site.hpp)
};

/// ppermute(x, axes, perm) started and left to run while the program computes (ring attention
/// passes the next k and v blocks on while it attends to the ones at hand): every member of the
/// group starts it, in the same order as its other collectives, and waits for it with wait().
template <class T>
PendingPpermute<T> ppermute_start(const DistArray<T>& x, const AxisNames& axes, const std::vector<std::pair<int, int>>& perm,
                                  SourceLine at = SourceLine::current()) {
  const detail::SiteScope site("ppermute_start", at);
  const detail::AxisGroup g = detail::axis_group(axes, "ppermute");
  detail::check_local_block(x, g, "ppermute");
  const auto [to, from] = detail::ppermute_partners(g, perm);
  auto piece = detail::dev::allocate(x.size() * sizeof(T));
  T* o = static_cast<T*>(piece->data());
  if (from == g.index) detail::dev::copy(o, x.local_data().data(), x.local_data().size_bytes());
  else if (from < 0) detail::dev::fill(o, x.size(), T(0));
  const int peer_to = to == g.index ? -1 : to, peer_from = from == g.index ? -1 : from;
  std::unique_ptr<detail::PendingCollective> call;
  int64_t started = 0;
  if (g.size > 1) {
    started = detail::collective_start();
    call = g.comm().start_send_recv(x.local_data().data(), peer_to, o, peer_from, x.size(), dtype_v<T>);
  } else {
    call = std::make_unique<detail::FinishedCollective>();
  }
  const int64_t bytes = g.size > 1 && peer_from >= 0 ? x.size() * int64_t(sizeof(T)) : -1;
  return PendingPpermute<T>(x, axes, perm, detail::local_block<T>(g, x.shape(), std::move(piece)), std::move(call),
                            g.text(), bytes, started, g.size);
}

}  // namespace dax
