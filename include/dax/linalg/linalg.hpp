// dax::linalg on the CPU through ScaLAPACK: a matrix of any sharding is resharded to rows split over
// every device of its mesh (the planner's fewest bytes), dealt into ScaLAPACK's block-cyclic layout
// on a process grid made from the mesh (one all-to-all), factored or solved there, and brought back
// the same way to the sharding asked for (the input's by default). Errors (not positive definite,
// singular) are dax::Errors on every rank. float and double; docs/numerics.md.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <dax/array/creation.hpp>
#include <dax/array/profile_hook.hpp>
#include <dax/array/reshard.hpp>
#include <dax/backend/cpu/scalapack.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/comm/mpi_communicator.hpp>
#include <dax/linalg/block_cyclic.hpp>

namespace dax::detail {

/// A BLACS grid over every device of a mesh, made once per mesh (rows x cols, "Row" order: group
/// rank r is grid process (r / cols, r % cols)).
struct BlacsGrid {
  ProcessGrid shape;
  int context = -1, row = 0, col = 0;
  Communicator* group = nullptr;
  std::vector<int> axes;
  std::string axes_text;  // "('x', 'y')": the group, as comm_stats names it
};

inline const BlacsGrid& blacs_grid(const Mesh& mesh) {
  static std::map<std::string, std::unique_ptr<BlacsGrid>> grids;
  const std::string key = to_string(mesh);
  auto& g = grids[key];
  if (!g) {
    DAX_CHECK(!dev::on_gpu() && !dev::on_meta(),
              "dax::linalg: runs on the CPU backend (ScaLAPACK); this runtime's backend has no solver yet");
    auto made = std::make_unique<BlacsGrid>();
    made->axes_text = "(";
    for (size_t a = 0; a < mesh.axis_names().size(); ++a) {
      made->axes.push_back(static_cast<int>(a));
      made->axes_text += cat(a ? ", '" : "'", mesh.axis_names()[a], "'");
    }
    made->axes_text += mesh.axis_names().size() == 1 ? ",)" : ")";
    made->group = &Runtime::current().group(mesh, made->axes);
    auto* mpi = dynamic_cast<MpiCommunicator*>(made->group);
    DAX_CHECK(mpi != nullptr, "dax::linalg: the mesh's communicator is not an MPI one (ScaLAPACK needs MPI)");
    made->shape = process_grid(made->group->size());
    made->context = Csys2blacs_handle(mpi->native());
    Cblacs_gridinit(&made->context, "Row", made->shape.rows, made->shape.cols);
    int rows = 0, cols = 0;
    Cblacs_gridinfo(made->context, &rows, &cols, &made->row, &made->col);
    g = std::move(made);
  }
  return *g;
}

/// This rank's block-cyclic piece of an (m, n) matrix: column-major, `ld` rows.
template <class T>
struct CyclicPiece {
  std::vector<T> data;
  int64_t m = 0, n = 0, nb = 1, rows = 0, cols = 0, ld = 1;
  int desc[9] = {};
};

/// The global columns each grid column holds, in local order.
inline std::vector<std::vector<int64_t>> columns_by_owner(int64_t n, int64_t nb, int p) {
  std::vector<std::vector<int64_t>> out(p);
  for (int64_t j = 0; j < n; ++j) out[block_owner(j, nb, p)].push_back(j);
  return out;
}

/// Between rows split over the grid's devices (group rank g holds row chunk g) and the block-cyclic
/// layout: one all-to-all either way. `to_cyclic` deals `rows_data` (this rank's rows, row-major)
/// into `piece`; otherwise gathers `piece` back into `rows_data`.
template <class T>
void cyclic_exchange(const BlacsGrid& grid, const Shape& shape, std::vector<T>& rows_data, CyclicPiece<T>& piece,
                     bool to_cyclic, const char* op) {
  const int64_t m = shape[0], n = shape[1], nb = piece.nb;
  const int P = grid.shape.rows, Q = grid.shape.cols, size = P * Q, me = grid.group->size() > 0 ? grid.group->rank() : 0;
  const auto cols = columns_by_owner(n, nb, Q);
  const auto row_range = [&](int g) { return chunk_piece(m, size, g); };
  const Slice mine = row_range(me);
  // Rows of mine for each destination grid row, and of each source's chunk for my grid row.
  std::vector<int64_t> send_counts(size), send_displs(size), recv_counts(size), recv_displs(size);
  for (int d = 0; d < size; ++d) {
    int64_t rows_to = 0, rows_from = 0;
    for (int64_t i = mine.start; i < mine.stop; ++i) rows_to += block_owner(i, nb, P) == d / Q;
    const Slice theirs = row_range(d);
    for (int64_t i = theirs.start; i < theirs.stop; ++i) rows_from += block_owner(i, nb, P) == grid.row;
    send_counts[d] = rows_to * int64_t(cols[d % Q].size());
    recv_counts[d] = rows_from * int64_t(cols[grid.col].size());
  }
  if (!to_cyclic) std::swap(send_counts, recv_counts);
  for (int d = 1; d < size; ++d) {
    send_displs[d] = send_displs[d - 1] + send_counts[d - 1];
    recv_displs[d] = recv_displs[d - 1] + recv_counts[d - 1];
  }
  // The row-chunk side's buffer, in (destination, row, column) order, and the cyclic side's, in
  // (source, row, column) order: the same order seen from both ends.
  std::vector<T> rows_side(mine.size() * n), cyclic_side(std::max<int64_t>(piece.rows * piece.cols, 0));
  std::vector<int64_t> at(size);
  const auto walk_rows = [&](auto&& visit) {  // element (i, j) of my rows and its place in rows_side
    for (int d = 0; d < size; ++d) at[d] = (to_cyclic ? send_displs : recv_displs)[d];
    for (int64_t i = mine.start; i < mine.stop; ++i) {
      const int prow = block_owner(i, nb, P);
      for (int q = 0; q < Q; ++q)
        for (int64_t j : cols[q]) visit((i - mine.start) * n + j, at[prow * Q + q]++);
    }
  };
  const auto walk_cyclic = [&](auto&& visit) {  // element of my block-cyclic piece and its place in cyclic_side
    for (int s = 0; s < size; ++s) {
      int64_t k = (to_cyclic ? recv_displs : send_displs)[s];
      const Slice theirs = row_range(s);
      for (int64_t i = theirs.start; i < theirs.stop; ++i) {
        if (block_owner(i, nb, P) != grid.row) continue;
        const int64_t li = block_local(i, nb, P);
        for (size_t c = 0; c < cols[grid.col].size(); ++c) visit(li + int64_t(c) * piece.ld, k++);
      }
    }
  };
  if (to_cyclic) walk_rows([&](int64_t src, int64_t dst) { rows_side[dst] = rows_data[src]; });
  else walk_cyclic([&](int64_t src, int64_t dst) { cyclic_side[dst] = piece.data[src]; });
  const int64_t started = collective_start();
  if (to_cyclic)
    grid.group->all_to_allv(rows_side.data(), send_counts, send_displs, cyclic_side.data(), recv_counts, recv_displs,
                            dtype_v<T>);
  else
    grid.group->all_to_allv(cyclic_side.data(), send_counts, send_displs, rows_side.data(), recv_counts, recv_displs,
                            dtype_v<T>);
  int64_t received = 0;
  for (int d = 0; d < size; ++d) received += d == me ? 0 : recv_counts[d];
  (void)op;
  count_collective("all_to_all", grid.axes_text, received * int64_t(sizeof(T)), started, size);
  if (to_cyclic) walk_cyclic([&](int64_t dst, int64_t src) { piece.data[dst] = cyclic_side[src]; });
  else walk_rows([&](int64_t dst, int64_t src) { rows_data[dst] = rows_side[src]; });
}

/// The rows-over-every-device layout of a matrix on `mesh`.
inline NamedSharding rows_over_mesh(const Mesh& mesh) {
  std::vector<std::string> names(mesh.axis_names().begin(), mesh.axis_names().end());
  return NamedSharding(mesh, P(axes(names), none));
}

/// `x` (m, n) dealt into the block-cyclic layout of `grid` with nb x nb blocks.
template <class T>
CyclicPiece<T> to_cyclic(const DistArray<T>& x, const BlacsGrid& grid, int64_t nb, const char* op) {
  CyclicPiece<T> piece;
  piece.m = x.shape()[0];
  piece.n = x.shape()[1];
  piece.nb = nb;
  piece.rows = block_count(piece.m, nb, grid.row, grid.shape.rows);
  piece.cols = block_count(piece.n, nb, grid.col, grid.shape.cols);
  piece.ld = std::max<int64_t>(1, piece.rows);
  piece.data.assign(piece.ld * std::max<int64_t>(piece.cols, 1), T(0));
  const DistArray<T> rows = reshard(x, rows_over_mesh(x.sharding().mesh()));
  std::vector<T> local = rows.local_to_host();
  cyclic_exchange(grid, x.shape(), local, piece, true, op);
  const int m = int(piece.m), n = int(piece.n), b = int(nb), zero = 0, ld = int(piece.ld);
  int info = 0;
  descinit_(piece.desc, &m, &n, &b, &b, &zero, &zero, &grid.context, &ld, &info);
  DAX_CHECK(info == 0, op, ": ScaLAPACK's descinit refused a ", m, " x ", n, " matrix (info ", info, ")");
  return piece;
}

/// The block-cyclic `piece` back as a DistArray under `out`.
template <class T>
DistArray<T> from_cyclic(CyclicPiece<T>& piece, const BlacsGrid& grid, const Mesh& mesh, const NamedSharding& out,
                         const char* op) {
  const Shape shape{piece.m, piece.n};
  const NamedSharding rows = rows_over_mesh(mesh);
  const Slice mine = chunk_piece(piece.m, grid.group->size(), grid.group->rank());
  std::vector<T> local(mine.size() * piece.n);
  cyclic_exchange(grid, shape, local, piece, false, op);
  return reshard(from_local(local, shape, rows), out);
}

/// The info every rank agrees on (ScaLAPACK's is global already; the largest, to be sure).
inline int agreed_info(const BlacsGrid& grid, int info) {
  int64_t v = info;
  grid.group->all_reduce(nullptr, &v, 1, DType::int64, ReduceOp::max);
  return static_cast<int>(v);
}

template <class T>
void check_square(const DistArray<T>& a, const char* op) {
  DAX_CHECK(a.ndim() == 2 && a.shape()[0] == a.shape()[1], op, ": expected a square matrix, got shape ",
            to_string(a.shape()));
}

}  // namespace dax::detail

namespace dax::linalg {

/// The lower-triangular L with a = L L^T (numpy.linalg.cholesky; zeros above the diagonal), for a
/// symmetric positive definite `a`; only its lower triangle is read. In `out` (default: a's sharding).
template <class T>
  requires std::is_same_v<T, float> || std::is_same_v<T, double>
DistArray<T> cholesky(const DistArray<T>& a, const std::optional<NamedSharding>& out = std::nullopt) {
  const detail::ProfiledOp profiled("cholesky", a);
  detail::check_square(a, "cholesky");
  const NamedSharding target = out ? *out : detail::with_unreduced_axes(a.sharding(), 2, {});
  const Mesh& mesh = a.sharding().mesh();
  if (!mesh.contains(Runtime::current().rank())) return DistArray<T>(a.shape(), target, nullptr);
  if (a.shape()[0] == 0) return reshard(a, target);
  const auto& grid = detail::blacs_grid(mesh);
  auto piece = detail::to_cyclic(a, grid, detail::block_size(a.shape()[0], grid.shape), "cholesky");
  const int n = int(piece.m), one = 1;
  int info = 0;
  // ScaLAPACK stores column-major: its 'L' is the lower triangle in the global (row, column) sense.
  detail::cpu::Scalapack<T>::potrf("L", &n, piece.data.data(), &one, &one, piece.desc, &info);
  info = detail::agreed_info(grid, info);
  DAX_CHECK(info <= 0, "cholesky: the matrix is not positive definite (its leading minor of order ", info,
            " is not positive)");
  DAX_CHECK(info == 0, "cholesky: ScaLAPACK's p?potrf refused argument ", -info);
  for (int64_t c = 0; c < piece.cols; ++c) {  // zeros above the diagonal, as NumPy returns
    const int64_t j = (c / piece.nb * grid.shape.cols + grid.col) * piece.nb + c % piece.nb;
    for (int64_t r = 0; r < piece.rows; ++r) {
      const int64_t i = (r / piece.nb * grid.shape.rows + grid.row) * piece.nb + r % piece.nb;
      if (j > i) piece.data[r + c * piece.ld] = T(0);
    }
  }
  return detail::from_cyclic(piece, grid, mesh, target, "cholesky");
}

/// x with a x = b (numpy.linalg.solve) by LU with partial pivoting; b is (n, k) or (n,). In `out`
/// (default: b's sharding).
template <class T>
  requires std::is_same_v<T, float> || std::is_same_v<T, double>
DistArray<T> solve(const DistArray<T>& a, const DistArray<T>& b, const std::optional<NamedSharding>& out = std::nullopt) {
  const detail::ProfiledOp profiled("solve", a, b);
  detail::check_square(a, "solve");
  DAX_CHECK(b.ndim() == 1 || b.ndim() == 2, "solve: expected b of rank 1 or 2, got shape ", to_string(b.shape()));
  DAX_CHECK(b.shape()[0] == a.shape()[0], "solve: a is ", to_string(a.shape()), " but b has ", b.shape()[0],
            " rows (expected ", a.shape()[0], ")");
  DAX_CHECK(a.sharding().mesh() == b.sharding().mesh(), "solve: a and b are on different meshes: ",
            to_string(a.sharding().mesh()), " and ", to_string(b.sharding().mesh()));
  const NamedSharding target = out ? *out : detail::with_unreduced_axes(b.sharding(), b.ndim(), {});
  const bool vector = b.ndim() == 1;
  const DistArray<T> bm = vector ? reshape(b, {b.shape()[0], 1}) : b;
  const Mesh& mesh = a.sharding().mesh();
  if (!mesh.contains(Runtime::current().rank())) return DistArray<T>(b.shape(), target, nullptr);
  if (a.shape()[0] == 0 || bm.shape()[1] == 0) return reshard(b, target);
  const auto& grid = detail::blacs_grid(mesh);
  const int64_t nb = detail::block_size(a.shape()[0], grid.shape);
  auto pa = detail::to_cyclic(a, grid, nb, "solve");
  auto pb = detail::to_cyclic(bm, grid, nb, "solve");
  const int n = int(pa.m), k = int(pb.n), one = 1;
  std::vector<int> pivots(pa.rows + nb);
  int info = 0;
  detail::cpu::Scalapack<T>::gesv(&n, &k, pa.data.data(), &one, &one, pa.desc, pivots.data(), pb.data.data(), &one,
                                  &one, pb.desc, &info);
  info = detail::agreed_info(grid, info);
  DAX_CHECK(info <= 0, "solve: the matrix is singular (U(", info, ", ", info, ") of its LU factorization is zero)");
  DAX_CHECK(info == 0, "solve: ScaLAPACK's p?gesv refused argument ", -info);
  const NamedSharding mat_target = vector ? detail::rows_over_mesh(mesh) : target;
  DistArray<T> x = detail::from_cyclic(pb, grid, mesh, mat_target, "solve");
  return vector ? reshard(reshape(x, {x.shape()[0]}), target) : x;
}

/// x with a x = b for a triangular `a` (jax.scipy.linalg.solve_triangular with lower = `lower`);
/// the other triangle of a is not read. b is (n, k) or (n,); in `out` (default: b's sharding).
template <class T>
  requires std::is_same_v<T, float> || std::is_same_v<T, double>
DistArray<T> triangular_solve(const DistArray<T>& a, const DistArray<T>& b, bool lower = true,
                              const std::optional<NamedSharding>& out = std::nullopt) {
  const detail::ProfiledOp profiled("triangular_solve", a, b);
  detail::check_square(a, "triangular_solve");
  DAX_CHECK(b.ndim() == 1 || b.ndim() == 2, "triangular_solve: expected b of rank 1 or 2, got shape ",
            to_string(b.shape()));
  DAX_CHECK(b.shape()[0] == a.shape()[0], "triangular_solve: a is ", to_string(a.shape()), " but b has ",
            b.shape()[0], " rows (expected ", a.shape()[0], ")");
  const NamedSharding target = out ? *out : detail::with_unreduced_axes(b.sharding(), b.ndim(), {});
  const bool vector = b.ndim() == 1;
  const DistArray<T> bm = vector ? reshape(b, {b.shape()[0], 1}) : b;
  const Mesh& mesh = a.sharding().mesh();
  if (!mesh.contains(Runtime::current().rank())) return DistArray<T>(b.shape(), target, nullptr);
  if (a.shape()[0] == 0 || bm.shape()[1] == 0) return reshard(b, target);
  const auto& grid = detail::blacs_grid(mesh);
  const int64_t nb = detail::block_size(a.shape()[0], grid.shape);
  auto pa = detail::to_cyclic(a, grid, nb, "triangular_solve");
  auto pb = detail::to_cyclic(bm, grid, nb, "triangular_solve");
  const int n = int(pa.m), k = int(pb.n), one = 1;
  const T alpha = 1;
  detail::cpu::Scalapack<T>::trsm("L", lower ? "L" : "U", "N", "N", &n, &k, &alpha, pa.data.data(), &one, &one,
                                  pa.desc, pb.data.data(), &one, &one, pb.desc);
  const NamedSharding mat_target = vector ? detail::rows_over_mesh(mesh) : target;
  DistArray<T> x = detail::from_cyclic(pb, grid, mesh, mat_target, "triangular_solve");
  return vector ? reshard(reshape(x, {x.shape()[0]}), target) : x;
}

}  // namespace dax::linalg
