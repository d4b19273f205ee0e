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
#include <tuple>
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

/// The batch dimensions of `layout` (of rank `ndim`) followed by `whole` unsplit dimensions: from a
/// batched_layout, a right-hand side's (whole = 2, or 1 for vectors), or slogdet's (whole = 0).
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

/// The values of one output per matrix (eigenvalues, singular values, R factors) that a per_matrix
/// pass collects on the host, as an array of `shape` in `layout` (this device's matrices' in order).
template <class V>
DistArray<V> collected(const Shape& shape, const NamedSharding& layout, const std::vector<V>& values) {
  return make_local<V>(shape, layout, [&](V* data, const Box&) { std::copy(values.begin(), values.end(), data); });
}

/// A workspace size LAPACK returned from a query (in a T), at least `floor`.
template <class T>
int workspace(T queried, int64_t floor) {
  return int(std::max<int64_t>(int64_t(std::real(queried)), std::max<int64_t>(floor, 1)));
}

/// eigh of each matrix (Hermitian, its lower triangle read): eigenvalues (..., n) ascending and the
/// eigenvectors as columns (..., n, n). Row-major A read column-major is A^T (= conj(A)): its upper
/// triangle is A's lower one, and its eigenvectors are conj(V), conjugated back.
template <class T>
std::pair<DistArray<real_t<T>>, DistArray<T>> batched_eigh(const DistArray<T>& a) {
  using R = real_t<T>;
  const int n = int(a.shape().back());
  const size_t batch = a.ndim() - 2;
  std::vector<T> z(size_t(n) * n), work;
  std::vector<R> w(size_t(std::max(n, 1))), rwork, values;
  std::vector<int> iwork;
  const auto solve = [&](int* lwork, int* lrwork, int* liwork, int& info) {
    if constexpr (is_complex_v<T>)
      dev::Lapack<T>::heevd("V", "U", &n, z.data(), &n, w.data(), work.data(), lwork, rwork.data(), lrwork,
                            iwork.data(), liwork, &info);
    else
      dev::Lapack<T>::syevd("V", "U", &n, z.data(), &n, w.data(), work.data(), lwork, iwork.data(), liwork, &info);
  };
  // The workspaces, asked once for the batch's n.
  work.resize(1);
  rwork.resize(1);
  iwork.resize(1);
  int lwork = -1, lrwork = -1, liwork = -1, info = 0;
  solve(&lwork, &lrwork, &liwork, info);
  lwork = workspace(work[0], 1);
  lrwork = workspace(rwork[0], 1);
  liwork = std::max(iwork[0], 1);
  work.resize(size_t(lwork));
  rwork.resize(size_t(lrwork));
  iwork.resize(size_t(liwork));
  BatchFailure failed;
  DistArray<T> vectors = per_matrix(a, a.shape(), a.sharding(), int64_t(n) * n, [&](const T* in, T* out, int64_t, int64_t m) {
    std::copy(in, in + int64_t(n) * n, z.data());
    int status = 0;
    solve(&lwork, &lrwork, &liwork, status);
    failed.note(m, status);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const T v = z[size_t(j) * n + i];  // column j, row i
        if constexpr (is_complex_v<T>) out[int64_t(i) * n + j] = std::conj(v);
        else out[int64_t(i) * n + j] = v;
      }
    values.insert(values.end(), w.begin(), w.begin() + n);
  });
  const BatchFailure first = agreed_failure(a.sharding().mesh(), failed);
  DAX_CHECK(first.info == 0, "eigh: LAPACK's ?", is_complex_v<T> ? "heevd" : "syevd",
            " did not converge for the batch's matrix ", first.matrix < 0 ? std::string() : batch_position(first.matrix, a.shape(), batch),
            " (info ", first.info, ")");
  Shape shape(a.shape().begin(), a.shape().end() - 1);
  return {collected(shape, batch_with_whole(a.sharding(), a.ndim(), 1), values), std::move(vectors)};
}

/// A's matrices (m, n), this device's, column-major in `col` (row-major A read as it lies is A^T).
template <class T>
void column_major(const T* in, int m, int n, std::vector<T>& col) {
  col.resize(size_t(m) * n);
  transpose_into(in, m, n, col.data());
}

/// The reduced QR of each (m, n) matrix: q (..., m, k) with orthonormal columns, r (..., k, n)
/// upper triangular, k = min(m, n) (LAPACK's geqrf on the column-major matrix, then orgqr /
/// ungqr; R's diagonal real for complex matrices).
template <class T>
std::pair<DistArray<T>, DistArray<T>> batched_qr(const DistArray<T>& a) {
  const size_t batch = a.ndim() - 2;
  const int m = int(a.shape()[batch]), n = int(a.shape()[batch + 1]), k = std::min(m, n);
  std::vector<T> col, tau(size_t(std::max(k, 1))), work(1), rs;
  int lwork = -1, info = 0;
  dev::Lapack<T>::geqrf(&m, &n, col.data(), &m, tau.data(), work.data(), &lwork, &info);
  int64_t size = workspace(work[0], n);
  dev::Lapack<T>::orgqr(&m, &k, &k, col.data(), &m, tau.data(), work.data(), &lwork, &info);
  lwork = int(std::max<int64_t>(size, workspace(work[0], k)));
  work.resize(size_t(lwork));
  Shape qs(a.shape()), r_shape(a.shape());
  qs[batch + 1] = k;
  r_shape[batch] = k;
  DistArray<T> q = per_matrix(a, qs, a.sharding(), int64_t(m) * k, [&](const T* in, T* out, int64_t, int64_t) {
    column_major(in, m, n, col);
    int status = 0;
    dev::Lapack<T>::geqrf(&m, &n, col.data(), &m, tau.data(), work.data(), &lwork, &status);
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < n; ++j) rs.push_back(j >= i ? col[size_t(j) * m + i] : T(0));
    dev::Lapack<T>::orgqr(&m, &k, &k, col.data(), &m, tau.data(), work.data(), &lwork, &status);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < k; ++j) out[int64_t(i) * k + j] = col[size_t(j) * m + i];
  });
  return {std::move(q), collected(r_shape, a.sharding(), rs)};
}

/// The reduced SVD of each (m, n) matrix: u (..., m, k), s (..., k) descending, vh (..., k, n)
/// (LAPACK's gesvd on the column-major matrix).
template <class T>
std::tuple<DistArray<T>, DistArray<real_t<T>>, DistArray<T>> batched_svd(const DistArray<T>& a) {
  using R = real_t<T>;
  const size_t batch = a.ndim() - 2;
  const int m = int(a.shape()[batch]), n = int(a.shape()[batch + 1]), k = std::min(m, n);
  std::vector<T> col, u(size_t(m) * k), vt(size_t(k) * n), work(1), vhs;
  std::vector<R> s(size_t(std::max(k, 1))), rwork(size_t(5 * std::max(k, 1))), values;
  const int ldvt = std::max(k, 1);
  const auto gesvd = [&](const int* lwork, int& info) {
    if constexpr (is_complex_v<T>)
      dev::Lapack<T>::gesvd("S", "S", &m, &n, col.data(), &m, s.data(), u.data(), &m, vt.data(), &ldvt, work.data(),
                            lwork, rwork.data(), &info);
    else
      dev::Lapack<T>::gesvd("S", "S", &m, &n, col.data(), &m, s.data(), u.data(), &m, vt.data(), &ldvt, work.data(),
                            lwork, &info);
  };
  int lwork = -1, info = 0;
  col.resize(size_t(m) * n);
  gesvd(&lwork, info);
  lwork = workspace(work[0], 5 * std::max(m, n));
  work.resize(size_t(lwork));
  Shape us(a.shape()), ss(a.shape().begin(), a.shape().end() - 1), vs(a.shape());
  us[batch + 1] = k;
  ss[batch] = k;
  vs[batch] = k;
  BatchFailure failed;
  DistArray<T> uo = per_matrix(a, us, a.sharding(), int64_t(m) * k, [&](const T* in, T* out, int64_t, int64_t matrix) {
    column_major(in, m, n, col);
    int status = 0;
    gesvd(&lwork, status);
    failed.note(matrix, status);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < k; ++j) out[int64_t(i) * k + j] = u[size_t(j) * m + i];
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < n; ++j) vhs.push_back(vt[size_t(j) * ldvt + i]);
    values.insert(values.end(), s.begin(), s.begin() + k);
  });
  const BatchFailure first = agreed_failure(a.sharding().mesh(), failed);
  DAX_CHECK(first.info == 0, "svd: LAPACK's ?gesvd did not converge for the batch's matrix ",
            first.matrix < 0 ? std::string() : batch_position(first.matrix, a.shape(), batch), " (info ", first.info, ")");
  return {std::move(uo), collected(ss, batch_with_whole(a.sharding(), a.ndim(), 1), values), collected(vs, a.sharding(), vhs)};
}

}  // namespace dax::detail
