// dax::linalg on stacks of matrices (..., m, n), as jnp.linalg takes them: the batch is split over
// the mesh and each device runs LAPACK on its own whole matrices (no process grid: a batch of small
// matrices is what ScaLAPACK's deal would only slow down). One move in (the mesh axes that split
// a matrix go to the first batch dimension, with every axis nothing splits), one move back.
// Errors (a matrix not positive definite, singular) are the first failing matrix's, in batch
// order, on every rank. linalg.hpp's routines call these for rank > 2; their pullbacks are the
// same formulas, written over the last two dimensions.
#pragma once

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <dax/array/creation.hpp>
#include <dax/array/reshard.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/backend/scalapack_ops.hpp>
#include <dax/ops/complex.hpp>
#include <dax/sharding/build.hpp>

namespace dax::detail {

/// The layout a batched routine runs in: x's batch dimensions split as they are, plus every mesh
/// axis they do not use (those that split the matrices and those that split nothing) on the first
/// batch dimension, so each device holds whole matrices and the work spreads over the mesh.
inline NamedSharding batched_layout(const NamedSharding& s, size_t ndim) {
  std::vector<std::vector<int>> dims = dims_of(s, ndim);
  std::vector<int> used;
  for (size_t d = 0; d + 2 < ndim; ++d) used.insert(used.end(), dims[d].begin(), dims[d].end());
  for (int a = 0; a < s.mesh().num_axes(); ++a)
    if (!has_axis(used, a) && s.mesh().axis_size(a) > 1) dims[0].push_back(a);
  dims[ndim - 2].clear();
  dims[ndim - 1].clear();
  return make_sharding(s.mesh(), dims, {});
}

/// The batch dimensions of `layout` (a batched_layout of rank `ndim`) followed by `whole` unsplit
/// dimensions: a right-hand side's layout (whole = 2, or 1 for vectors), or slogdet's (whole = 0).
inline NamedSharding batch_with_whole(const NamedSharding& layout, size_t ndim, size_t whole) {
  std::vector<std::vector<int>> dims = dims_of(layout, ndim);
  dims.resize(ndim - 2 + whole);
  for (size_t d = ndim - 2; d < dims.size(); ++d) dims[d].clear();
  return make_sharding(layout.mesh(), dims, {});
}

/// The global position, in batch order, of this device's matrix `t` (its pieces are row-major
/// over the batch box `box`'s first `batch` dimensions).
inline int64_t global_matrix(const Box& box, const Shape& shape, size_t batch, int64_t t) {
  std::vector<int64_t> at(batch);
  for (size_t d = batch; d-- > 0;) {
    const int64_t extent = box[d].size();
    at[d] = box[d].start + t % extent;
    t /= extent;
  }
  int64_t flat = 0;
  for (size_t d = 0; d < batch; ++d) flat = flat * shape[d] + at[d];
  return flat;
}

/// "(i, j)": batch position `flat` of `shape`'s first `batch` dimensions.
inline std::string batch_position(int64_t flat, const Shape& shape, size_t batch) {
  std::vector<int64_t> at(batch);
  for (size_t d = batch; d-- > 0;) {
    at[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::string text = "(";
  for (size_t d = 0; d < batch; ++d) text += (d ? ", " : "") + std::to_string(at[d]);
  return text + (batch == 1 ? ",)" : ")");
}

/// The first failing matrix of a batch over the whole mesh (none: matrix -1), so that every rank
/// raises the same error: each device's first (matrix, LAPACK info), the smallest matrix wins.
struct BatchFailure {
  int64_t matrix = -1;
  int info = 0;
  void note(int64_t m, int i) {
    if (i != 0 && matrix < 0) {
      matrix = m;
      info = i;
    }
  }
};

inline BatchFailure agreed_failure(const Mesh& mesh, const BatchFailure& mine) {
  constexpr int64_t kInfoSpan = int64_t(1) << 33;  // info + 2^32 in the low bits: negative ones too
  int64_t key = mine.matrix < 0 ? std::numeric_limits<int64_t>::max()
                                : mine.matrix * kInfoSpan + (int64_t(mine.info) + (int64_t(1) << 32));
  Runtime::current().mesh_group(mesh).all_reduce(nullptr, &key, 1, DType::int64, ReduceOp::min);
  if (key == std::numeric_limits<int64_t>::max()) return {};
  return {key / kInfoSpan, int(key % kInfoSpan - (int64_t(1) << 32))};
}

/// Copies the row-major (rows, cols) matrix `from` into `to` transposed (`to` row-major (cols,
/// rows)): row-major data read column-major is the transpose, which is how LAPACK sees it.
template <class T>
void transpose_into(const T* from, int64_t rows, int64_t cols, T* to) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) to[j * rows + i] = from[i * cols + j];
}

/// Runs `each(const T* in, Out* out, int64_t t, int64_t matrix)` on every matrix of this device's piece of `x`
/// (in batched_layout; t counts them here, matrix in the whole batch), writing the piece of a result of `out_shape` in `out_layout` (its batch
/// dimensions those of x; `out_matrix` elements per matrix).
template <class T, class Out = T, class Each>
DistArray<Out> per_matrix(const DistArray<T>& x, const Shape& out_shape, const NamedSharding& out_layout,
                          int64_t out_matrix, Each&& each) {
  const size_t batch = x.ndim() - 2;
  const int64_t in_matrix = x.shape()[batch] * x.shape()[batch + 1];
  return make_local<Out>(out_shape, out_layout, [&](Out* data, const Box&) {
    const T* in = x.local_data().data();
    const int64_t count = in_matrix == 0 ? 0 : x.local_size() / in_matrix;
    for (int64_t t = 0; t < count; ++t)
      each(in + t * in_matrix, data + t * out_matrix, t, global_matrix(x.local_index(), x.shape(), batch, t));
  });
}

/// The LU factors of A^T (row-major A, read column-major) in place in `lu`, A's n x n matrix; the
/// pivots in `pivots`. Returns getrf's info (> 0: U has an exact zero on its diagonal).
template <class T>
int lu_in_place(const T* a, int n, T* lu, std::vector<int>& pivots) {
  std::copy(a, a + int64_t(n) * n, lu);
  pivots.resize(std::max(n, 1));
  int info = 0;
  dev::Lapack<T>::getrf(&n, &n, lu, &n, pivots.data(), &info);
  return info;
}

/// L with a = L L^H for each matrix (lower triangle read), zeros above the diagonal; `a` in
/// batched_layout. As the grid's path: potrf("U") of A^T = conj(A) gives U with U^H U = A^T, and
/// U read back row-major is U^T = L.
template <class T>
DistArray<T> batched_cholesky(const DistArray<T>& a) {
  const int n = int(a.shape().back());
  BatchFailure failed;
  DistArray<T> l = per_matrix(a, a.shape(), a.sharding(), int64_t(n) * n, [&](const T* in, T* out, int64_t, int64_t m) {
    std::copy(in, in + int64_t(n) * n, out);
    int info = 0;
    dev::Lapack<T>::potrf("U", &n, out, &n, &info);
    failed.note(m, info);
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) out[int64_t(i) * n + j] = T(0);
  });
  const BatchFailure first = agreed_failure(a.sharding().mesh(), failed);
  const size_t batch = a.ndim() - 2;
  DAX_CHECK(first.info <= 0, "cholesky: the batch's matrix ", batch_position(first.matrix, a.shape(), batch),
            " is not positive definite (its leading minor of order ", first.info, " is not positive)");
  DAX_CHECK(first.info == 0, "cholesky: LAPACK's ?potrf refused argument ", -first.info);
  return l;
}

/// x with a x = b for each matrix: LU of A^T, then (A^T)^T x = b on b's columns (b, row-major
/// (n, k), transposed to LAPACK's column-major and back). `a`, `b` in their batched layouts.
template <class T>
DistArray<T> batched_solve(const DistArray<T>& a, const DistArray<T>& b) {
  const int n = int(a.shape().back());
  const bool vector = b.ndim() == a.ndim() - 1;
  const int k = vector ? 1 : int(b.shape().back());
  const int64_t nn = int64_t(n) * n, nk = int64_t(n) * k;
  const T* bs = b.local_data().data();
  std::vector<T> lu(nn), columns(nk);
  std::vector<int> pivots;
  BatchFailure failed;
  DistArray<T> x = per_matrix(a, b.shape(), b.sharding(), nk, [&](const T* in, T* out, int64_t t, int64_t m) {
    const int info = lu_in_place(in, n, lu.data(), pivots);
    failed.note(m, info);
    transpose_into(bs + t * nk, n, k, columns.data());
    if (info == 0) {
      int solved = 0;
      dev::Lapack<T>::getrs("T", &n, &k, lu.data(), &n, pivots.data(), columns.data(), &n, &solved);
      failed.note(m, solved < 0 ? solved : 0);
    }
    transpose_into(columns.data(), k, n, out);
  });
  const BatchFailure first = agreed_failure(a.sharding().mesh(), failed);
  const size_t batch = a.ndim() - 2;
  DAX_CHECK(first.info >= 0, "solve: LAPACK's ?getrf / ?getrs refused argument ", -first.info);
  DAX_CHECK(first.info == 0, "solve: the batch's matrix ", batch_position(first.matrix, a.shape(), batch),
            " is singular (U(", first.info, ", ", first.info, ") of its LU factorization is zero)");
  return x;
}

/// x with a x = b for each triangular matrix (the other triangle not read): A^T's triangle solved
/// transposed, on b's columns as in batched_solve. A zero on the diagonal is an error (trtrs's
/// check; the grid's p?trsm has none and divides by it).
template <class T>
DistArray<T> batched_triangular_solve(const DistArray<T>& a, const DistArray<T>& b, bool lower) {
  const int n = int(a.shape().back());
  const bool vector = b.ndim() == a.ndim() - 1;
  const int k = vector ? 1 : int(b.shape().back());
  const int64_t nk = int64_t(n) * k;
  const T* bs = b.local_data().data();
  std::vector<T> columns(nk);
  BatchFailure failed;
  DistArray<T> x = per_matrix(a, b.shape(), b.sharding(), nk, [&](const T* in, T* out, int64_t t, int64_t m) {
    transpose_into(bs + t * nk, n, k, columns.data());
    int info = 0;
    dev::Lapack<T>::trtrs(lower ? "U" : "L", "T", "N", &n, &k, in, &n, columns.data(), &n, &info);
    failed.note(m, info);
    transpose_into(columns.data(), k, n, out);
  });
  const BatchFailure first = agreed_failure(a.sharding().mesh(), failed);
  DAX_CHECK(first.info >= 0, "triangular_solve: LAPACK's ?trtrs refused argument ", -first.info);
  DAX_CHECK(first.info == 0, "triangular_solve: the batch's matrix ", batch_position(first.matrix, a.shape(), a.ndim() - 2),
            " is singular (its diagonal's entry ", first.info - 1, " is zero)");
  return x;
}

/// inv(a) for each matrix: inv(A^T) = inv(A)^T, read back row-major as inv(A).
template <class T>
DistArray<T> batched_inv(const DistArray<T>& a) {
  const int n = int(a.shape().back());
  std::vector<int> pivots;
  std::vector<T> work;
  BatchFailure failed;
  DistArray<T> r = per_matrix(a, a.shape(), a.sharding(), int64_t(n) * n, [&](const T* in, T* out, int64_t, int64_t m) {
    int info = lu_in_place(in, n, out, pivots);
    failed.note(m, info);
    if (info != 0) return;
    T size(0);
    int query = -1;
    dev::Lapack<T>::getri(&n, out, &n, pivots.data(), &size, &query, &info);
    const int lwork = std::max(int(std::real(size)), std::max(n, 1));
    work.resize(size_t(lwork));
    dev::Lapack<T>::getri(&n, out, &n, pivots.data(), work.data(), &lwork, &info);
    failed.note(m, info);
  });
  const BatchFailure first = agreed_failure(a.sharding().mesh(), failed);
  const size_t batch = a.ndim() - 2;
  DAX_CHECK(first.info >= 0, "inv: LAPACK's ?getrf / ?getri refused argument ", -first.info);
  DAX_CHECK(first.info == 0, "inv: the batch's matrix ", batch_position(first.matrix, a.shape(), batch),
            " is singular (a zero on the diagonal of U, its LU factorization's)");
  return r;
}

/// slogdet of each matrix: (sign, log |det|) arrays of the batch's shape in `a`'s batch layout.
/// From the LU of A^T: the product of U's diagonal's signs (phases) and the row swaps' parity.
template <class T>
std::pair<DistArray<T>, DistArray<real_t<T>>> batched_slogdet(const DistArray<T>& a) {
  using R = real_t<T>;
  const int n = int(a.shape().back());
  const size_t batch = a.ndim() - 2;
  const Shape batch_shape(a.shape().begin(), a.shape().begin() + batch);
  const NamedSharding layout = batch_with_whole(a.sharding(), a.ndim(), 0);
  std::vector<T> lu(size_t(n) * n);
  std::vector<int> pivots;
  std::vector<R> logs;
  DistArray<T> sign = per_matrix(a, batch_shape, layout, 1, [&](const T* in, T* out, int64_t, int64_t) {
    const int info = lu_in_place(in, n, lu.data(), pivots);
    double log_sum = 0, arg_sum = 0;
    int flips = 0;
    for (int i = 0; i < n; ++i) {
      const T u = lu[size_t(i) * n + i];
      if (pivots[size_t(i)] != i + 1) ++flips;
      if (u != T(0)) log_sum += std::log(double(std::abs(u)));
      if constexpr (is_complex_v<T>) arg_sum += double(std::arg(u));
      else if (u < 0) ++flips;
    }
    const R parity = flips % 2 == 0 ? R(1) : R(-1);
    if (info > 0) *out = T(0);
    else if constexpr (is_complex_v<T>)
      *out = parity * T(std::polar(R(1), R(std::remainder(arg_sum, 2 * 3.14159265358979323846))));
    else *out = parity;
    logs.push_back(info > 0 ? -std::numeric_limits<R>::infinity() : R(log_sum));
  });
  DistArray<R> logabsdet = make_local<R>(batch_shape, layout, [&](R* data, const Box&) {
    std::copy(logs.begin(), logs.end(), data);
  });
  return {std::move(sign), std::move(logabsdet)};
}

}  // namespace dax::detail
