// Collective matmul (Wang et al., ASPLOS 2023): a matmul whose operand all-gather
// (all_gather_matmul) or result reduce-scatter (matmul_reduce_scatter) over one mesh axis runs as
// a ring of neighbour exchanges, each overlapped with the local GEMM of the block already at hand.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include <dax/array/reshard.hpp>
#include <dax/array/trace.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/ops/matmul.hpp>
#include <dax/reshard/explain.hpp>
#include <dax/sharding/build.hpp>
#include <dax/sharding/chunk.hpp>

namespace dax {
namespace detail {

/// The rows of a tile of a block's GEMM: up to 8 tiles a block, so the exchange under way gets
/// chances to progress (shared-memory MPI moves data only inside MPI calls), and at least 256
/// rows, because BLAS packs all of b again for every call: (4096, 4096) @ (4096, 2048) float on one
/// BLAS thread took 7% longer in 128-row tiles than in one call, 3% longer in 256-row tiles.
inline int64_t ring_tile_rows(int64_t rows) { return std::max<int64_t>(256, (rows + 7) / 8); }

/// c (rows, n) = a (rows, k) @ b, in row tiles testing `pending` between them while there is an
/// exchange under way, else in one call. `b` is a piece of logical shape `b_shape` (k, n), stored
/// transposed when `b_swapped`.
template <class T>
void gemm_in_row_tiles(const T* a, int64_t rows, int64_t k, const T* b, const Shape& b_shape, bool b_swapped, T* c,
                       PendingCollective* pending) {
  const int64_t n = b_shape[1], tile = pending ? ring_tile_rows(rows) : std::max<int64_t>(rows, 1);
  for (int64_t r = 0; r < rows; r += tile) {
    const int64_t h = std::min(tile, rows - r);
    dev::batched_gemm(a + r * k, Shape{h, k}, b, b_shape, c + r * n, Shape{h, n}, false, b_swapped);
    if (pending && r + h < rows) pending->test();
  }
}

/// dst[0, count) += src[0, count), on the backend's memory.
template <class T>
void add_into(T* dst, const T* src, int64_t count) {
  const Box all{{0, count}};
  dev::copy_region(src, all, dst, all, all, CopyMode::add);
}

/// A ring block of `rows` rows of `width` whose rows from `valid` on are zeros: the padding that
/// a short block carries (never read as data, but sent, so it must hold defined values). Every
/// block has at least the last block's rows, so zeroing those rows once covers every step.
template <class T>
std::shared_ptr<Buffer> ring_block(int64_t rows, int64_t width, int64_t valid) {
  auto buffer = dev::allocate(rows * width * sizeof(T));
  dev::fill(data_of<T>(buffer) + valid * width, (rows - valid) * width, T(0));
  return buffer;
}

/// all_gather_matmul's ring on this member of `group` (p members, ranked by their coordinate on
/// the axis): `a_piece` is its row block of a (m rows split p ways by the ceil-chunk rule, k
/// columns), `b` its piece of b; writes out (m, n) = (the gathered a) @ b. Blocks travel leftwards
/// padded to the largest chunk, so every exchange has the same count.
template <class T>
void all_gather_matmul_ring(Communicator& group, const std::string& axes, const T* a_piece, int64_t m, int64_t k,
                            const T* b, const Shape& b_shape, bool b_swapped, T* out) {
  const int p = group.size(), i = group.rank();
  const int64_t n = b_shape[1], chunk = (m + p - 1) / p, block = chunk * k;
  const int left = (i + p - 1) % p, right = (i + 1) % p;
  const int64_t own = chunk_piece(m, p, i).size();
  // The first block sent is the piece itself unless it is short (then a padded copy); blocks
  // arrive in two buffers of their own, taking turns (the piece is the operand's: never written).
  std::shared_ptr<Buffer> padded;
  if (own < chunk) {
    padded = ring_block<T>(chunk, k, own);
    dev::copy(padded->data(), a_piece, own * k * sizeof(T));
  }
  const T* current = padded ? data_of<T>(padded) : a_piece;
  std::shared_ptr<Buffer> arriving[2] = {dev::allocate(block * sizeof(T)),
                                         p > 2 ? dev::allocate(block * sizeof(T)) : nullptr};
  for (int s = 0; s < p; ++s) {
    const Slice rows = chunk_piece(m, p, (i + s) % p);
    if (s + 1 == p) {  // the last block: nothing more to pass on
      gemm_in_row_tiles(current, rows.size(), k, b, b_shape, b_swapped, out + rows.start * n, nullptr);
      break;
    }
    T* next = data_of<T>(arriving[s % 2]);
    const int64_t started = collective_start();
    auto pending = group.start_send_recv(current, left, next, right, block, dtype_v<T>);
    gemm_in_row_tiles(current, rows.size(), k, b, b_shape, b_swapped, out + rows.start * n, pending.get());
    pending->wait();
    count_collective("ppermute", axes, block * static_cast<int64_t>(sizeof(T)), started, p);
    current = next;
  }
}

/// matmul_reduce_scatter's ring on this member of `group`: `a` is its column piece of a (m, k
/// columns), `b` its row piece of b (k rows); writes out (its row block of m, n) = the sum over the
/// members of a_j @ b_j for those rows. The accumulator of a row block travels leftwards, each
/// member adding its partial product; member i works on block (i + s + 1) % p at step s, so the
/// last step completes its own, straight into `out`.
template <class T>
void matmul_reduce_scatter_ring(Communicator& group, const std::string& axes, const T* a, int64_t m, int64_t k,
                                const T* b, const Shape& b_shape, bool b_swapped, T* out) {
  const int p = group.size(), i = group.rank();
  const int64_t n = b_shape[1], chunk = (m + p - 1) / p, block = chunk * n;
  const int left = (i + p - 1) % p, right = (i + 1) % p;
  auto partial = [&](int t, T* into, PendingCollective* pending) {
    const Slice rows = chunk_piece(m, p, t);
    gemm_in_row_tiles(a + rows.start * k, rows.size(), k, b, b_shape, b_swapped, into, pending);
    return rows.size() * n;
  };
  if (p == 1) {
    partial(0, out, nullptr);
    return;
  }
  const int64_t shortest = chunk_piece(m, p, p - 1).size();
  std::shared_ptr<Buffer> acc = ring_block<T>(chunk, n, shortest), arriving = ring_block<T>(chunk, n, shortest),
                          mine = ring_block<T>(chunk, n, shortest);
  partial((i + 1) % p, data_of<T>(acc), nullptr);
  for (int s = 1; s < p; ++s) {
    const bool last = s + 1 == p;
    const int64_t started = collective_start();
    auto pending = group.start_send_recv(acc->data(), left, arriving->data(), right, block, dtype_v<T>);
    T* into = last ? out : data_of<T>(mine);
    const int64_t valid = partial((i + s + 1) % p, into, pending.get());
    pending->wait();
    count_collective("ppermute", axes, block * static_cast<int64_t>(sizeof(T)), started, p);
    add_into(into, data_of<T>(arriving), valid);
    std::swap(acc, mine);  // the sum so far travels on next; the old accumulator takes new partials
  }
}

/// The index of the collective matmul's mesh axis, after the checks every rank makes alike (on
/// metadata only, so a bad call fails everywhere before any rank communicates).
inline int collective_matmul_axis(const char* op, const Shape& a, const NamedSharding& as, const Shape& b,
                                  const NamedSharding& bs, const std::string& axis) {
  DAX_CHECK(a.size() == 2 && b.size() == 2, op, ": expected 2-d operands (M, K) and (K, N), got ", to_string(a),
            " and ", to_string(b));
  DAX_CHECK(as.mesh() == bs.mesh(), op, ": operands must be on the same mesh, got ", to_string(as.mesh()), " and ",
            to_string(bs.mesh()));
  DAX_CHECK(a[1] == b[0], op, ": contraction dimensions differ: ", to_string(a), " @ ", to_string(b), " (", a[1],
            " vs ", b[0], ")");
  const int x = as.mesh().find_axis(axis);
  DAX_CHECK(x >= 0, op, ": expected an axis of ", to_string(as.mesh()), ", got '", axis, "'");
  return x;
}

/// What the two collective matmuls share: moves the operands to `a_to` and `b_to`, multiplies
/// their pieces by `ring` over the group of mesh axis `x` (one local GEMM when that axis has one
/// device) into a result laid out by `out_to`, and records matmul's cotangents on the originals.
template <class T, class Ring>
DistArray<T> collective_matmul(const char* op, const DistArray<T>& a, const DistArray<T>& b, int x,
                               const NamedSharding& a_to, const NamedSharding& b_to, const NamedSharding& out_to,
                               Ring ring) {
  const Shape out_shape{a.shape()[0], b.shape()[1]};
  DistArray<T> out = [&] {
    const ProfiledOp profiled(op, a, b);
    const DistArray<T> am = operand_to(a, a_to, op), bm = operand_to(b, b_to, op);
    if (!am.is_addressable()) return DistArray<T>(out_shape, out_to, nullptr);
    Runtime& rt = Runtime::current();
    const Mesh& mesh = a_to.mesh();
    auto buffer = dev::allocate(numel(box_shape(out_to.device_indices(rt.rank(), out_shape))) * sizeof(T));
    const T* a_piece = data_of<T>(am.buffer());  // row-major (a lazy transpose copied): row blocks are contiguous
    const T* b_piece = data_of<T>(bm.stored_buffer());
    const int64_t m = out_shape[0], k = am.local_shape()[1];
    if (mesh.axis_size(x) == 1)
      gemm_in_row_tiles(a_piece, m, k, b_piece, bm.local_shape(), bm.stores_swapped(), data_of<T>(buffer), nullptr);
    else
      ring(rt.group(mesh, {x}), axes_text(mesh, {x}), a_piece, m, k, b_piece, bm.local_shape(), bm.stores_swapped(),
           data_of<T>(buffer));
    return DistArray<T>(out_shape, out_to, std::move(buffer));
  }();
  record(op, out, [&](auto need) {
    return [need, a, b](const DistArray<T>& g) { return matmul_cotangents(g, a, b, need[0], need[1]); };
  }, a, b);
  return out;
}

}  // namespace detail

/// a (M, K) @ b (K, N) with a's rows gathered over mesh axis `axis` while it multiplies: each
/// device multiplies the row block it holds while the next one arrives from its neighbour. The
/// operands first move to a: P(axis, None), b: P(None, <b's N axes>); the result is laid out
/// P(None, <b's N axes>). Matmul's values and gradients.
template <class T>
DistArray<T> all_gather_matmul(const DistArray<T>& a, const DistArray<T>& b, const std::string& axis) {
  const int x = detail::collective_matmul_axis("all_gather_matmul", a.shape(), a.sharding(), b.shape(),
                                               b.sharding(), axis);
  const Mesh& mesh = a.sharding().mesh();
  const NamedSharding b_columns = detail::make_sharding(mesh, {{}, b.sharding().dim_axes(1)}, {});
  // The result's columns are b's: laid out like b's moved piece.
  return detail::collective_matmul("all_gather_matmul", a, b, x, detail::make_sharding(mesh, {{x}, {}}, {}),
                                   b_columns, b_columns, [](auto&&... args) {
                                     detail::all_gather_matmul_ring<T>(args...);
                                   });
}

/// a (M, K) @ b (K, N) with the contraction split over mesh axis `axis` and the partial sums
/// reduce-scattered over its rows while it multiplies: each device adds its partial product of a
/// row block to the sum arriving from its neighbour and passes it on. The operands first move to
/// a: P(None, axis), b: P(axis, <b's N axes>); the result is laid out P(axis, <b's N axes>) (b's
/// N must not be split over `axis`). Matmul's values and gradients.
template <class T>
DistArray<T> matmul_reduce_scatter(const DistArray<T>& a, const DistArray<T>& b, const std::string& axis) {
  const int x = detail::collective_matmul_axis("matmul_reduce_scatter", a.shape(), a.sharding(), b.shape(),
                                               b.sharding(), axis);
  const Mesh& mesh = a.sharding().mesh();
  const std::vector<int>& n_axes = b.sharding().dim_axes(1);
  DAX_CHECK(!detail::has_axis(n_axes, x), "matmul_reduce_scatter: b's N dimension is split over '", axis,
            "', the axis the result's rows are scattered over; expected b's N split over other axes, got ",
            to_string(b.sharding().spec()));
  const NamedSharding b_rows = detail::make_sharding(mesh, {{x}, n_axes}, {});
  // The result's rows scatter over `axis` as b's rows do, its columns are b's: laid out like b.
  return detail::collective_matmul("matmul_reduce_scatter", a, b, x, detail::make_sharding(mesh, {{}, {x}}, {}),
                                   b_rows, b_rows, [](auto&&... args) {
                                     detail::matmul_reduce_scatter_ring<T>(args...);
                                   });
}

}  // namespace dax
