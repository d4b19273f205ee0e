// dax::linalg's factorizations into orthogonal factors, qr and svd (ScaLAPACK's p?gelqf / p?orglq
// and p?gesvd on A^T, as linalg.hpp deals it; a batch's matrices through LAPACK, batched.hpp), with
// their gradients: made of dax's ops (products,
// transposes, a triangular solve), so they run sharded as the forward does. Complex matrices
// (p?unglq, and p?gesvd with its real workspace) factor and differentiate in JAX's convention.
#pragma once

#include <algorithm>
#include <tuple>
#include <vector>

#include <dax/linalg/linalg.hpp>

namespace dax::detail {

/// x R^-T for an upper-triangular square r (only its upper triangle read): (R^-1 x^T)^T.
template <class T>
DistArray<T> times_inverse_transpose(const DistArray<T>& x, const DistArray<T>& r) {
  return transpose_last_two(linalg::triangular_solve(r, transpose_last_two(x), false));
}

/// The pullback of a = q r (reduced) for m >= n, r square (TensorFlow's and PyTorch's rule, from
/// Walter and Lehmann): with M = tril(Q^T gQ - gQ^T Q + R gR^T - gR R^T),
/// a's cotangent is Q (gR + M R^-T) + (gQ - Q Q^T gQ) R^-T. Complex, in JAX's convention (R's
/// diagonal real, as LAPACK makes it): with A1 = Q^T gQ, A2 = gR R^T, D = A1 - A2 and Phi the lower
/// triangle with the diagonal halved, a's cotangent is (conj(Q) (A2 + Phi(D - D^H) - A1) + gQ) R^-T,
/// the real rule when conj(Q) = Q (derived in docs/numerics.md).
template <class T>
DistArray<T> qr_pullback_tall(const DistArray<T>& q, const DistArray<T>& r, const DistArray<T>& gq,
                              const DistArray<T>& gr) {
  const auto a1 = matmul(transpose_last_two(q), gq), a2 = matmul(gr, transpose_last_two(r));
  const auto d = a1 - a2;
  const auto m = times_triangle(d - adjoint(d), T(1), T(0.5));
  return times_inverse_transpose(matmul(conjugated(q), a2 + m - a1) + gq, r);
}

/// x's columns [from, to) (its last dimension's), of each matrix of a batch.
template <class T>
DistArray<T> columns(const DistArray<T>& x, int64_t from, int64_t to) {
  std::vector<int64_t> start(x.ndim(), 0), stop(x.shape().begin(), x.shape().end());
  start.back() = from;
  stop.back() = to;
  return slice(x, start, stop);
}

/// a's cotangent from q's (gq) or r's (gr; null: zero). A wide a (m < n) is split as [x | y] with
/// r = [u | v]: x = q u is the square case with gq + conj(y gv^T) for q's cotangent, and y = q v
/// gives y's cotangent conj(q) gv (TensorFlow's reduction; the conjugates for complex matrices,
/// where v = q^H y).
template <class T>
DistArray<T> qr_pullback(const DistArray<T>& q, const DistArray<T>& r, const DistArray<T>* gq_in,
                         const DistArray<T>* gr_in) {
  const int d = int(q.ndim());
  const int64_t m = q.shape()[d - 2], n = r.shape()[d - 1];
  const DistArray<T> gq = gq_in ? *gq_in : zeros<T>(q.shape(), q.sharding());
  const DistArray<T> gr = gr_in ? *gr_in : zeros<T>(r.shape(), r.sharding());
  if (m >= n) return qr_pullback_tall(q, r, gq, gr);
  const auto u = columns(r, 0, m), v = columns(r, m, n);
  const auto gu = columns(gr, 0, m), gv = columns(gr, m, n);
  const auto dx = qr_pullback_tall(q, u, gq + conjugated(matmul(matmul(q, v), transpose_last_two(gv))), gu);
  return concatenate(std::vector<DistArray<T>>{dx, matmul(conjugated(q), gv)}, d - 1);
}

/// The factor of a = u diag(s) vh whose cotangent a pullback takes.
enum class SvdFactor { u, s, vh };

/// What svd's pullbacks keep: the factors (s in the element type, for the products).
template <class T>
struct SvdFactors {
  DistArray<T> u, s, vh;
};

/// a's cotangent from one factor's, Townsend's (2016) terms for the
/// reduced real SVD, with S = diag(s), V = vh^T and F_ij = 1 / (s_j^2 - s_i^2) off the diagonal:
/// s: U diag(gs) Vh; u: U (F o (U^T gU - gU^T U)) S Vh + (gU - U U^T gU) S^-1 Vh;
/// vh: U S (F o (Vh gVh^T - gVh Vh^T)) Vh + U S^-1 (gVh - gVh Vh^T Vh). Distinct, nonzero singular
/// values (as JAX and PyTorch assume). Complex, in JAX's convention, with B = U^T gU and
/// E = conj(Vh gVh^T): s: conj(U) diag(gs) conj(Vh); u: conj(U) [(F o (B - B^H)) S + diag(i Im B_ii
/// / s_i) - B S^-1] conj(Vh) + gU S^-1 conj(Vh); vh: conj(U) [S (F o (E - E^H)) conj(Vh) + S^-1 (gVh
/// - gVh Vh^T conj(Vh))]. The diagonal term is JAX's choice of the columns' phases (U's turns, V's
/// do not), right for losses the phases leave alone (docs/numerics.md).
template <class T>
DistArray<T> svd_pullback(const SvdFactors<T>& f, SvdFactor which, const DistArray<T>& g) {
  const auto row = [](const DistArray<T>& v) { return as_row(v); };     // scales columns
  const auto col = [](const DistArray<T>& v) { return as_column(v); };  // scales rows
  const auto u = conjugated(f.u), vh = conjugated(f.vh);
  if (which == SvdFactor::s) return matmul(u * row(g), vh);
  const auto inverse_s = T(1) / f.s;
  const auto s2 = f.s * f.s;
  const auto fmat = reciprocal_off_diagonal(row(s2) - col(s2));  // 1 / (s_j^2 - s_i^2)
  if (which == SvdFactor::u) {
    const auto b = matmul(transpose_last_two(f.u), g);
    const auto skew = b - adjoint(b);
    auto inner = fmat * skew * row(f.s) - b * row(inverse_s);
    if constexpr (is_complex_v<T>)  // i Im(B_ii) / s_i on the diagonal
      inner = inner + times_triangle(skew, T(0), T(0.5)) * row(inverse_s);
    return matmul(matmul(u, inner) + g * row(inverse_s), vh);
  }
  const auto vgv = matmul(f.vh, transpose_last_two(g));
  const auto e = conjugated(vgv);
  const auto inner = col(f.s) * (fmat * (e - adjoint(e)));
  return matmul(u, matmul(inner, vh) + col(inverse_s) * (g - matmul(transpose_last_two(vgv), vh)));
}

/// qr of one matrix over the mesh's grid: q and r rows over the mesh.
template <class T>
std::pair<DistArray<T>, DistArray<T>> qr_of_matrix(const DistArray<T>& a) {
  const Mesh& mesh = a.sharding().mesh();
  const int64_t m = a.shape()[0], n = a.shape()[1], k = std::min(m, n);
  const NamedSharding rows = rows_over_mesh(mesh);
  const auto& grid = blacs_grid(mesh);
  const int64_t nb = block_size(std::max(m, n), grid.shape);
  auto pa = to_cyclic(a, grid, grid.normal(), true, grid.context_t, nb, "qr");
  const int xm = int(n), xn = int(m), xk = int(k), one = 1, query = -1;
  std::vector<T> tau(pa.cols + nb);
  int info = 0;
  T work_size = 0;
  dev::Scalapack<T>::gelqf(&xm, &xn, pa.data(), &one, &one, pa.desc, tau.data(), &work_size, &query, &info);
  std::vector<T> work(int_size(grid, int64_t(std::real(work_size)) + 1 + nb * nb, "qr", "a workspace"));
  int lwork = int(work.size());
  dev::Scalapack<T>::gelqf(&xm, &xn, pa.data(), &one, &one, pa.desc, tau.data(), work.data(), &lwork, &info);
  DAX_CHECK(agreed_info(grid, info) == 0, "qr: ScaLAPACK's p?gelqf failed (info ", info, ")");
  // R: the upper triangle of the first k rows of what dax reads back (L^T), before p?orglq overwrites it.
  CyclicPiece<T> factors = pa;
  factors.storage = dev::allocate(std::max<int64_t>(pa.rows * pa.cols, 1) * sizeof(T));
  dev::copy(factors.data(), pa.data(), std::max<int64_t>(pa.rows * pa.cols, 1) * sizeof(T));
  for (int64_t r = 0; r < factors.rows; ++r)
    for (int64_t c = 0; c < factors.cols; ++c)
      if (factors.global_col(c) < factors.global_row(r)) factors.at(r, c) = T(0);
  DistArray<T> r = slice(from_cyclic(factors, grid, mesh, rows), {0, 0}, {k, n});
  dev::Scalapack<T>::orglq(&xk, &xn, &xk, pa.data(), &one, &one, pa.desc, tau.data(), &work_size, &query, &info);
  work.resize(std::max<size_t>(work.size(), size_t(int_size(grid, int64_t(std::real(work_size)) + 1 + nb * nb, "qr", "a workspace"))));
  lwork = int(work.size());
  dev::Scalapack<T>::orglq(&xk, &xn, &xk, pa.data(), &one, &one, pa.desc, tau.data(), work.data(), &lwork, &info);
  DAX_CHECK(agreed_info(grid, info) == 0, "qr: ScaLAPACK's p?orglq failed (info ", info, ")");
  return {slice(from_cyclic(pa, grid, mesh, rows), {0, 0}, {m, k}), r};
}

/// svd of one matrix over the mesh's grid: u and vh rows over the mesh, s replicated.
template <class T>
std::tuple<DistArray<T>, DistArray<real_t<T>>, DistArray<T>> svd_of_matrix(const DistArray<T>& a) {
  using R = real_t<T>;
  const Mesh& mesh = a.sharding().mesh();
  const int64_t m = a.shape()[0], n = a.shape()[1], k = std::min(m, n);
  const NamedSharding rows = rows_over_mesh(mesh), replicated(mesh, P());
  const auto& grid = blacs_grid(mesh);
  const int64_t nb = block_size(std::max(m, n), grid.shape);
  auto pa = to_cyclic(a, grid, grid.normal(), true, grid.context_t, nb, "svd");
  auto pu = empty_piece<T>(m, k, grid.normal(), true, grid.context_t, nb, "svd");   // ScaLAPACK's VT (k, m)
  auto pv = empty_piece<T>(k, n, grid.normal(), true, grid.context_t, nb, "svd");   // ScaLAPACK's U (n, k)
  std::vector<R> sv(k);
  std::vector<R> rwork(is_complex_v<T> ? 1 + 4 * std::max(m, n) : 1);  // p?gesvd's: 1 + 4 max(m, n)
  const int xm = int(n), xn = int(m), one = 1, query = -1;
  int info = 0;
  const auto gesvd = [&](T* work, const int* lwork) {
    if constexpr (is_complex_v<T>)
      dev::Scalapack<T>::gesvd("V", "V", &xm, &xn, pa.data(), &one, &one, pa.desc, sv.data(), pv.data(), &one,
                                       &one, pv.desc, pu.data(), &one, &one, pu.desc, work, lwork, rwork.data(), &info);
    else
      dev::Scalapack<T>::gesvd("V", "V", &xm, &xn, pa.data(), &one, &one, pa.desc, sv.data(), pv.data(), &one,
                                       &one, pv.desc, pu.data(), &one, &one, pu.desc, work, lwork, &info);
  };
  T work_size = 0;
  gesvd(&work_size, &query);
  std::vector<T> work(int_size(grid, int64_t(std::real(work_size)) + 1 + nb * nb, "svd", "a workspace"));
  const int lwork = int(work.size());
  gesvd(work.data(), &lwork);
  info = agreed_info(grid, info);
  // info = k + 1 is p?gesvd's "heterogeneity": the processes' singular values differ (in the last
  // bits: each process runs its own bidiagonal QR iteration). Rank 0's are broadcast below, so
  // every device holds the same ones; seen on 8 processes at 3 x 5.
  DAX_CHECK(info == 0 || info == int(k) + 1, "svd: ScaLAPACK's p?gesvd did not converge (info ", info, ")");
  grid.group->broadcast(sv.data(), k, dtype_v<R>, 0);  // one copy's bits on every device
  return {from_cyclic(pu, grid, mesh, rows), device_put(sv, {k}, replicated), from_cyclic(pv, grid, mesh, rows)};
}

}  // namespace dax::detail

namespace dax::linalg {

/// numpy.linalg.qr(a, mode="reduced") of an (m, n) matrix: q (m, k) with orthonormal columns and
/// r (k, n) upper triangular, k = min(m, n), a = q r; both rows over the mesh. ScaLAPACK sees A^T
/// (dax's row-major pieces): A^T = L Q' (p?gelqf, p?orglq) is A = Q'^T L^T, the QR of A.
template <class T>
struct QR {
  DistArray<T> q, r;
};

template <class T>
  requires detail::solver_type<T>
QR<T> qr(const DistArray<T>& a) {
  const detail::ProfiledOp profiled("qr", a);
  DAX_CHECK(a.ndim() >= 2, "qr: expected a matrix or a batch of them (..., m, n), got shape ", to_string(a.shape()));
  const Mesh& mesh = a.sharding().mesh();
  const size_t batch = a.ndim() - 2;
  const int64_t m = a.shape()[batch], n = a.shape()[batch + 1], k = std::min(m, n);
  Shape q_shape(a.shape()), r_shape(a.shape());
  q_shape[batch + 1] = k;
  r_shape[batch] = k;
  // One matrix: rows over the mesh; a batch: the batched layout it ran in (over every device).
  const NamedSharding rows = batch == 0 ? detail::rows_over_mesh(mesh) : detail::batched_layout(a.sharding(), a.ndim());
  if (!mesh.contains(Runtime::current().rank()))
    return {DistArray<T>(q_shape, rows, nullptr), DistArray<T>(r_shape, rows, nullptr)};
  if (numel(q_shape) == 0 || numel(r_shape) == 0) return {zeros<T>(q_shape, rows), zeros<T>(r_shape, rows)};
  auto factored = batch == 0 ? detail::qr_of_matrix(a) : [&] {
    detail::check_solver_backend();
    return detail::batched_qr(detail::reshard_untraced(a, rows));
  }();
  DistArray<T> q = std::move(factored.first), r = std::move(factored.second);
  detail::record("qr", q, [&](auto) {
    return [q, r](const DistArray<T>& gq) {
      return detail::Cotangents{detail::AnyArray(detail::qr_pullback<T>(q, r, &gq, nullptr))};
    };
  }, a);
  detail::record("qr", r, [&](auto) {
    return [q, r](const DistArray<T>& gr) {
      return detail::Cotangents{detail::AnyArray(detail::qr_pullback<T>(q, r, nullptr, &gr))};
    };
  }, a);
  return {q, r};
}

/// numpy.linalg.svd(a, full_matrices=False): u (m, k), s (k,) descending (replicated; real for a
/// complex matrix), vh (k, n), a = u diag(s) vh. ScaLAPACK's p?gesvd sees A^T = U S V^H, which is
/// A = (V^H)^T S U^T: dax reads its VT back as u and its U as vh, each row-major piece being the
/// column-major transpose (for a complex matrix too: a transpose, not a conjugate one).
template <class T>
struct SVD {
  DistArray<T> u;
  DistArray<detail::real_t<T>> s;
  DistArray<T> vh;
};

template <class T>
  requires detail::solver_type<T>
SVD<T> svd(const DistArray<T>& a) {
  using R = detail::real_t<T>;
  const detail::ProfiledOp profiled("svd", a);
  DAX_CHECK(a.ndim() >= 2, "svd: expected a matrix or a batch of them (..., m, n), got shape ", to_string(a.shape()));
  const Mesh& mesh = a.sharding().mesh();
  const size_t batch = a.ndim() - 2;
  const int64_t m = a.shape()[batch], n = a.shape()[batch + 1], k = std::min(m, n);
  Shape u_shape(a.shape()), s_shape(a.shape().begin(), a.shape().end() - 1), vh_shape(a.shape());
  u_shape[batch + 1] = k;
  s_shape[batch] = k;
  vh_shape[batch] = k;
  // One matrix: u, vh rows over the mesh, s replicated; a batch: the batched layout it ran in.
  const NamedSharding rows = batch == 0 ? detail::rows_over_mesh(mesh) : detail::batched_layout(a.sharding(), a.ndim());
  const NamedSharding values = batch == 0 ? NamedSharding(mesh, P()) : detail::batch_with_whole(rows, a.ndim(), 1);
  if (!mesh.contains(Runtime::current().rank()))
    return {DistArray<T>(u_shape, rows, nullptr), DistArray<R>(s_shape, values, nullptr), DistArray<T>(vh_shape, rows, nullptr)};
  if (numel(u_shape) == 0 || numel(vh_shape) == 0)
    return {zeros<T>(u_shape, rows), zeros<R>(s_shape, values), zeros<T>(vh_shape, rows)};
  auto factored = batch == 0 ? detail::svd_of_matrix(a) : [&] {
    detail::check_solver_backend();
    return detail::batched_svd(detail::reshard_untraced(a, rows));
  }();
  SVD<T> out{std::move(std::get<0>(factored)), std::move(std::get<1>(factored)), std::move(std::get<2>(factored))};
  // Each factor's cotangent contributes its own term of Townsend's formula (linear in the three).
  // s's cotangent is real for a complex matrix: taken into the element type first.
  const auto factors = detail::SvdFactors<T>{out.u, detail::in_element_type<T>(out.s), out.vh};
  const auto pullback = [&](detail::SvdFactor which) {
    return [&, which](auto) {
      return [factors, which](const DistArray<T>& g) {
        return detail::Cotangents{detail::AnyArray(detail::svd_pullback(factors, which, g))};
      };
    };
  };
  detail::record("svd", out.u, pullback(detail::SvdFactor::u), a);
  detail::record("svd", out.s, [&](auto) {
    return [factors](const DistArray<R>& g) {
      return detail::Cotangents{
          detail::AnyArray(detail::svd_pullback(factors, detail::SvdFactor::s, detail::in_element_type<T>(g)))};
    };
  }, a);
  detail::record("svd", out.vh, pullback(detail::SvdFactor::vh), a);
  return out;
}

}  // namespace dax::linalg
