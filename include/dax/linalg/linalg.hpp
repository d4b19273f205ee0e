// dax::linalg on the CPU through ScaLAPACK: a matrix of any sharding is resharded to rows split over
// every device of its mesh (the planner's fewest bytes), dealt into ScaLAPACK's block-cyclic layout
// on a process grid made from the mesh (one all-to-all), factored or solved there, and brought back
// the same way to the sharding asked for (the input's by default). Stacks of matrices (rank > 2)
// run LAPACK on each device's whole matrices instead (linalg/batched.hpp). Errors (not positive
// definite, singular) are dax::Errors on every rank. float, double, complex64 and complex128;
// docs/numerics.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <dax/array/creation.hpp>
#include <dax/array/profile_hook.hpp>
#include <dax/array/reshard.hpp>
#include <dax/array/trace.hpp>
#include <dax/array/transpose.hpp>
#include <dax/ops/complex.hpp>
#include <dax/ops/elementwise.hpp>
#include <dax/ops/join.hpp>
#include <dax/ops/matmul.hpp>
#include <dax/ops/reduction.hpp>
#include <dax/ops/reshape.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/backend/scalapack_ops.hpp>
#include <dax/linalg/batched.hpp>
#include <dax/linalg/block_cyclic.hpp>

namespace dax::detail {

/// The element types of the factorizations and solves: real and complex, single and double.
template <class T>
concept solver_type = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, complex64> ||
                      std::is_same_v<T, complex128>;

/// x conjugated (a real x as it is).
template <class T>
DistArray<T> conjugated(const DistArray<T>& x) {
  if constexpr (is_complex_v<T>) return dax::conj(x);
  else return x;
}

/// x^H: the conjugate transpose (the transpose for a real x), of each matrix of a batch.
template <class T>
DistArray<T> adjoint(const DistArray<T>& x) {
  return conjugated(transpose_last_two(x));
}

/// A real array `x` (a cotangent of a real output: log |det|, eigenvalues, singular values) in the
/// element type T: x + 0i for a complex T, x itself for a real one. Partial sums stay partial.
template <class T>
DistArray<T> in_element_type(const DistArray<real_t<T>>& x) {
  if constexpr (is_complex_v<T>) return dax::complex(x, zeros<real_t<T>>(x.shape(), x.sharding()));
  else return x;
}

/// How a matrix is dealt over a BLACS grid, seen from the matrix: `prows` grid rows take its block
/// rows, `pcols` grid columns its block columns; this rank is at (myrow, mycol); group rank of the
/// process at (r, c).
struct CyclicView {
  int prows = 1, pcols = 1, myrow = 0, mycol = 0;
  bool row_order = true;  // group rank r * pcols + c ("Row" grid), else c * prows + r ("Col" grid)
  int rank_of(int r, int c) const { return row_order ? r * pcols + c : c * prows + r; }
};

/// Two BLACS grids over every device of a mesh, made once per mesh: `normal` (rows x cols, "Row"
/// order: group rank g at (g / cols, g % cols)) and `transposed` (cols x rows, "Col" order: the same
/// process at (g % cols, g / cols)). dax keeps its pieces row-major, ScaLAPACK reads column-major:
/// a row-major piece of A dealt over `normal` is, unchanged, the column-major piece of A^T dealt over
/// `transposed`, so dax factors A^T there (the same as A for Cholesky; a transposed solve for LU)
/// and the deal copies rows, not columns.
struct BlacsGrid {
  ProcessGrid shape;
  int context = -1, context_t = -1, row = 0, col = 0;
  Communicator* group = nullptr;
  std::vector<int> axes;
  std::string axes_text;  // "('x', 'y')": the group, as comm_stats names it
  CyclicView normal() const { return {shape.rows, shape.cols, row, col, true}; }
  CyclicView transposed() const { return {shape.cols, shape.rows, col, row, false}; }
};

/// The grids made so far, by mesh, for the live runtime (emptied, their BLACS grids exited, when it
/// shuts down: the group communicators they use go with it).
inline std::map<std::string, std::unique_ptr<BlacsGrid>>& blacs_grids() {
  static std::map<std::string, std::unique_ptr<BlacsGrid>> grids;
  return grids;
}

/// The solvers run on the CPU backend; checked on every call (a meta runtime opened after a real
/// one must not reach a cached grid).
inline void check_solver_backend() {
  DAX_CHECK(!dev::on_gpu() && !dev::on_meta(),
            "dax::linalg: runs on the CPU backend (ScaLAPACK); this runtime's backend has no solver yet");
}

inline const BlacsGrid& blacs_grid(const Mesh& mesh) {
  check_solver_backend();
  auto& grids = blacs_grids();
  auto& g = grids[to_string(mesh)];
  if (!g) {
    if (grids.size() == 1)
      Runtime::current().at_shutdown([] {
        for (auto& [key, grid] : blacs_grids()) {
          dev::blacs_grid_exit(grid->context);
          dev::blacs_grid_exit(grid->context_t);
        }
        blacs_grids().clear();
      });
    auto made = std::make_unique<BlacsGrid>();
    for (size_t a = 0; a < mesh.axis_names().size(); ++a) made->axes.push_back(static_cast<int>(a));
    made->group = &Runtime::current().group(mesh, made->axes);
    made->shape = process_grid(made->group->size());
    const dev::BlacsContexts contexts = dev::blacs_grids_init(*made->group, made->shape.rows, made->shape.cols);
    made->context = contexts.normal;
    made->context_t = contexts.transposed;
    made->row = contexts.row;
    made->col = contexts.col;
    made->axes_text = contexts.group_name;
    g = std::move(made);
  }
  return *g;
}

/// `value` (a size ScaLAPACK takes as an int: a local piece's elements, a workspace) checked on
/// every rank of the grid: the largest over the ranks, so that all of them throw or none does.
inline int int_size(const BlacsGrid& grid, int64_t value, const char* op, const char* what) {
  int64_t largest = value;
  grid.group->all_reduce(nullptr, &largest, 1, DType::int64, ReduceOp::max);
  DAX_CHECK(largest <= int64_t(INT32_MAX), op, ": ", what, " of ", largest,
            " elements on one rank is more than ScaLAPACK's 32-bit sizes take (2^31 - 1); use more ranks");
  return static_cast<int>(value);
}

/// This rank's block-cyclic piece of an (m, n) matrix dealt as `view` says: row-major (`ld`
/// columns) or column-major (`ld` rows), and the ScaLAPACK descriptor that reads it.
template <class T>
struct CyclicPiece {
  std::shared_ptr<Buffer> storage;  // from the caching allocator
  CyclicView view;
  bool row_major = true;
  int64_t m = 0, n = 0, nb = 1, rows = 0, cols = 0, ld = 1;
  int desc[9] = {};
  /// Global row (column) of local row r (column c).
  int64_t global_row(int64_t r) const { return (r / nb * view.prows + view.myrow) * nb + r % nb; }
  int64_t global_col(int64_t c) const { return (c / nb * view.pcols + view.mycol) * nb + c % nb; }
  T& at(int64_t r, int64_t c) { return row_major ? data()[r * ld + c] : data()[r + c * ld]; }
  T* data() { return static_cast<T*>(storage->data()); }
};

/// Between rows split over the group's devices (group rank g holds row chunk g, row-major) and the
/// block-cyclic piece: one all-to-all either way. From `const T*` rows it deals them into `piece`;
/// into `T*` rows it gathers `piece` back.
template <class T, class Rows>
void cyclic_exchange(const BlacsGrid& grid, Rows* rows_data, CyclicPiece<T>& piece) {
  static_assert(std::is_same_v<std::remove_const_t<Rows>, T>);
  constexpr bool to_cyclic = std::is_const_v<Rows>;
  const int64_t m = piece.m, n = piece.n, nb = piece.nb;
  const CyclicView& v = piece.view;
  const int size = grid.group->size(), me = grid.group->rank();
  std::vector<int64_t> cols(v.pcols);  // how many columns each grid column holds
  for (int q = 0; q < v.pcols; ++q) cols[q] = block_count(n, nb, q, v.pcols);
  const auto row_range = [&](int g) { return chunk_piece(m, size, g); };
  const Slice mine = row_range(me);
  // Group rank -> grid coordinates.
  std::vector<int> row_of(size), col_of(size);
  for (int r = 0; r < v.prows; ++r)
    for (int c = 0; c < v.pcols; ++c) {
      row_of[v.rank_of(r, c)] = r;
      col_of[v.rank_of(r, c)] = c;
    }
  std::vector<int64_t> send_counts(size), send_displs(size), recv_counts(size), recv_displs(size);
  for (int d = 0; d < size; ++d) {
    int64_t rows_to = 0, rows_from = 0;
    for (int64_t i = mine.start; i < mine.stop; ++i) rows_to += block_owner(i, nb, v.prows) == row_of[d];
    const Slice theirs = row_range(d);
    for (int64_t i = theirs.start; i < theirs.stop; ++i) rows_from += block_owner(i, nb, v.prows) == v.myrow;
    send_counts[d] = rows_to * cols[col_of[d]];
    recv_counts[d] = rows_from * cols[v.mycol];
  }
  if (!to_cyclic) std::swap(send_counts, recv_counts);
  for (int d = 1; d < size; ++d) {
    send_displs[d] = send_displs[d - 1] + send_counts[d - 1];
    recv_displs[d] = recv_displs[d - 1] + recv_counts[d - 1];
  }
  // The row-chunk side's buffer in (destination, row, column) order and the cyclic side's in
  // (source, row, column) order: the same order seen from both ends.
  // Staging from dax's caching allocator: pooled, so a repeated solve neither zero-fills nor
  // page-faults 2 x 16 MB per 2048^2 matrix (std::vector did both: a third of the deal's time).
  const auto rows_buffer = dev::allocate(std::max<int64_t>(mine.size() * n, 1) * sizeof(T));
  const auto cyclic_buffer = dev::allocate(std::max<int64_t>(piece.rows * piece.cols, 1) * sizeof(T));
  T* const rows_side = static_cast<T*>(rows_buffer->data());
  T* const cyclic_side = static_cast<T*>(cyclic_buffer->data());
  // Runs of up to nb consecutive elements move together (a block's width of a row).
  const auto walk_rows = [&](auto&& move) {  // (place in rows_data, place in rows_side, run length)
    std::vector<int64_t> at(size);
    for (int d = 0; d < size; ++d) at[d] = (to_cyclic ? send_displs : recv_displs)[d];
    for (int64_t i = mine.start; i < mine.stop; ++i) {
      const int prow = block_owner(i, nb, v.prows);
      for (int q = 0; q < v.pcols; ++q) {
        int64_t& k = at[v.rank_of(prow, q)];
        for (int64_t j = int64_t(q) * nb; j < n; j += nb * v.pcols) {
          const int64_t len = std::min(nb, n - j);
          move((i - mine.start) * n + j, k, len);
          k += len;
        }
      }
    }
  };
  const auto walk_cyclic = [&](auto&& move) {  // (local row, place in cyclic_side): a whole local row
    for (int s = 0; s < size; ++s) {
      int64_t k = (to_cyclic ? recv_displs : send_displs)[s];
      const Slice theirs = row_range(s);
      for (int64_t i = theirs.start; i < theirs.stop; ++i) {
        if (block_owner(i, nb, v.prows) != v.myrow) continue;
        move(block_local(i, nb, v.prows), k);
        k += piece.cols;
      }
    }
  };
  const auto row_to_piece = [&](int64_t r, const T* from) {
    if (piece.row_major) std::copy(from, from + piece.cols, piece.data() + r * piece.ld);
    else
      for (int64_t c = 0; c < piece.cols; ++c) piece.data()[r + c * piece.ld] = from[c];
  };
  const auto row_from_piece = [&](int64_t r, T* to) {
    if (piece.row_major) std::copy(piece.data() + r * piece.ld, piece.data() + r * piece.ld + piece.cols, to);
    else
      for (int64_t c = 0; c < piece.cols; ++c) to[c] = piece.data()[r + c * piece.ld];
  };
  if constexpr (to_cyclic)
    walk_rows([&](int64_t src, int64_t dst, int64_t len) { std::copy(rows_data + src, rows_data + src + len, &rows_side[dst]); });
  else walk_cyclic([&](int64_t r, int64_t dst) { row_from_piece(r, cyclic_side + dst); });
  const int64_t started = collective_start();
  if constexpr (to_cyclic)
    grid.group->all_to_allv(rows_side, send_counts, send_displs, cyclic_side, recv_counts, recv_displs,
                            dtype_v<T>);
  else
    grid.group->all_to_allv(cyclic_side, send_counts, send_displs, rows_side, recv_counts, recv_displs,
                            dtype_v<T>);
  int64_t received = 0;
  for (int d = 0; d < size; ++d) received += d == me ? 0 : recv_counts[d];
  count_collective("all_to_all", grid.axes_text, received * int64_t(sizeof(T)), started, size);
  if constexpr (to_cyclic) walk_cyclic([&](int64_t r, int64_t src) { row_to_piece(r, cyclic_side + src); });
  else
    walk_rows([&](int64_t dst, int64_t src, int64_t len) { std::copy(&rows_side[src], &rows_side[src] + len, rows_data + dst); });
}

/// The rows-over-every-device layout of a matrix on `mesh`.
inline NamedSharding rows_over_mesh(const Mesh& mesh) {
  std::vector<std::string> names(mesh.axis_names().begin(), mesh.axis_names().end());
  return NamedSharding(mesh, P(axes(names), none));
}

/// An (m, n) block-cyclic piece dealt as `view` says with nb x nb blocks, stored row-major (read by
/// ScaLAPACK as the column-major A^T over the transposed grid) or column-major, with the
/// descriptor for `context`; its values not yet set.
template <class T>
CyclicPiece<T> empty_piece(int64_t rows, int64_t cols, const CyclicView& view, bool row_major, int context, int64_t nb,
                           const char* op) {
  CyclicPiece<T> piece;
  piece.view = view;
  piece.row_major = row_major;
  piece.m = rows;
  piece.n = cols;
  piece.nb = nb;
  piece.rows = block_count(piece.m, nb, view.myrow, view.prows);
  piece.cols = block_count(piece.n, nb, view.mycol, view.pcols);
  piece.ld = std::max<int64_t>(1, row_major ? piece.cols : piece.rows);
  piece.storage = dev::allocate(std::max<int64_t>(piece.rows * piece.cols, 1) * sizeof(T));
  // Row-major storage is the column-major A^T: ScaLAPACK's (M, N) are A's (n, m).
  const int m = int(row_major ? piece.n : piece.m), n = int(row_major ? piece.m : piece.n), b = int(nb);
  const int ld = int(piece.ld);
  const int info = dev::describe(piece.desc, m, n, b, context, ld);
  DAX_CHECK(info == 0, op, ": ScaLAPACK's descinit refused a ", m, " x ", n, " matrix (info ", info, ")");
  return piece;
}

/// `x` (m, n) dealt into an empty_piece.
template <class T>
CyclicPiece<T> to_cyclic(const DistArray<T>& x, const BlacsGrid& grid, const CyclicView& view, bool row_major,
                         int context, int64_t nb, const char* op) {
  CyclicPiece<T> piece = empty_piece<T>(x.shape()[0], x.shape()[1], view, row_major, context, nb, op);
  (void)int_size(grid, piece.rows * piece.cols, op, "a block-cyclic piece");
  const DistArray<T> rows = reshard(x, rows_over_mesh(x.sharding().mesh()));
  cyclic_exchange(grid, rows.local_data().data(), piece);
  return piece;
}

/// The block-cyclic `piece` back as a DistArray under `out`.
template <class T>
DistArray<T> from_cyclic(CyclicPiece<T>& piece, const BlacsGrid& grid, const Mesh& mesh, const NamedSharding& out) {
  const Shape shape{piece.m, piece.n};
  const DistArray<T> rows = make_local<T>(shape, rows_over_mesh(mesh), [&](T* data, const Box&) {
    cyclic_exchange(grid, data, piece);
  });
  return reshard(rows, out);
}

/// The info every rank agrees on (ScaLAPACK's is global already; the largest, to be sure).
inline int agreed_info(const BlacsGrid& grid, int info) {
  int64_t v = info;
  grid.group->all_reduce(nullptr, &v, 1, DType::int64, ReduceOp::max);
  return static_cast<int>(v);
}

/// b fits a square a as a right-hand side: a vector or a matrix (for a batch of matrices, a batch
/// of vectors (..., n), rank one less, or of matrices (..., n, k), with a's batch dimensions, as
/// jnp.linalg.solve), as many rows, the same mesh.
template <class T>
void check_rhs(const DistArray<T>& a, const DistArray<T>& b, const char* op) {
  const size_t batch = a.ndim() - 2;
  if (batch == 0)
    DAX_CHECK(b.ndim() == 1 || b.ndim() == 2, op, ": expected b of rank 1 or 2, got shape ", to_string(b.shape()));
  else
    DAX_CHECK((b.ndim() == a.ndim() - 1 || b.ndim() == a.ndim()) &&
                  Shape(b.shape().begin(), b.shape().begin() + batch) == Shape(a.shape().begin(), a.shape().begin() + batch),
              op, ": a is a batch of matrices ", to_string(a.shape()), ": expected b of its batch dimensions and rank ",
              a.ndim() - 1, " (vectors) or ", a.ndim(), " (matrices), got shape ", to_string(b.shape()));
  DAX_CHECK(b.shape()[batch] == a.shape()[batch], op, ": a is ", to_string(a.shape()), " but b has ", b.shape()[batch],
            " rows (expected ", a.shape()[batch], ")");
  DAX_CHECK(a.sharding().mesh() == b.sharding().mesh(), op, ": a and b are on different meshes: ",
            to_string(a.sharding().mesh()), " and ", to_string(b.sharding().mesh()));
}

/// A^T's LU over the transposed grid, in place in `pa` (A's row-major pieces); the pivots of A^T's
/// local rows. A singular matrix is an error naming `op` when `singular_fails`.
template <class T>
std::vector<int> lu_of_transpose(const BlacsGrid& grid, CyclicPiece<T>& pa, const char* op, bool singular_fails) {
  const int n = int(pa.m), one = 1;
  std::vector<int> pivots(pa.cols + pa.nb);  // A^T's local rows are A's local columns
  int info = 0;
  dev::Scalapack<T>::getrf(&n, &n, pa.data(), &one, &one, pa.desc, pivots.data(), &info);
  info = agreed_info(grid, info);
  DAX_CHECK(info >= 0, op, ": ScaLAPACK's p?getrf refused argument ", -info);
  DAX_CHECK(info == 0 || !singular_fails, op, ": the matrix is singular (U(", info, ", ", info,
            ") of its LU factorization is zero)");
  return pivots;
}

/// a is a square matrix, or a batch of them (..., n, n).
template <class T>
void check_square(const DistArray<T>& a, const char* op) {
  const size_t d = a.ndim();
  DAX_CHECK(d >= 2 && a.shape()[d - 2] == a.shape()[d - 1], op,
            d > 2 ? ": expected square matrices (..., n, n), got shape " : ": expected a square matrix, got shape ",
            to_string(a.shape()));
}

/// An (n, n) array under `s` holding `diagonal` on the diagonal, `below` under it and 0 above:
/// the masks of the pullbacks (tril(x) = x * mask(1, 1); Murray's Phi(x) = x * mask(1, 0.5)).
template <class T>
DistArray<T> triangle_mask(int64_t n, const NamedSharding& s, T below, T diagonal, bool lower = true) {
  return make_array_from_callback<T>({n, n}, with_unreduced_axes(s, 2, {}), [&](const Box& box) {
    std::vector<T> v;
    v.reserve(static_cast<size_t>(numel(box)));
    for (int64_t i = box[0].start; i < box[0].stop; ++i)
      for (int64_t j = box[1].start; j < box[1].stop; ++j) v.push_back(i == j ? diagonal : ((lower ? j < i : j > i) ? below : T(0)));
    return v;
  });
}

/// The sharding of x's last two dimensions alone: an (n, n) mask's, broadcast over x's batch.
inline NamedSharding matrix_dims_sharding(const NamedSharding& x, size_t ndim) {
  return make_sharding(x.mesh(), {x.dim_axes(ndim - 2), x.dim_axes(ndim - 1)}, {});
}

/// x times triangle_mask's (n, n) mask over its last two dimensions (each matrix of a batch).
template <class T>
DistArray<T> times_triangle(const DistArray<T>& x, T below, T diagonal, bool lower = true) {
  return x * triangle_mask<T>(x.shape().back(), matrix_dims_sharding(x.sharding(), x.ndim()), below, diagonal, lower);
}

/// 1 / x off the diagonal of each matrix, 0 on it: the F matrices of eigh's and svd's pullbacks
/// (x_ij = w_j - w_i of distinct values).
template <class T>
DistArray<T> reciprocal_off_diagonal(const DistArray<T>& x) {
  const int64_t n = x.shape().back();
  const NamedSharding s = matrix_dims_sharding(x.sharding(), x.ndim());
  const auto off = triangle_mask<T>(n, s, T(1), T(0)) + triangle_mask<T>(n, s, T(1), T(0), false);
  return T(1) / (x + triangle_mask<T>(n, s, T(0), T(1))) * off;
}

/// v (..., k) as (..., 1, k), scaling a matrix's columns, or as (..., k, 1), scaling its rows.
template <class T>
DistArray<T> as_row(const DistArray<T>& v) {
  return insert_unit_dim(v, v.ndim() - 1);
}
template <class T>
DistArray<T> as_column(const DistArray<T>& v) {
  return insert_unit_dim(v, v.ndim());
}

/// A right-hand side of a's as matrices: vectors (rank one less than a's) as (..., n, 1).
template <class T>
DistArray<T> as_matrix(const DistArray<T>& b, size_t a_ndim = 2) {
  return size_t(b.ndim()) + 1 == a_ndim ? insert_unit_dim(b, b.ndim()) : b;
}

/// A per-matrix value (slogdet's, of the batch's shape) ready to scale each (n, n) matrix: two
/// unit dimensions added; a scalar as it is.
template <class T>
DistArray<T> per_matrix_factor(const DistArray<T>& x) {
  return x.ndim() == 0 ? x : insert_unit_dim(insert_unit_dim(x, x.ndim()), x.ndim() + 1);
}

/// A batched routine's frame: `a` moved to the batched layout, `run` on it, the result moved to
/// `target`.
template <class T, class Run>
DistArray<T> on_batch(const DistArray<T>& a, const NamedSharding& target, Run&& run) {
  check_solver_backend();
  return reshard_untraced(run(reshard_untraced(a, batched_layout(a.sharding(), a.ndim()))), target);
}

/// solve's and triangular_solve's batched frame: a and b in their batched layouts (b's batch split
/// as a's), `run(a, b)`, x moved to `out` (default: b's sharding).
template <class T, class Run>
DistArray<T> batched_solve_like(const char* op, const DistArray<T>& a, const DistArray<T>& b,
                                const std::optional<NamedSharding>& out, Run&& run) {
  check_square(a, op);
  check_rhs(a, b, op);
  const NamedSharding target = out ? *out : with_unreduced_axes(b.sharding(), b.ndim(), {});
  if (!a.sharding().mesh().contains(Runtime::current().rank())) return DistArray<T>(b.shape(), target, nullptr);
  check_solver_backend();
  if (numel(b.shape()) == 0) return reshard(b, target);
  const NamedSharding la = batched_layout(a.sharding(), a.ndim());
  const NamedSharding lb = batch_with_whole(la, a.ndim(), b.ndim() + 2 - a.ndim());
  return reshard_untraced(run(reshard_untraced(a, la), reshard_untraced(b, lb)), target);
}



/// The part solve and triangular_solve share: a and b checked, a dealt as A^T over the transposed
/// grid and b column-major over the same grid, `kernel(pa, pb)` run on them (it leaves x in pb),
/// x brought back in `out` (default: b's sharding), as a vector when b was one.
template <class T, class Kernel>
DistArray<T> solve_like(const char* op, const DistArray<T>& a, const DistArray<T>& b,
                        const std::optional<NamedSharding>& out, Kernel&& kernel) {
  check_square(a, op);
  check_rhs(a, b, op);
  const NamedSharding target = out ? *out : with_unreduced_axes(b.sharding(), b.ndim(), {});
  const bool vector = b.ndim() == 1;
  const DistArray<T> bm = vector ? reshape(b, {b.shape()[0], 1}) : b;
  const Mesh& mesh = a.sharding().mesh();
  if (!mesh.contains(Runtime::current().rank())) return DistArray<T>(b.shape(), target, nullptr);
  if (a.shape()[0] == 0 || bm.shape()[1] == 0) return reshard(b, target);
  const auto& grid = blacs_grid(mesh);
  const int64_t nb = block_size(a.shape()[0], grid.shape);
  auto pa = to_cyclic(a, grid, grid.normal(), true, grid.context_t, nb, op);
  auto pb = to_cyclic(bm, grid, grid.transposed(), false, grid.context_t, nb, op);
  kernel(grid, pa, pb);
  const DistArray<T> x = from_cyclic(pb, grid, mesh, vector ? rows_over_mesh(mesh) : target);
  return vector ? reshard(reshape(x, {x.shape()[0]}), target) : x;
}

/// The inverse in place of the LU factors lu_of_transpose left in `pa` (p?getri): inv(A^T), which
/// reads back over the grid as inv(A), as the factors read back as A. A singular matrix (an exact
/// zero on U's diagonal) is an error naming `op`, on every rank (the callers check U first).
template <class T>
void invert_lu(const BlacsGrid& grid, CyclicPiece<T>& pa, const std::vector<int>& pivots, const char* op) {
  const int n = int(pa.m), one = 1;
  int info = 0;
  T work_size = 0;
  int iwork_size = 0, query = -1;
  dev::Scalapack<T>::getri(&n, pa.data(), &one, &one, pa.desc, pivots.data(), &work_size, &query, &iwork_size, &query,
                           &info);
  const int lwork = int_size(grid, int64_t(std::real(work_size)) + 1, op, "a workspace");
  const int liwork = std::max(iwork_size, 1);
  std::vector<T> work(lwork);
  std::vector<int> iwork(liwork);
  dev::Scalapack<T>::getri(&n, pa.data(), &one, &one, pa.desc, pivots.data(), work.data(), &lwork, iwork.data(),
                           &liwork, &info);
  // The processes may name different zero pivots (seen at 2-8 ranks for a zero matrix): the error
  // names none, so that every rank raises the same.
  const int refused = agreed_info(grid, -std::min(info, 0)), singular = agreed_info(grid, std::max(info, 0));
  DAX_CHECK(refused == 0, op, ": ScaLAPACK's p?getri refused argument ", refused);
  DAX_CHECK(singular == 0, op, ": the matrix is singular (a zero on the diagonal of U, its LU factorization's)");
}

/// cholesky's factor of one matrix over the mesh's grid, in `target`.
template <class T>
DistArray<T> cholesky_of_matrix(const DistArray<T>& a, const NamedSharding& target) {
  const Mesh& mesh = a.sharding().mesh();
  const auto& grid = blacs_grid(mesh);
  // A's row-major pieces over the normal grid are A^T's column-major ones over the transposed grid
  // (A^T = A: the upper triangle there is A's lower one, and its factor U is A's L). Complex: A^T is
  // conj(A), Hermitian too; its U has U^H U = A^T, so U^T, which reads back, has U^T conj(U) = A.
  auto piece = to_cyclic(a, grid, grid.normal(), true, grid.context_t,
                                 block_size(a.shape()[0], grid.shape), "cholesky");
  const int n = int(piece.m), one = 1;
  int info = 0;
  dev::Scalapack<T>::potrf("U", &n, piece.data(), &one, &one, piece.desc, &info);
  info = agreed_info(grid, info);
  DAX_CHECK(info <= 0, "cholesky: the matrix is not positive definite (its leading minor of order ", info,
            " is not positive)");
  DAX_CHECK(info == 0, "cholesky: ScaLAPACK's p?potrf refused argument ", -info);
  for (int64_t r = 0; r < piece.rows; ++r)  // zeros above the diagonal, as NumPy returns
    for (int64_t c = 0; c < piece.cols; ++c)
      if (piece.global_col(c) > piece.global_row(r)) piece.at(r, c) = T(0);
  return from_cyclic(piece, grid, mesh, target);
}

/// eigh of one matrix over the mesh's grid: eigenvalues (replicated) and eigenvectors (in `target`).
template <class T>
std::pair<DistArray<real_t<T>>, DistArray<T>> eigh_of_matrix(const DistArray<T>& a, const NamedSharding& target) {
  using R = real_t<T>;
  const Mesh& mesh = a.sharding().mesh();
  const int64_t n = a.shape()[0];
  const auto& grid = blacs_grid(mesh);
  const int64_t nb = block_size(n, grid.shape);
  // A^T (= A) over the transposed grid, its upper triangle being A's lower one; the eigenvectors
  // come out column-major over the same grid, which is how a column-major piece dealt as
  // grid.transposed() reads (as solve's b does). Complex: A^T = conj(A), whose eigenvectors are
  // conj(V) with the same eigenvalues: conjugated in place below.
  auto pa = to_cyclic(a, grid, grid.normal(), true, grid.context_t, nb, "eigh");
  auto pz = empty_piece<T>(n, n, grid.transposed(), false, grid.context_t, nb, "eigh");
  std::vector<R> w(n);
  const int ni = int(n), one = 1;
  int info = 0, iwork_size = 0, query = -1;
  T work_size = 0;
  R rwork_size = 0;
  const auto eigensolver = [&](T* work, const int* lwork, R* rwork, const int* lrwork, int* iwork, const int* liwork) {
    if constexpr (is_complex_v<T>)
      dev::Scalapack<T>::heevd("V", "U", &ni, pa.data(), &one, &one, pa.desc, w.data(), pz.data(), &one, &one,
                                       pz.desc, work, lwork, rwork, lrwork, iwork, liwork, &info);
    else
      dev::Scalapack<T>::syevd("V", "U", &ni, pa.data(), &one, &one, pa.desc, w.data(), pz.data(), &one, &one,
                                       pz.desc, work, lwork, iwork, liwork, &info);
  };
  eigensolver(&work_size, &query, &rwork_size, &query, &iwork_size, &query);
  // ScaLAPACK's workspace query for p?syevd can come out short (PDORMTR then refuses LWORK and the
  // vectors are garbage: n = 16-19 or 32-65 with 16-row blocks on one process): the larger of it
  // and the documented minimum, max(1 + 6n + 2 np nq, 3n + max(nb (np + 1), 3 nb)) + 2n, plus a
  // block. p?heevd's documented minima: n + (np + nq + nb) nb complex, 1 + 9n + 3 np nq real.
  const int64_t np = pa.cols, nq = pa.rows;
  const int64_t documented = is_complex_v<T>
                                 ? n + (np + nq + nb) * nb
                                 : std::max(1 + 6 * n + 2 * np * nq, 3 * n + std::max(nb * (np + 1), 3 * nb)) + 2 * n;
  const int lwork = int_size(grid, std::max<int64_t>(int64_t(std::real(work_size)), documented) + n * nb, "eigh",
                                     "a workspace");
  const int lrwork = is_complex_v<T> ? int_size(grid, std::max<int64_t>(int64_t(rwork_size),
                                                                                        1 + 9 * n + 3 * np * nq) + n * nb,
                                                                 "eigh", "a workspace")
                                             : 1;
  // p?heevd's documented integer workspace, 7n + 8 npcol + 2, over either grid's column count.
  const int liwork = is_complex_v<T> ? std::max<int>(iwork_size, int(7 * n + 8 * std::max(grid.shape.cols, grid.shape.rows) + 2))
                                             : std::max(iwork_size, 1);
  std::vector<T> work(lwork);
  std::vector<R> rwork(is_complex_v<T> ? lrwork : 1);
  std::vector<int> iwork(liwork);
  eigensolver(work.data(), &lwork, rwork.data(), &lrwork, iwork.data(), &liwork);
  info = agreed_info(grid, info);
  DAX_CHECK(info == 0, "eigh: ScaLAPACK's p?", is_complex_v<T> ? "heevd" : "syevd", " did not converge (info ",
            info, ")");
  if constexpr (is_complex_v<T>)
    for (int64_t e = 0; e < pz.rows * pz.cols; ++e) pz.data()[e] = std::conj(pz.data()[e]);
  grid.group->broadcast(w.data(), n, dtype_v<R>, 0);  // one copy's bits on every device
  return {device_put(w, {n}, NamedSharding(mesh, P())), from_cyclic(pz, grid, mesh, target)};
}

}  // namespace dax::detail

namespace dax::linalg {

/// x with a x = b (numpy.linalg.solve) by LU with partial pivoting; b is (n, k) or (n,). In `out`
/// (default: b's sharding).
template <class T>
  requires detail::solver_type<T>
DistArray<T> solve(const DistArray<T>& a, const DistArray<T>& b, const std::optional<NamedSharding>& out = std::nullopt) {
  const detail::ProfiledOp profiled("solve", a, b);
  // A^T factored, then A x = b as (A^T)^T x = b.
  DistArray<T> x = a.ndim() > 2 ? detail::batched_solve_like("solve", a, b, out, [](const auto& ab, const auto& bb) {
    return detail::batched_solve(ab, bb);
  }) : detail::solve_like("solve", a, b, out, [](const auto& grid, auto& pa, auto& pb) {
    const std::vector<int> pivots = detail::lu_of_transpose(grid, pa, "solve", true);
    const int n = int(pa.m), k = int(pb.n), one = 1;
    int info = 0;
    detail::dev::Scalapack<T>::getrs("T", &n, &k, pa.data(), &one, &one, pa.desc, pivots.data(), pb.data(), &one,
                                     &one, pb.desc, &info);
    DAX_CHECK(detail::agreed_info(grid, info) == 0, "solve: ScaLAPACK's p?getrs refused argument ", -info);
  });
  // The pullback: b's cotangent solves a^T gb = g, a's is -gb x^T.
  detail::record("solve", x, [&](auto need) {
    return [need, a, x](const DistArray<T>& g) {
      const DistArray<T> gb = solve(detail::transpose_last_two(a), g);
      return detail::Cotangents{
          need[0] ? detail::AnyArray(-matmul(detail::as_matrix(gb, a.ndim()),
                                             detail::transpose_last_two(detail::as_matrix(x, a.ndim()))))
                  : detail::AnyArray(),
          need[1] ? detail::AnyArray(gb) : detail::AnyArray()};
    };
  }, a, b);
  return x;
}

/// x with a x = b for a triangular `a` (jax.scipy.linalg.solve_triangular with lower = `lower`);
/// the other triangle of a is not read. b is (n, k) or (n,); in `out` (default: b's sharding).
template <class T>
  requires detail::solver_type<T>
DistArray<T> triangular_solve(const DistArray<T>& a, const DistArray<T>& b, bool lower = true,
                              const std::optional<NamedSharding>& out = std::nullopt) {
  const detail::ProfiledOp profiled("triangular_solve", a, b);
  // A^T (its triangle flipped) solved transposed.
  DistArray<T> x = a.ndim() > 2 ? detail::batched_solve_like("triangular_solve", a, b, out, [lower](const auto& ab, const auto& bb) {
    return detail::batched_triangular_solve(ab, bb, lower);
  }) : detail::solve_like("triangular_solve", a, b, out, [lower](const auto&, auto& pa, auto& pb) {
    const int n = int(pa.m), k = int(pb.n), one = 1;
    const T alpha = 1;
    detail::dev::Scalapack<T>::trsm("L", lower ? "U" : "L", "T", "N", &n, &k, &alpha, pa.data(), &one, &one, pa.desc,
                                    pb.data(), &one, &one, pb.desc);
  });
  // The pullback: b's cotangent solves T^T gb = g (a^T's other triangle), a's is -gb x^T on the
  // triangle that was read.
  detail::record("triangular_solve", x, [&](auto need) {
    return [need, a, x, lower](const DistArray<T>& g) {
      const DistArray<T> gb = triangular_solve(detail::transpose_last_two(a), g, !lower);
      detail::AnyArray ga;
      if (need[0]) {
        const auto full = -matmul(detail::as_matrix(gb, a.ndim()), detail::transpose_last_two(detail::as_matrix(x, a.ndim())));
        ga = detail::AnyArray(detail::times_triangle(full, T(1), T(1), lower));
      }
      return detail::Cotangents{ga, need[1] ? detail::AnyArray(gb) : detail::AnyArray()};
    };
  }, a, b);
  return x;
}

/// The lower-triangular L with a = L L^H (numpy.linalg.cholesky; zeros above the diagonal), for a
/// symmetric (Hermitian) positive definite `a`; only its lower triangle is read (and of its
/// diagonal only the real part). In `out` (default: a's sharding).
template <class T>
  requires detail::solver_type<T>
DistArray<T> cholesky(const DistArray<T>& a, const std::optional<NamedSharding>& out = std::nullopt) {
  const detail::ProfiledOp profiled("cholesky", a);
  detail::check_square(a, "cholesky");
  const NamedSharding target = out ? *out : detail::with_unreduced_axes(a.sharding(), a.ndim(), {});
  const Mesh& mesh = a.sharding().mesh();
  if (!mesh.contains(Runtime::current().rank())) return DistArray<T>(a.shape(), target, nullptr);
  if (numel(a.shape()) == 0) return reshard(a, target);
  DistArray<T> l = a.ndim() > 2 ? detail::on_batch(a, target, [](const auto& ab) { return detail::batched_cholesky(ab); })
                                : detail::cholesky_of_matrix(a, target);
  // The pullback (Murray 2016, for a read from the lower triangle): with G = tril(g) and Phi the
  // lower triangle with the diagonal halved, M = L^-T Phi(L^T G) L^-1, and the cotangent of a's
  // lower triangle is Phi(M + M^T) (zero above: that triangle is not read). Complex, in JAX's
  // convention (cotangents pair with changes as Re sum(g * da)): M = L^-T Phi(L^T G) conj(L)^-1 and
  // Phi(M + M^H), since a's lower entry is also its upper one conjugated; docs/numerics.md.
  detail::record("cholesky", l, [&](auto) {
    return [l](const DistArray<T>& g) {
      const auto lt = detail::transpose_last_two(l);
      const auto p = detail::times_triangle(matmul(lt, detail::times_triangle(g, T(1), T(1))), T(1), T(0.5));
      const auto x = triangular_solve(lt, p, false);  // L^-T P
      // (L^-H X^T)^T = X conj(L)^-1
      const auto m = detail::transpose_last_two(triangular_solve(detail::adjoint(l), detail::transpose_last_two(x), false));
      return detail::Cotangents{detail::AnyArray(detail::times_triangle(m + detail::adjoint(m), T(1), T(0.5)))};
    };
  }, a);
  return l;
}


/// The inverse (numpy.linalg.inv), by LU: p?getrf then p?getri. In `out` (default: a's sharding).
template <class T>
  requires detail::solver_type<T>
DistArray<T> inv(const DistArray<T>& a, const std::optional<NamedSharding>& out = std::nullopt) {
  const detail::ProfiledOp profiled("inv", a);
  detail::check_square(a, "inv");
  const NamedSharding target = out ? *out : detail::with_unreduced_axes(a.sharding(), a.ndim(), {});
  const Mesh& mesh = a.sharding().mesh();
  if (!mesh.contains(Runtime::current().rank())) return DistArray<T>(a.shape(), target, nullptr);
  if (numel(a.shape()) == 0) return reshard(a, target);
  DistArray<T> r = a.ndim() > 2 ? detail::on_batch(a, target, [](const auto& ab) { return detail::batched_inv(ab); })
                                : [&] {
                                    const auto& grid = detail::blacs_grid(mesh);
                                    // inv(A^T) = inv(A)^T: A^T inverted over the transposed grid reads back
                                    // row-major as inv(A).
                                    auto pa = detail::to_cyclic(a, grid, grid.normal(), true, grid.context_t,
                                                                detail::block_size(a.shape()[0], grid.shape), "inv");
                                    const std::vector<int> pivots = detail::lu_of_transpose(grid, pa, "inv", true);
                                    detail::invert_lu(grid, pa, pivots, "inv");
                                    return detail::from_cyclic(pa, grid, mesh, target);
                                  }();
  // The pullback: -inv(a)^T g inv(a)^T.
  detail::record("inv", r, [&](auto) {
    return [r](const DistArray<T>& g) {
      const auto rt = detail::transpose_last_two(r);
      return detail::Cotangents{detail::AnyArray(-matmul(matmul(rt, g), rt))};
    };
  }, a);
  return r;
}

/// numpy.linalg.slogdet: the sign (+1, -1, or 0 for a singular matrix; for a complex matrix a
/// complex number of modulus 1, or 0) and log |det a| (real for a complex matrix, as NumPy's), each
/// a scalar replicated over a's mesh; log |det a| differentiates, and a complex matrix's sign too
/// (det through both).
template <class T>
struct SignLogDet {
  DistArray<T> sign;
  DistArray<detail::real_t<T>> logabsdet;
};

}  // namespace dax::linalg

namespace dax::detail {

/// slogdet of each matrix of a batch (..., n, n): sign and log |det| of the batch's shape, split
/// as a's batch dimensions are. The pullbacks are slogdet's, each matrix's inverse made once for
/// both (from a, by the batched inv).
template <class T>
linalg::SignLogDet<T> batched_slogdet_traced(const DistArray<T>& a) {
  using R = real_t<T>;
  const Mesh& mesh = a.sharding().mesh();
  const size_t batch = a.ndim() - 2;
  const Shape shape(a.shape().begin(), a.shape().begin() + batch);
  std::vector<std::vector<int>> dims = dims_of(a.sharding(), a.ndim());
  dims.resize(batch);
  const NamedSharding target = make_sharding(mesh, dims, {});
  if (!mesh.contains(Runtime::current().rank()))
    return {DistArray<T>(shape, target, nullptr), DistArray<R>(shape, target, nullptr)};
  check_solver_backend();
  if (numel(a.shape()) == 0) return {full<T>(shape, T(1), target), full<R>(shape, R(0), target)};
  auto [sign, logabs] = batched_slogdet(reshard_untraced(a, batched_layout(a.sharding(), a.ndim())));
  int64_t singular = 0;  // the matrices with no gradient, counted over the mesh (each is on one device)
  for (const R v : logabs.local_data()) singular += v == -std::numeric_limits<R>::infinity();
  Runtime::current().mesh_group(mesh).all_reduce(nullptr, &singular, 1, DType::int64, ReduceOp::sum);
  linalg::SignLogDet<T> out{reshard_untraced(sign, target), reshard_untraced(logabs, target)};
  auto made = std::make_shared<std::optional<DistArray<T>>>();
  const auto inverse_transposed = [a, made, singular, count = numel(shape)]() {
    DAX_CHECK(singular == 0, "slogdet's gradient: ", singular, " of the batch's ", count,
              " matrices singular (log |det| is -inf), so it has none");
    if (!*made) *made = transpose_last_two(linalg::inv(a));
    return **made;
  };
  record("slogdet", out.logabsdet, [&](auto) {
    return [inverse_transposed](const DistArray<R>& g) {
      return Cotangents{AnyArray(inverse_transposed() * per_matrix_factor(in_element_type<T>(g)))};
    };
  }, a);
  if constexpr (is_complex_v<T>)
    record("slogdet", out.sign, [&](auto) {
      return [inverse_transposed, sign_array = out.sign](const DistArray<T>& g) {
        const auto turn = dax::complex(zeros<R>(g.shape(), g.sharding()), dax::imag(g * sign_array));  // i Im(g sign)
        return Cotangents{AnyArray(inverse_transposed() * per_matrix_factor(turn))};
      };
    }, a);
  return out;
}

}  // namespace dax::detail

namespace dax::linalg {

template <class T>
  requires detail::solver_type<T>
SignLogDet<T> slogdet(const DistArray<T>& a) {
  using R = detail::real_t<T>;
  const detail::ProfiledOp profiled("slogdet", a);
  detail::check_square(a, "slogdet");
  if (a.ndim() > 2) return detail::batched_slogdet_traced(a);
  const Mesh& mesh = a.sharding().mesh();
  const NamedSharding scalar(mesh, P());
  if (!mesh.contains(Runtime::current().rank())) return {DistArray<T>({}, scalar, nullptr), DistArray<R>({}, scalar, nullptr)};
  if (a.shape()[0] == 0) return {full<T>({}, T(1), scalar), full<R>({}, R(0), scalar)};
  const auto& grid = detail::blacs_grid(mesh);
  // det(A^T) = det(A): A^T's LU over the transposed grid.
  auto pa = detail::to_cyclic(a, grid, grid.normal(), true, grid.context_t, detail::block_size(a.shape()[0], grid.shape),
                              "slogdet");
  const std::vector<int> pivots = detail::lu_of_transpose(grid, pa, "slogdet", false);
  // This rank's diagonal of U (each entry on exactly one rank) and, on one grid row, its share of
  // the row swaps (A^T's pivots, one per local row of A^T, i.e. per local column of A here). A
  // complex matrix's sign is the product of the entries' phases: their arguments summed (mod 2 pi).
  double sums[2] = {0, 0};        // log |u| and, complex, arg u summed
  int64_t counts[3] = {0, 0, 0};  // negative diagonal entries (real), zero ones, swaps
  for (int64_t c = 0; c < pa.cols; ++c) {
    const int64_t j = pa.global_col(c);
    if (grid.row == 0 && pivots[c] != j + 1) ++counts[2];
    if (detail::block_owner(j, pa.nb, pa.view.prows) == pa.view.myrow) {  // U(j, j) is here: at its local row, found by index math
      const T u = pa.at(detail::block_local(j, pa.nb, pa.view.prows), c);
      if (u == T(0)) ++counts[1];
      else sums[0] += std::log(double(std::abs(u)));
      if constexpr (detail::is_complex_v<T>) sums[1] += double(std::arg(u));
      else if (u < 0) ++counts[0];
    }
  }
  grid.group->all_reduce(nullptr, sums, 2, DType::float64, detail::ReduceOp::sum);
  grid.group->all_reduce(nullptr, counts, 3, DType::int64, detail::ReduceOp::sum);
  const bool singular = counts[1] > 0;  // an exact zero on U's diagonal (p?getrf's info > 0)
  const R flip = (counts[0] + counts[2]) % 2 == 0 ? R(1) : R(-1);
  T sign = singular ? T(0) : T(flip);
  if constexpr (detail::is_complex_v<T>)
    if (!singular) sign = flip * T(std::polar(R(1), R(std::remainder(sums[1], 2 * 3.14159265358979323846))));
  const R logabs = singular ? -std::numeric_limits<R>::infinity() : R(sums[0]);
  SignLogDet<T> out{full<T>({}, sign, scalar), full<R>({}, logabs, scalar)};
  // The pullbacks. log|det a|'s: g inv(a)^T, inverted from the LU factors kept here (p?getri on a
  // copy: no second deal and factorization). A real sign is piecewise constant (none); a complex
  // one, e^(i theta) with d theta = Im tr(inv(a) da), gives i Im(g sign) inv(a)^T in JAX's
  // convention (the two add up to det's g det inv(a)^T through det = sign exp(logabsdet)). A
  // singular a has none (an error, where JAX gives infinities).
  // A complex det's gradient takes both pullbacks: the inverse is made once and kept for the other
  // (with the tape that holds them).
  auto lu = std::make_shared<const detail::CyclicPiece<T>>(pa);
  auto made = std::make_shared<std::optional<DistArray<T>>>();
  const auto inverse_transposed = [lu, made, pivots, mesh, singular,
                                   target = detail::with_unreduced_axes(a.sharding(), 2, {})]() {
    DAX_CHECK(!singular, "slogdet's gradient: the matrix is singular (log |det a| is -inf), so it has none");
    if (*made) return **made;
    const auto& grid = detail::blacs_grid(mesh);
    detail::CyclicPiece<T> inverse = *lu;  // p?getri overwrites its input: a copy of the factors
    const size_t bytes = size_t(std::max<int64_t>(lu->rows * lu->cols, 1)) * sizeof(T);
    inverse.storage = detail::dev::allocate(bytes);
    detail::dev::copy(inverse.storage->data(), lu->storage->data(), bytes);
    detail::invert_lu(grid, inverse, pivots, "slogdet's gradient");
    *made = transpose(detail::from_cyclic(inverse, grid, mesh, target));
    return **made;
  };
  detail::record("slogdet", out.logabsdet, [&](auto) {
    return [inverse_transposed](const DistArray<R>& g) {
      return detail::Cotangents{detail::AnyArray(inverse_transposed() * detail::in_element_type<T>(g))};
    };
  }, a);
  if constexpr (detail::is_complex_v<T>)
    detail::record("slogdet", out.sign, [&](auto) {
      return [inverse_transposed, sign_array = out.sign](const DistArray<T>& g) {
        const auto turn = dax::complex(zeros<R>({}, g.sharding()), imag(g * sign_array));  // i Im(g sign)
        return detail::Cotangents{detail::AnyArray(inverse_transposed() * turn)};
      };
    }, a);
  return out;
}

/// The determinant (numpy.linalg.det): sign * exp(logabsdet) of slogdet, a replicated scalar.
template <class T>
  requires detail::solver_type<T>
DistArray<T> det(const DistArray<T>& a) {
  const auto s = slogdet(a);
  return s.sign * detail::in_element_type<T>(exp(s.logabsdet));
}

/// numpy.linalg.eigh: eigenvalues ascending (a replicated (n,) array, real for a complex matrix) and
/// eigenvectors as columns (an (n, n) array in `out`, default a's sharding), of a symmetric
/// (Hermitian) `a` read from its lower triangle.
template <class T>
struct Eigh {
  DistArray<detail::real_t<T>> eigenvalues;
  DistArray<T> eigenvectors;
};

template <class T>
  requires detail::solver_type<T>
Eigh<T> eigh(const DistArray<T>& a, const std::optional<NamedSharding>& out = std::nullopt) {
  using R = detail::real_t<T>;
  const detail::ProfiledOp profiled("eigh", a);
  detail::check_square(a, "eigh");
  const Mesh& mesh = a.sharding().mesh();
  const NamedSharding target = out ? *out : detail::with_unreduced_axes(a.sharding(), a.ndim(), {});
  // Eigenvalues: replicated for one matrix, split as a's batch dimensions for a batch.
  const NamedSharding value_sharding = a.ndim() > 2 ? detail::batch_with_whole(a.sharding(), a.ndim(), 1) : NamedSharding(mesh, P());
  const Shape value_shape(a.shape().begin(), a.shape().end() - 1);
  if (!mesh.contains(Runtime::current().rank()))
    return {DistArray<R>(value_shape, value_sharding, nullptr), DistArray<T>(a.shape(), target, nullptr)};
  if (numel(a.shape()) == 0) return {zeros<R>(value_shape, value_sharding), reshard(a, target)};
  auto decomposed = [&] {
    if (a.ndim() == 2) return detail::eigh_of_matrix(a, target);
    detail::check_solver_backend();
    auto batched = detail::batched_eigh(detail::reshard_untraced(a, detail::batched_layout(a.sharding(), a.ndim())));
    return std::pair{detail::reshard_untraced(batched.first, value_sharding), detail::reshard_untraced(batched.second, target)};
  }();
  DistArray<R> values = std::move(decomposed.first);
  DistArray<T> vectors = std::move(decomposed.second);
  // The pullbacks (for a read from the lower triangle, as cholesky's): with K = conj(V) (diag(gw) +
  // F o (V^T gV)) V^T, F_ij = 1 / (w_j - w_i) off the diagonal, a's cotangent is Phi(K + K^H)
  // (real: V (...) V^T and Phi(K + K^T), Giles 2008). A complex eigenvector's phase is free: as in
  // JAX, its gradient is that of the choice whose V^H dV has a zero diagonal, right for losses the
  // phases leave alone.
  const auto symmetric_part = [](const DistArray<T>& k) {
    return detail::times_triangle(k + detail::adjoint(k), T(1), T(0.5));
  };
  detail::record("eigh", values, [&](auto) {
    return [vectors, symmetric_part](const DistArray<R>& gw) {
      // conj(V) diag(gw) V^T: gw scales conj(V)'s columns.
      const auto k = matmul(detail::conjugated(vectors) * detail::as_row(detail::in_element_type<T>(gw)),
                            detail::transpose_last_two(vectors));
      return detail::Cotangents{detail::AnyArray(symmetric_part(k))};
    };
  }, a);
  detail::record("eigh", vectors, [&](auto) {
    return [vectors, w = detail::in_element_type<T>(values), symmetric_part](const DistArray<T>& gv) {
      const auto f = detail::reciprocal_off_diagonal(detail::as_row(w) - detail::as_column(w));  // 1 / (w_j - w_i)
      const auto vt = detail::transpose_last_two(vectors);
      const auto k = matmul(matmul(detail::conjugated(vectors), f * matmul(vt, gv)), vt);
      return detail::Cotangents{detail::AnyArray(symmetric_part(k))};
    };
  }, a);
  return {values, vectors};
}

}  // namespace dax::linalg
