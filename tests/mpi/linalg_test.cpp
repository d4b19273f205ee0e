// dax::linalg (ScaLAPACK) on random shardings, uneven sizes and meshes of 1-8 devices at every rank
// count: cholesky, solve and triangular_solve against the same computation on the gathered matrix
// in plain loops, in double and float; the errors (not positive definite, singular, wrong shapes)
// alike on every rank.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

#include <dax/linalg.hpp>

#include "gradient_check.hpp"
#include "helpers.hpp"

using dax::complex128;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::host;
using dax::test::Pick;
using dax::test::random_mesh;
using dax::test::random_sharding;

namespace {

/// A random n x k matrix with entries in [-1, 1), row-major, in double.
std::vector<double> random_matrix(int64_t n, int64_t k, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(static_cast<size_t>(n * k));
  for (auto& x : v) x = u(rng);
  return v;
}

/// x conjugated; a real x as it is (std::conj would make it complex).
template <class S>
S conjugate(S x) {
  if constexpr (dax::detail::is_complex_v<S>) return std::conj(x);
  else return x;
}

/// m m^H + n I of an n x n `m`: symmetric (Hermitian) positive definite, well conditioned.
template <class S>
std::vector<S> gram_plus_diagonal(const std::vector<S>& m, int64_t n) {
  std::vector<S> a(n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      S s = i == j ? S(double(n)) : S(0);
      for (int64_t l = 0; l < n; ++l) s += m[i * n + l] * conjugate(m[j * n + l]);
      a[i * n + j] = s;
    }
  return a;
}

/// A real symmetric positive definite n x n matrix.
std::vector<double> spd(int64_t n, unsigned seed) { return gram_plus_diagonal(random_matrix(n, n, seed), n); }

/// L with a = L L^H on the host (Cholesky-Banachiewicz).
template <class S>
std::vector<S> host_cholesky(const std::vector<S>& a, int64_t n) {
  std::vector<S> l(n * n, S(0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      S s = a[i * n + j];
      for (int64_t k = 0; k < j; ++k) s -= l[i * n + k] * conjugate(l[j * n + k]);
      l[i * n + j] = i == j ? S(std::sqrt(std::real(s))) : s / l[j * n + j];
    }
  return l;
}

/// a x = b by Gaussian elimination with partial pivoting on the host (b is n x k); a's determinant
/// in `det` when asked.
template <class S>
std::vector<S> host_solve(std::vector<S> a, std::vector<S> b, int64_t n, int64_t k, S* det = nullptr) {
  S d = 1;
  for (int64_t c = 0; c < n; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < n; ++r)
      if (std::abs(a[r * n + c]) > std::abs(a[p * n + c])) p = r;
    if (p != c) d = -d;
    for (int64_t j = 0; j < n; ++j) std::swap(a[c * n + j], a[p * n + j]);
    for (int64_t j = 0; j < k; ++j) std::swap(b[c * k + j], b[p * k + j]);
    d *= a[c * n + c];
    for (int64_t r = c + 1; r < n; ++r) {
      const S f = a[r * n + c] / a[c * n + c];
      for (int64_t j = c; j < n; ++j) a[r * n + j] -= f * a[c * n + j];
      for (int64_t j = 0; j < k; ++j) b[r * k + j] -= f * b[c * k + j];
    }
  }
  for (int64_t c = n - 1; c >= 0; --c)
    for (int64_t j = 0; j < k; ++j) {
      S s = b[c * k + j];
      for (int64_t l = c + 1; l < n; ++l) s -= a[c * n + l] * b[l * k + j];
      b[c * k + j] = s / a[c * n + c];
    }
  if (det) *det = d;
  return b;
}

/// v in the element type T (double to float, complex128 to complex64).
template <class T, class W>
std::vector<T> narrow(const std::vector<W>& v) {
  return std::vector<T>(v.begin(), v.end());
}

/// The largest |got - want| relative to the largest |want| (0 on a rank outside the mesh); W is
/// double or complex128.
template <class T, class W>
double relative_error(const std::vector<T>& got, const std::vector<W>& want) {
  if (got.empty()) return 0;
  REQUIRE(got.size() == want.size());
  double e = 0, s = 1e-300;
  for (size_t i = 0; i < got.size(); ++i) {
    e = std::max(e, std::abs(W(got[i]) - want[i]));
    s = std::max(s, std::abs(want[i]));
  }
  return e / s;
}

}  // namespace

TEMPLATE_TEST_CASE("cholesky equals the host's factor on any sharding, zeros above the diagonal", "[linalg]", float,
                   double) {
  using T = TestType;
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  Pick pick(31);
  for (int trial = 0; trial < 10; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t n = 1 + int64_t(pick(40));
    const auto a = spd(n, 40 + trial);
    const NamedSharding s = random_sharding(pick, mesh, 2), out = random_sharding(pick, mesh, 2);
    INFO("n " << n << " " << dax::to_string(s) << " -> " << dax::to_string(out));
    const auto x = dax::device_put(narrow<T>(a), {n, n}, s);
    const auto l = dax::linalg::cholesky(x);
    CHECK(l.sharding() == s);
    const auto got = host(l);
    CHECK(relative_error(got, host_cholesky(a, n)) <= tol * double(n));
    for (int64_t i = 0; i < n && !got.empty(); ++i)
      for (int64_t j = i + 1; j < n; ++j) CHECK(got[i * n + j] == T(0));
    CHECK(dax::linalg::cholesky(x, out).sharding() == out);
  }
}

TEMPLATE_TEST_CASE("solve and triangular_solve equal elimination on the host", "[linalg]", float, double) {
  using T = TestType;
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-11;
  Pick pick(32);
  for (int trial = 0; trial < 10; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t n = 1 + int64_t(pick(40)), k = 1 + int64_t(pick(5));
    auto a = random_matrix(n, n, 60 + trial);
    for (int64_t i = 0; i < n; ++i) a[i * n + i] += 2.0;  // away from singular
    const auto b = random_matrix(n, k, 70 + trial);
    const NamedSharding sa = random_sharding(pick, mesh, 2), sb = random_sharding(pick, mesh, 2);
    INFO("n " << n << " k " << k << " " << dax::to_string(sa) << " " << dax::to_string(sb));
    const auto da = dax::device_put(narrow<T>(a), {n, n}, sa);
    const auto db = dax::device_put(narrow<T>(b), {n, k}, sb);
    const auto x = dax::linalg::solve(da, db);
    CHECK(x.sharding() == sb);
    CHECK(relative_error(host(x), host_solve(a, b, n, k)) <= tol * double(n));
    // A vector right-hand side keeps its rank.
    std::vector<double> b1_col(n);
    for (int64_t i = 0; i < n; ++i) b1_col[i] = b[i * k];
    const auto v = dax::linalg::solve(da, dax::device_put(narrow<T>(b1_col), {n}, random_sharding(pick, mesh, 1)));
    CHECK(v.shape() == Shape{n});
    CHECK(relative_error(host(v), host_solve(a, b1_col, n, 1)) <= tol * double(n));
    // Triangular: the lower (upper) triangle alone, the other ignored.
    for (bool lower : {true, false}) {
      std::vector<double> t(n * n, 0.0);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
          if (lower ? j <= i : j >= i) t[i * n + j] = a[i * n + j];
      const auto y = dax::linalg::triangular_solve(da, db, lower);
      CHECK(relative_error(host(y), host_solve(t, b, n, k)) <= tol * double(n));
    }
  }
}

TEST_CASE("gradients of cholesky, solve and triangular_solve equal central differences", "[linalg][autodiff]") {
  Pick pick(33);
  std::mt19937 rng(34);
  for (int trial = 0; trial < 4; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t n = 2 + int64_t(pick(9)), k = 1 + int64_t(pick(3));
    const NamedSharding sa = random_sharding(pick, mesh, 2), sb = random_sharding(pick, mesh, 2);
    const NamedSharding sc = random_sharding(pick, mesh, 2);
    INFO("n " << n << " k " << k << " " << dax::to_string(sa) << " " << dax::to_string(sb));
    auto a = random_matrix(n, n, 80 + trial);
    for (int64_t i = 0; i < n; ++i) a[i * n + i] += 3.0;
    const auto weights_nn = dax::device_put(random_matrix(n, n, 90 + trial), {n, n}, sc);
    const auto weights_nk = dax::device_put(random_matrix(n, k, 95 + trial), {n, k}, sc);
    // Cholesky reads a's lower triangle: the differences move the upper one too, which must not count.
    dax::test::check_against_differences(
        [&](const dax::test::Params& p) { return dax::sum(dax::linalg::cholesky(p[0]) * weights_nn); }, {spd(n, 85 + trial)},
        {{n, n}}, {sa}, rng);
    dax::test::check_against_differences(
        [&](const dax::test::Params& p) { return dax::sum(dax::linalg::solve(p[0], p[1]) * weights_nk); },
        {a, random_matrix(n, k, 99 + trial)}, {{n, n}, {n, k}}, {sa, sb}, rng);
    for (bool lower : {true, false})
      dax::test::check_against_differences(
          [&](const dax::test::Params& p) {
            return dax::sum(dax::linalg::triangular_solve(p[0], p[1], lower) * weights_nk);
          },
          {a, random_matrix(n, k, 77 + trial)}, {{n, n}, {n, k}}, {sa, sb}, rng);
  }
}

TEMPLATE_TEST_CASE("inv, slogdet, det, eigh and norm against the host", "[linalg]", float, double) {
  using T = TestType;
  const double tol = std::is_same_v<T, float> ? 2e-4 : 1e-10;
  Pick pick(35);
  for (int trial = 0; trial < 8; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t n = 1 + int64_t(pick(30));
    auto a = random_matrix(n, n, 110 + trial);
    for (int64_t i = 0; i < n; ++i) a[i * n + i] += (trial % 2 ? -2.0 : 2.0);  // negative determinants too
    const NamedSharding s = random_sharding(pick, mesh, 2);
    INFO("n " << n << " " << dax::to_string(s));
    const auto da = dax::device_put(narrow<T>(a), {n, n}, s);
    // inv: a inv(a) = I.
    const auto ai = host(dax::linalg::inv(da));
    std::vector<double> eye(n * n, 0.0);
    for (int64_t i = 0; i < n; ++i) eye[i * n + i] = 1;
    if (!ai.empty()) {
      std::vector<double> prod(n * n, 0.0);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t l = 0; l < n; ++l) prod[i * n + j] += a[i * n + l] * double(ai[l * n + j]);
      CHECK(relative_error(prod, eye) <= tol * double(n));
    }
    // slogdet against the host's elimination: the product of the pivots, the sign of the swaps.
    double det = 0;
    (void)host_solve(a, std::vector<double>(n, 0.0), n, 1, &det);
    const double logabs = std::log(std::abs(det));
    const int sign = det < 0 ? -1 : 1;
    const auto sl = dax::linalg::slogdet(da);
    const auto got_sign = host(sl.sign), got_log = host(sl.logabsdet), got_det = host(dax::linalg::det(da));
    if (!got_sign.empty()) {
      CHECK(got_sign[0] == T(sign));
      CHECK(std::abs(double(got_log[0]) - logabs) <= tol * double(n) * std::max(1.0, std::abs(logabs)));
      CHECK(std::abs(double(got_det[0]) - sign * std::exp(logabs)) <= tol * double(n) * std::exp(logabs));
    }
    // eigh of a symmetric matrix: a v = v diag(w), v^T v = I, w ascending.
    const auto sym = spd(n, 120 + trial);
    const auto dsym = dax::device_put(narrow<T>(sym), {n, n}, s);
    const auto e = dax::linalg::eigh(dsym);
    // Its singular values are its eigenvalues: the nuclear norm is the trace.
    double trace = 0;
    for (int64_t i = 0; i < n; ++i) trace += sym[i * n + i];
    const auto nuclear = host(dax::linalg::norm(dsym, "nuc"));
    if (!nuclear.empty()) CHECK(std::abs(double(nuclear[0]) - trace) <= tol * double(n) * trace);
    CHECK(e.eigenvectors.sharding() == s);
    const auto w = host(e.eigenvalues), v = host(e.eigenvectors);
    if (!w.empty()) {
      double scale = 0;
      for (auto x : w) scale = std::max(scale, std::abs(double(x)));
      for (int64_t i = 0; i + 1 < n; ++i) CHECK(w[i] <= w[i + 1]);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double av = 0, vv = 0;
          for (int64_t l = 0; l < n; ++l) {
            av += sym[i * n + l] * double(v[l * n + j]);
            vv += double(v[l * n + i]) * double(v[l * n + j]);
          }
          CHECK(std::abs(av - double(v[i * n + j]) * double(w[j])) <= tol * double(n) * scale);
          CHECK(std::abs(vv - (i == j ? 1.0 : 0.0)) <= tol * double(n));
        }
    }
    // norms
    double fro = 0, col = 0, row = 0;
    for (int64_t i = 0; i < n; ++i) {
      double r = 0, c = 0;
      for (int64_t j = 0; j < n; ++j) {
        fro += a[i * n + j] * a[i * n + j];
        r += std::abs(a[i * n + j]);
        c += std::abs(a[j * n + i]);
      }
      row = std::max(row, r);
      col = std::max(col, c);
    }
    const auto nf = host(dax::linalg::norm(da)), n1 = host(dax::linalg::norm(da, "1")), ni = host(dax::linalg::norm(da, "inf"));
    if (!nf.empty()) {
      CHECK(std::abs(double(nf[0]) - std::sqrt(fro)) <= tol * std::sqrt(fro));
      CHECK(std::abs(double(n1[0]) - col) <= tol * col);
      CHECK(std::abs(double(ni[0]) - row) <= tol * row);
    }
  }
}

TEMPLATE_TEST_CASE("qr and svd of tall and wide matrices reproduce them, real and complex", "[linalg]", float, double,
                   dax::complex64, dax::complex128) {
  using T = TestType;
  constexpr bool is_complex = dax::detail::is_complex_v<T>;
  using W = std::conditional_t<is_complex, complex128, double>;  // the host's arithmetic
  const double tol = std::is_same_v<dax::detail::real_t<T>, float> ? 2e-5 : 1e-12;
  Pick pick(38);
  for (int trial = 0; trial < 8; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t m = 1 + int64_t(pick(25)), n = 1 + int64_t(pick(25)), k = std::min(m, n);
    std::vector<W> a;
    if constexpr (is_complex) a = dax::test::random_complex<complex128>(m * n, 170 + trial);
    else a = random_matrix(m, n, 170 + trial);
    const NamedSharding s = random_sharding(pick, mesh, 2);
    INFO(m << " x " << n << " " << dax::to_string(s));
    const auto da = dax::device_put(narrow<T>(a), {m, n}, s);
    const auto f = dax::linalg::qr(da);
    REQUIRE(f.q.shape() == Shape{m, k});
    REQUIRE(f.r.shape() == Shape{k, n});
    const auto q = host(f.q), r = host(f.r);
    const auto d = dax::linalg::svd(da);
    REQUIRE(d.u.shape() == Shape{m, k});
    REQUIRE(d.vh.shape() == Shape{k, n});
    const auto u = host(d.u), vh = host(d.vh);
    const auto sv = host(d.s);
    std::vector<dax::detail::real_t<T>> two;
    if constexpr (!is_complex) two = host(dax::linalg::norm(da, "2"));
    if (q.empty()) continue;  // a rank outside the mesh
    double scale = 0;
    for (W x : a) scale = std::max(scale, std::abs(x));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        W qr_ij = 0, usv_ij = 0;
        for (int64_t l = 0; l < k; ++l) {
          qr_ij += W(q[i * k + l]) * W(r[l * n + j]);
          usv_ij += W(u[i * k + l]) * double(sv[l]) * W(vh[l * n + j]);
        }
        CHECK(std::abs(qr_ij - a[i * n + j]) <= tol * double(k) * scale);
        CHECK(std::abs(usv_ij - a[i * n + j]) <= tol * double(k) * scale);
      }
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t j = 0; j < i && j < n; ++j) CHECK(r[i * n + j] == T(0));  // upper triangular
      if (i + 1 < k) CHECK(sv[i] >= sv[i + 1]);
      CHECK(sv[i] >= 0);
      for (int64_t j = 0; j < k; ++j) {  // orthonormal (unitary) columns of q and u, rows of vh
        W qq = 0, uu = 0, vv = 0;
        for (int64_t l = 0; l < m; ++l) {
          qq += conjugate(W(q[l * k + i])) * W(q[l * k + j]);
          uu += conjugate(W(u[l * k + i])) * W(u[l * k + j]);
        }
        for (int64_t l = 0; l < n; ++l) vv += W(vh[i * n + l]) * conjugate(W(vh[j * n + l]));
        CHECK(std::abs(qq - W(i == j)) <= tol * double(m));
        CHECK(std::abs(uu - W(i == j)) <= tol * double(m));
        CHECK(std::abs(vv - W(i == j)) <= tol * double(n));
      }
    }
    if constexpr (!is_complex)  // a second svd: not bit-reproducible
      CHECK(std::abs(double(two[0]) - double(sv[0])) <= tol * double(sv[0]));
  }
}

TEST_CASE("gradients of inv and eigh equal central differences", "[linalg][autodiff]") {
  Pick pick(36);
  std::mt19937 rng(37);
  for (int trial = 0; trial < 3; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t n = 2 + int64_t(pick(7));
    const NamedSharding sa = random_sharding(pick, mesh, 2), sc = random_sharding(pick, mesh, 2);
    INFO("n " << n << " " << dax::to_string(sa));
    auto a = random_matrix(n, n, 130 + trial);
    for (int64_t i = 0; i < n; ++i) a[i * n + i] += 3.0;
    const auto weights = dax::device_put(random_matrix(n, n, 140 + trial), {n, n}, sc);
    const auto weights_n = dax::device_put(random_matrix(n, 1, 150 + trial), {n}, NamedSharding(mesh, P()));
    dax::test::check_against_differences(
        [&](const dax::test::Params& p) { return dax::sum(dax::linalg::inv(p[0]) * weights); }, {a}, {{n, n}}, {sa},
        rng);
    // Eigenvectors' signs are arbitrary: the loss sees their squares.
    dax::test::check_against_differences(
        [&](const dax::test::Params& p) {
          const auto e = dax::linalg::eigh(p[0]);
          return dax::sum(e.eigenvalues * weights_n) + dax::sum(e.eigenvectors * e.eigenvectors * weights);
        },
        {spd(n, 160 + trial)}, {{n, n}}, {sa}, rng);
  }
}

TEST_CASE("gradients of slogdet, det, qr and svd equal central differences, tall and wide", "[linalg][autodiff]") {
  Pick pick(38);
  std::mt19937 rng(39);
  for (int trial = 0; trial < 3; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t n = 2 + int64_t(pick(6)), m = 2 + int64_t(pick(6));
    const int64_t k = std::min(m, n);
    const NamedSharding sa = random_sharding(pick, mesh, 2), sc = random_sharding(pick, mesh, 2);
    const NamedSharding replicated(mesh, P());
    INFO("m " << m << " n " << n << " " << dax::to_string(sa));
    auto square = random_matrix(n, n, 170 + trial);
    for (int64_t i = 0; i < n; ++i) square[i * n + i] += trial == 1 ? -3.0 : 3.0;  // det < 0 for odd n once
    dax::test::check_against_differences(
        [&](const dax::test::Params& p) {
          const auto s = dax::linalg::slogdet(p[0]);
          return s.logabsdet * 0.7 + dax::linalg::det(p[0]) * 0.01;
        },
        {square}, {{n, n}}, {sa}, rng);
    // q and r: Householder's signs follow the matrix smoothly, so the loss may see them as they are.
    const auto wq = dax::device_put(random_matrix(m, k, 180 + trial), {m, k}, sc);
    const auto wr = dax::device_put(random_matrix(k, n, 185 + trial), {k, n}, sc);
    dax::test::check_against_differences(
        [&](const dax::test::Params& p) {
          const auto f = dax::linalg::qr(p[0]);
          return dax::sum(f.q * wq) + dax::sum(f.r * wr);
        },
        {random_matrix(m, n, 190 + trial)}, {{m, n}}, {sa}, rng);
    // A singular pair's signs are arbitrary: the loss sees u diag(c) vh, u o u and vh o vh, which
    // they leave alone, and every factor's cotangent reaches a.
    const auto wu = dax::device_put(random_matrix(m, k, 200 + trial), {m, k}, sc);
    const auto wv = dax::device_put(random_matrix(k, n, 205 + trial), {k, n}, sc);
    const auto wa = dax::device_put(random_matrix(m, n, 210 + trial), {m, n}, sc);
    const auto c = dax::device_put(random_matrix(1, k, 215 + trial), {1, k}, replicated);
    const auto ws = dax::device_put(random_matrix(k, 1, 220 + trial), {k}, replicated);
    dax::test::check_against_differences(
        [&](const dax::test::Params& p) {
          const auto f = dax::linalg::svd(p[0]);
          return dax::sum(f.s * ws) + dax::sum(dax::matmul(f.u * c, f.vh) * wa) + dax::sum(f.u * f.u * wu) +
                 dax::sum(f.vh * f.vh * wv);
        },
        {random_matrix(m, n, 230 + trial)}, {{m, n}}, {sa}, rng);
    // The spectral norm through svd.
    dax::test::check_against_differences(
        [&](const dax::test::Params& p) { return dax::linalg::norm(p[0], "2"); }, {random_matrix(m, n, 240 + trial)},
        {{m, n}}, {sa}, rng);
  }
}

TEST_CASE("larger matrices: several block cycles per process, 64-row blocks, out shardings", "[linalg]") {
  const int world = dax::test::world_size();
  const Mesh line(Shape{world}, {"x"});
  const Mesh grid(world >= 4 ? Shape{2, world / 2} : Shape{1, world}, {"x", "y"});
  for (int64_t n : {33, 65, 130}) {
    const Mesh& mesh = n == 65 ? grid : line;
    const NamedSharding rows(mesh, P("x")), cols(mesh, P(dax::none, mesh.axis_names().back()));
    INFO("n " << n << " " << dax::to_string(mesh));
    const auto a = spd(n, 200 + unsigned(n));
    const auto b = random_matrix(n, 2, 300 + unsigned(n));
    const auto da = dax::device_put(a, {n, n}, rows);
    const auto db = dax::device_put(b, {n, 2}, rows);
    const double tol = 1e-11 * double(n);
    CHECK(relative_error(host(dax::linalg::cholesky(da)), host_cholesky(a, n)) <= tol);
    const auto x = dax::linalg::solve(da, db, cols);
    CHECK(x.sharding() == cols);
    CHECK(relative_error(host(x), host_solve(a, b, n, 2)) <= tol);
    const auto ai = dax::linalg::inv(da, cols);
    CHECK(ai.sharding() == cols);
    std::vector<double> eye(n * n, 0.0);
    for (int64_t i = 0; i < n; ++i) eye[i * n + i] = 1;
    CHECK(relative_error(host(ai), host_solve(a, eye, n, n)) <= tol);
    const auto e = dax::linalg::eigh(da, cols);
    CHECK(e.eigenvectors.sharding() == cols);
    const auto w = host(e.eigenvalues), v = host(e.eigenvectors);
    if (w.empty()) continue;  // a rank outside the mesh (5 or 7 ranks and the 2-D mesh) holds none
    double worst = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double av = 0;
        for (int64_t l = 0; l < n; ++l) av += a[i * n + l] * v[l * n + j];
        worst = std::max(worst, std::abs(av - v[i * n + j] * w[j]));
      }
    CHECK(worst <= tol * w.back());
  }
}

TEST_CASE("linalg's errors name what was wrong, on every rank", "[linalg]") {
  const int world = dax::test::world_size();
  const Mesh mesh(Shape{world}, {"x"});
  const NamedSharding rows(mesh, P("x"));
  const int64_t n = 6;
  std::vector<double> not_spd(n * n, 0.0);
  for (int64_t i = 0; i < n; ++i) not_spd[i * n + i] = i == 3 ? -1.0 : 2.0;
  CHECK(dax::test::error_of([&] { (void)dax::linalg::cholesky(dax::device_put(not_spd, {n, n}, rows)); }) ==
        "cholesky: the matrix is not positive definite (its leading minor of order 4 is not positive)");
  const auto zeros = dax::zeros<double>({n, n}, rows);
  CHECK(dax::test::error_of([&] { (void)dax::linalg::solve(zeros, dax::ones<double>({n}, rows)); }) ==
        "solve: the matrix is singular (U(1, 1) of its LU factorization is zero)");
  CHECK(dax::test::error_of([&] { (void)dax::linalg::cholesky(dax::zeros<double>({4, 5}, rows)); }) ==
        "cholesky: expected a square matrix, got shape (4, 5)");
  CHECK(dax::test::error_of([&] { (void)dax::linalg::solve(zeros, dax::ones<double>({5}, rows)); }) ==
        "solve: a is (6, 6) but b has 5 rows (expected 6)");
  const Mesh other(Shape{world}, {"y"});
  CHECK(dax::test::error_of([&] {
          (void)dax::linalg::triangular_solve(zeros, dax::ones<double>({n}, NamedSharding(other, P("y"))));
        }) == "triangular_solve: a and b are on different meshes: " + dax::to_string(mesh) + " and " +
                  dax::to_string(other));
  // A singular matrix has no log-determinant: sign 0 and -inf, as NumPy says, on every rank.
  const auto s = dax::linalg::slogdet(zeros);
  CHECK(host(s.sign)[0] == 0.0);
  CHECK(host(s.logabsdet)[0] == -std::numeric_limits<double>::infinity());
  CHECK(host(dax::linalg::det(zeros))[0] == 0.0);
  // ... nor a gradient (inverted from the forward's LU factors; JAX gives infinities).
  CHECK(dax::test::error_of([&] {
          (void)dax::value_and_grad([](const dax::DistArray<double>& x) { return dax::linalg::slogdet(x).logabsdet; })(zeros);
        }) == "slogdet's gradient: the matrix is singular (log |det a| is -inf), so it has none");
}

namespace {

/// A random n x k complex matrix, both parts in [-1, 1), row-major, in double.
std::vector<complex128> random_complex_matrix(int64_t n, int64_t k, unsigned seed) {
  return dax::test::random_complex<complex128>(n * k, seed);
}

/// A Hermitian positive definite n x n matrix.
std::vector<complex128> hpd(int64_t n, unsigned seed) { return gram_plus_diagonal(random_complex_matrix(n, n, seed), n); }

}  // namespace

TEMPLATE_TEST_CASE("complex matrices: cholesky, solve, triangular_solve, inv, slogdet and det against the host",
                   "[linalg][complex]", dax::complex64, dax::complex128) {
  using C = TestType;
  using R = typename C::value_type;
  const double tol = std::is_same_v<R, float> ? 1e-4 : 1e-11;
  Pick pick(36);
  for (int trial = 0; trial < 8; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t n = 1 + int64_t(pick(30)), k = 1 + int64_t(pick(4));
    const NamedSharding sa = random_sharding(pick, mesh, 2), sb = random_sharding(pick, mesh, 2);
    INFO("n " << n << " k " << k << " " << dax::to_string(sa) << " " << dax::to_string(sb));
    // Cholesky of a Hermitian matrix: its lower triangle and its diagonal's real part are read.
    auto h = hpd(n, 300 + trial);
    const auto want_l = host_cholesky(h, n);
    for (int64_t i = 0; i < n; ++i) {
      h[i * n + i] += complex128(0, 5);  // not read
      for (int64_t j = i + 1; j < n; ++j) h[i * n + j] = 7;  // not read
    }
    const auto l = host(dax::linalg::cholesky(dax::device_put(narrow<C>(h), {n, n}, sa)));
    CHECK(relative_error(l, want_l) <= tol * double(n));
    for (int64_t i = 0; i < n && !l.empty(); ++i)
      for (int64_t j = i + 1; j < n; ++j) CHECK(l[i * n + j] == C(0));
    // solve, and the determinant from the same elimination.
    auto a = random_complex_matrix(n, n, 310 + trial);
    for (int64_t i = 0; i < n; ++i) a[i * n + i] += complex128(2, trial % 2 ? -1 : 1);
    const auto b = random_complex_matrix(n, k, 320 + trial);
    complex128 want_det;
    const auto want_x = host_solve(a, b, n, k, &want_det);
    const auto da = dax::device_put(narrow<C>(a), {n, n}, sa);
    const auto db = dax::device_put(narrow<C>(b), {n, k}, sb);
    const auto x = dax::linalg::solve(da, db);
    CHECK(x.sharding() == sb);
    CHECK(relative_error(host(x), want_x) <= tol * double(n));
    for (bool lower : {true, false}) {
      std::vector<complex128> t(n * n, 0.0);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
          if (lower ? j <= i : j >= i) t[i * n + j] = a[i * n + j];
      CHECK(relative_error(host(dax::linalg::triangular_solve(da, db, lower)), host_solve(t, b, n, k)) <=
            tol * double(n));
    }
    // inv: a inv(a) = I.
    const auto ai = host(dax::linalg::inv(da));
    if (!ai.empty()) {
      std::vector<complex128> prod(n * n, 0.0), eye(n * n, 0.0);
      for (int64_t i = 0; i < n; ++i) eye[i * n + i] = 1;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t q = 0; q < n; ++q) prod[i * n + j] += a[i * n + q] * complex128(ai[q * n + j]);
      CHECK(relative_error(prod, eye) <= tol * double(n));
    }
    // slogdet: a complex sign of modulus 1 and a real log |det|; det their product.
    const auto sl = dax::linalg::slogdet(da);
    static_assert(std::is_same_v<decltype(sl.logabsdet), dax::DistArray<R>>);
    const auto sign = host(sl.sign), d = host(dax::linalg::det(da));
    const auto logabs = host(sl.logabsdet);
    if (!sign.empty()) {
      CHECK(std::abs(complex128(sign[0]) - want_det / std::abs(want_det)) <= tol * double(n));
      CHECK(std::abs(double(logabs[0]) - std::log(std::abs(want_det))) <= tol * double(n) * std::max(1.0, std::log(std::abs(want_det))));
      CHECK(std::abs(complex128(d[0]) - want_det) <= tol * double(n) * std::abs(want_det));
    }
  }
}

TEST_CASE("gradients of complex cholesky, solve, triangular_solve, inv, slogdet and det equal central differences",
          "[linalg][complex][autodiff]") {
  using dax::DistArray;
  using Leaves = std::vector<DistArray<complex128>>;
  Pick pick(37);
  for (int trial = 0; trial < 2; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t n = 2 + int64_t(pick(3)), k = 1 + int64_t(pick(2));
    const NamedSharding sa = random_sharding(pick, mesh, 2), sb = random_sharding(pick, mesh, 2);
    const NamedSharding sc = random_sharding(pick, mesh, 2);
    INFO("n " << n << " k " << k << " " << dax::to_string(sa) << " " << dax::to_string(sb));
    auto a = random_complex_matrix(n, n, 330 + trial);
    for (int64_t i = 0; i < n; ++i) a[i * n + i] += complex128(3, 1);
    const auto b = random_complex_matrix(n, k, 340 + trial);
    const auto w_nn = dax::device_put(random_complex_matrix(n, n, 350 + trial), {n, n}, sc);
    const auto w_nk = dax::device_put(random_complex_matrix(n, k, 360 + trial), {n, k}, sc);
    const auto w = dax::device_put(random_complex_matrix(1, 1, 370 + trial), {}, NamedSharding(mesh, P()));
    // A real loss of a complex result: Re sum(f * w), which reaches both parts of f.
    const auto re_sum = [](const DistArray<complex128>& f, const DistArray<complex128>& weights) {
      return dax::sum(dax::real(f * weights));
    };
    // Cholesky reads a's lower triangle and its diagonal's real part: differences in the rest are 0.
    dax::test::check_complex_gradient([&](const Leaves& p) { return re_sum(dax::linalg::cholesky(p[0]), w_nn); },
                                      {hpd(n, 380 + trial)}, {{n, n}}, {sa});
    dax::test::check_complex_gradient([&](const Leaves& p) { return re_sum(dax::linalg::solve(p[0], p[1]), w_nk); },
                                      {a, b}, {{n, n}, {n, k}}, {sa, sb});
    for (bool lower : {true, false})
      dax::test::check_complex_gradient(
          [&](const Leaves& p) { return re_sum(dax::linalg::triangular_solve(p[0], p[1], lower), w_nk); }, {a, b},
          {{n, n}, {n, k}}, {sa, sb});
    dax::test::check_complex_gradient([&](const Leaves& p) { return re_sum(dax::linalg::inv(p[0]), w_nn); }, {a},
                                      {{n, n}}, {sa});
    dax::test::check_complex_gradient([&](const Leaves& p) { return dax::linalg::slogdet(p[0]).logabsdet; }, {a},
                                      {{n, n}}, {sa});
    dax::test::check_complex_gradient([&](const Leaves& p) { return re_sum(dax::linalg::slogdet(p[0]).sign, w); }, {a},
                                      {{n, n}}, {sa});
    dax::test::check_complex_gradient([&](const Leaves& p) { return re_sum(dax::linalg::det(p[0]), w); }, {a},
                                      {{n, n}}, {sa});
  }
}

TEMPLATE_TEST_CASE("complex eigh: real ascending eigenvalues, unitary eigenvectors of a Hermitian matrix",
                   "[linalg][complex]", dax::complex64, dax::complex128) {
  using C = TestType;
  using R = typename C::value_type;
  const double tol = std::is_same_v<R, float> ? 2e-4 : 1e-10;
  Pick pick(38);
  for (int trial = 0; trial < 5; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t n = 1 + int64_t(pick(20));
    const NamedSharding s = random_sharding(pick, mesh, 2);
    INFO("n " << n << " " << dax::to_string(s));
    auto h = hpd(n, 390 + trial);
    for (int64_t i = 0; i < n; ++i) h[i * n + i] -= double(n + 1);  // eigenvalues of both signs
    auto read = h;  // what eigh reads: the lower triangle and the diagonal's real part
    for (int64_t i = 0; i < n; ++i) {
      read[i * n + i] += complex128(0, 3);
      for (int64_t j = i + 1; j < n; ++j) read[i * n + j] = -4;
    }
    const auto e = dax::linalg::eigh(dax::device_put(narrow<C>(read), {n, n}, s));
    static_assert(std::is_same_v<decltype(e.eigenvalues), dax::DistArray<R>>);
    CHECK(e.eigenvectors.sharding() == s);
    const auto w = host(e.eigenvalues);
    const auto v = host(e.eigenvectors);
    if (w.empty()) continue;
    double scale = 0;
    for (auto x : w) scale = std::max(scale, std::abs(double(x)));
    for (int64_t i = 0; i + 1 < n; ++i) CHECK(w[i] <= w[i + 1]);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        complex128 av = 0, vv = 0;
        for (int64_t q = 0; q < n; ++q) {
          av += h[i * n + q] * complex128(v[q * n + j]);
          vv += std::conj(complex128(v[q * n + i])) * complex128(v[q * n + j]);
        }
        CHECK(std::abs(av - complex128(v[i * n + j]) * double(w[j])) <= tol * double(n) * scale);
        CHECK(std::abs(vv - (i == j ? 1.0 : 0.0)) <= tol * double(n));
      }
  }
}

TEST_CASE("gradients of complex eigh equal central differences, for losses the vectors' phases leave alone",
          "[linalg][complex][autodiff]") {
  using dax::DistArray;
  using Leaves = std::vector<DistArray<complex128>>;
  Pick pick(39);
  for (int trial = 0; trial < 2; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t n = 2 + int64_t(pick(3));
    const NamedSharding sa = random_sharding(pick, mesh, 2), sc = random_sharding(pick, mesh, 2);
    INFO("n " << n << " " << dax::to_string(sa));
    const auto weights = dax::device_put(random_matrix(n, n, 400 + trial), {n, n}, sc);
    const auto weights_n = dax::device_put(random_matrix(n, 1, 410 + trial), {n}, NamedSharding(mesh, P()));
    const auto h = hpd(n, 420 + trial);
    dax::test::check_complex_gradient(
        [&](const Leaves& p) { return dax::sum(dax::linalg::eigh(p[0]).eigenvalues * weights_n); }, {h}, {{n, n}}, {sa});
    // |V_ij|^2 does not change with a column's phase.
    dax::test::check_complex_gradient(
        [&](const Leaves& p) {
          const auto v = dax::linalg::eigh(p[0]).eigenvectors;
          return dax::sum(dax::real(v * dax::conj(v)) * weights);
        },
        {h}, {{n, n}}, {sa}, 1e-6);
  }
}

TEST_CASE("gradients of complex qr equal central differences, tall, square and wide", "[linalg][complex][autodiff]") {
  using dax::DistArray;
  using Leaves = std::vector<DistArray<complex128>>;
  Pick pick(40);
  const int64_t shapes[4][2] = {{5, 3}, {3, 3}, {2, 5}, {1, 1}};  // tall, square, wide, a scalar
  for (int trial = 0; trial < 4; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t m = shapes[trial][0], n = shapes[trial][1], k = std::min(m, n);
    const NamedSharding sa = random_sharding(pick, mesh, 2), sc = random_sharding(pick, mesh, 2);
    INFO(m << " x " << n << " " << dax::to_string(sa));
    const auto wq = dax::device_put(random_complex_matrix(m, k, 430 + trial), {m, k}, sc);
    const auto wr = dax::device_put(random_complex_matrix(k, n, 440 + trial), {k, n}, sc);
    auto a = random_complex_matrix(m, n, 450 + trial);
    for (int64_t i = 0; i < k; ++i) a[i * n + i] += 2.0;  // well away from a rank-deficient square block
    dax::test::check_complex_gradient(
        [&](const Leaves& p) {
          const auto f = dax::linalg::qr(p[0]);
          return dax::sum(dax::real(f.q * wq)) + dax::sum(dax::real(f.r * wr));
        },
        {a}, {{m, n}}, {sa}, 1e-6);
  }
}

TEST_CASE("gradients of complex svd equal central differences, for losses the columns' phases leave alone",
          "[linalg][complex][autodiff]") {
  using dax::DistArray;
  using Leaves = std::vector<DistArray<complex128>>;
  Pick pick(41);
  const int64_t shapes[3][2] = {{4, 2}, {2, 2}, {2, 3}};  // tall, square, wide
  for (int trial = 0; trial < 3; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t m = shapes[trial][0], n = shapes[trial][1], k = std::min(m, n);
    const NamedSharding sa = random_sharding(pick, mesh, 2), sc = random_sharding(pick, mesh, 2);
    const NamedSharding replicated(mesh, P());
    INFO(m << " x " << n << " " << dax::to_string(sa));
    const auto a = random_complex_matrix(m, n, 460 + trial);
    const auto w = dax::device_put(random_complex_matrix(m, n, 470 + trial), {m, n}, sc);
    const auto wu = dax::device_put(random_matrix(m, k, 480 + trial), {m, k}, sc);
    const auto wv = dax::device_put(random_matrix(k, n, 490 + trial), {k, n}, sc);
    const auto ws = dax::device_put(random_matrix(k, 1, 500 + trial), {k}, replicated);
    const auto c = dax::device_put(random_complex_matrix(1, k, 510 + trial), {1, k}, replicated);
    dax::test::check_complex_gradient(
        [&](const Leaves& p) {
          const auto f = dax::linalg::svd(p[0]);
          return dax::sum(f.s * ws) + dax::sum(dax::real(dax::matmul(f.u * c, f.vh) * w)) +
                 dax::sum(dax::real(f.u * dax::conj(f.u)) * wu) + dax::sum(dax::real(f.vh * dax::conj(f.vh)) * wv);
        },
        {a}, {{m, n}}, {sa}, 1e-6);
  }
}

namespace {

/// A random n x k matrix of element type W (double or complex128), in [-1, 1) (both parts).
template <class W>
std::vector<W> random_of(int64_t n, int64_t k, unsigned seed) {
  if constexpr (dax::detail::is_complex_v<W>) return random_complex_matrix(n, k, seed);
  else return random_matrix(n, k, seed);
}

/// `count` matrices made by `make(i)`, one after the other (a batch's row-major data).
template <class Make>
auto stacked(int64_t count, Make&& make) {
  decltype(make(0)) all;
  for (int64_t i = 0; i < count; ++i) {
    const auto m = make(i);
    all.insert(all.end(), m.begin(), m.end());
  }
  return all;
}

/// Matrix i (of `size` elements) of a batch's data.
template <class S>
std::vector<S> matrix_of(const std::vector<S>& all, int64_t i, int64_t size) {
  return std::vector<S>(all.begin() + i * size, all.begin() + (i + 1) * size);
}

Shape with_matrix(Shape batch, std::initializer_list<int64_t> tail) {
  batch.insert(batch.end(), tail);
  return batch;
}

}  // namespace

TEMPLATE_TEST_CASE("batches of matrices: cholesky, solve, triangular_solve, inv, slogdet and det of each, any sharding",
                   "[linalg][batched]", double, dax::complex64) {
  using T = TestType;
  using W = std::conditional_t<dax::detail::is_complex_v<T>, complex128, double>;
  const double tol = std::is_same_v<T, double> ? 1e-11 : 1e-4;
  Pick pick(41);
  for (int trial = 0; trial < 6; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape batch = trial % 2 ? Shape{1 + int64_t(pick(3)), 1 + int64_t(pick(3))} : Shape{1 + int64_t(pick(9))};
    const int64_t n = 1 + int64_t(pick(6)), k = 1 + int64_t(pick(3)), count = dax::numel(batch);
    const Shape sa = with_matrix(batch, {n, n}), sb = with_matrix(batch, {n, k}), sv = with_matrix(batch, {n});
    const NamedSharding ha = random_sharding(pick, mesh, sa.size()), hb = random_sharding(pick, mesh, sb.size());
    const NamedSharding hv = random_sharding(pick, mesh, sv.size());
    INFO("batch " << dax::to_string(batch) << " n " << n << " k " << k << " " << dax::to_string(ha) << " "
                  << dax::to_string(hb) << " " << dax::to_string(hv));
    const unsigned seed = 400 + 10 * trial;
    // Cholesky of each positive definite matrix, in a's sharding, zeros above the diagonal.
    const auto pd = stacked(count, [&](int64_t i) { return gram_plus_diagonal(random_of<W>(n, n, seed + i), n); });
    const auto l = dax::linalg::cholesky(dax::device_put(narrow<T>(pd), sa, ha));
    CHECK(l.sharding() == ha);
    const auto lh = host(l);
    const auto want_l = stacked(count, [&](int64_t i) { return host_cholesky(matrix_of(pd, i, n * n), n); });
    CHECK(relative_error(lh, want_l) <= tol * double(n));
    // solve with matrices and with vectors, each matrix's own; the triangles; the inverse.
    const auto a = stacked(count, [&](int64_t i) {
      auto m = random_of<W>(n, n, seed + 100 + i);
      for (int64_t j = 0; j < n; ++j) m[j * n + j] += W(2.5);
      return m;
    });
    const auto b = stacked(count, [&](int64_t i) { return random_of<W>(n, k, seed + 200 + i); });
    const auto v = stacked(count, [&](int64_t i) { return random_of<W>(n, 1, seed + 300 + i); });
    const auto da = dax::device_put(narrow<T>(a), sa, ha);
    const auto x = dax::linalg::solve(da, dax::device_put(narrow<T>(b), sb, hb));
    CHECK(x.sharding() == hb);
    std::vector<W> dets(count);
    CHECK(relative_error(host(x), stacked(count, [&](int64_t i) {
            return host_solve(matrix_of(a, i, n * n), matrix_of(b, i, n * k), n, k, &dets[i]);
          })) <= tol * double(n));
    CHECK(relative_error(host(dax::linalg::solve(da, dax::device_put(narrow<T>(v), sv, hv))), stacked(count, [&](int64_t i) {
            return host_solve(matrix_of(a, i, n * n), matrix_of(v, i, n), n, 1);
          })) <= tol * double(n));
    for (bool lower : {true, false}) {
      const auto t = stacked(count, [&](int64_t i) {
        auto m = matrix_of(a, i, n * n);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < n; ++c)
            if (lower ? c > r : c < r) m[r * n + c] = 0;
        return m;
      });
      CHECK(relative_error(host(dax::linalg::triangular_solve(da, dax::device_put(narrow<T>(b), sb, hb), lower)),
                           stacked(count, [&](int64_t i) {
                             return host_solve(matrix_of(t, i, n * n), matrix_of(b, i, n * k), n, k);
                           })) <= tol * double(n));
    }
    std::vector<W> eye(n * n, W(0));
    for (int64_t j = 0; j < n; ++j) eye[j * n + j] = 1;
    const auto ai = dax::linalg::inv(da);
    CHECK(ai.sharding() == ha);
    CHECK(relative_error(host(ai), stacked(count, [&](int64_t i) { return host_solve(matrix_of(a, i, n * n), eye, n, n); })) <=
          tol * double(n));
    // slogdet and det: arrays of the batch's shape, split as a's batch dimensions.
    const auto sl = dax::linalg::slogdet(da);
    CHECK(sl.sign.shape() == batch);
    const auto sign = host(sl.sign), d = host(dax::linalg::det(da));
    const auto logabs = host(sl.logabsdet);
    for (int64_t i = 0; i < count && !sign.empty(); ++i) {
      CHECK(std::abs(W(sign[i]) - dets[i] / std::abs(dets[i])) <= tol * double(n));
      CHECK(std::abs(double(logabs[i]) - std::log(std::abs(dets[i]))) <= tol * double(n) * 4);
      CHECK(std::abs(W(d[i]) - dets[i]) <= tol * double(n) * std::abs(dets[i]));
    }
  }
}

TEST_CASE("a batch split over the mesh factors in place: nothing moves but the check for failures",
          "[linalg][batched]") {
  const int world = dax::test::world_size();
  const Mesh mesh(Shape{world}, {"x"});
  const int64_t count = 2 * world + 1, n = 5;  // uneven: some devices hold one more matrix
  const auto pd = stacked(count, [&](int64_t i) { return spd(n, 500 + unsigned(i)); });
  const auto a = dax::device_put(pd, {count, n, n}, NamedSharding(mesh, P("x")));
  dax::comm_stats().reset();
  const auto l = dax::linalg::cholesky(a);
  CHECK(dax::comm_stats().of("all_gather").bytes == 0);
  CHECK(dax::comm_stats().of("all_to_all").bytes == 0);
  CHECK(relative_error(host(l), stacked(count, [&](int64_t i) { return host_cholesky(matrix_of(pd, i, n * n), n); })) < 1e-12);
}

TEST_CASE("gradients of batched cholesky, solve, triangular_solve, inv, slogdet and det equal central differences",
          "[linalg][batched][autodiff]") {
  Pick pick(42);
  std::mt19937 rng(43);
  for (int trial = 0; trial < 2; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t count = 2 + int64_t(pick(2)), n = 2 + int64_t(pick(3)), k = 1 + int64_t(pick(2));
    const Shape sa{count, n, n}, sb{count, n, k};
    const NamedSharding ha = random_sharding(pick, mesh, 3), hb = random_sharding(pick, mesh, 3);
    const NamedSharding hw = random_sharding(pick, mesh, 3);
    INFO("count " << count << " n " << n << " k " << k << " " << dax::to_string(ha) << " " << dax::to_string(hb));
    const auto a = stacked(count, [&](int64_t i) {
      auto m = random_matrix(n, n, 600 + unsigned(trial * 10 + i));
      for (int64_t j = 0; j < n; ++j) m[j * n + j] += 3.0;
      return m;
    });
    const auto b = random_matrix(count * n, k, 650 + trial);
    const auto w_nn = dax::device_put(random_matrix(count * n, n, 660 + trial), sa, hw);
    const auto w_nk = dax::device_put(random_matrix(count * n, k, 670 + trial), sb, hw);
    const auto w_c = dax::device_put(random_matrix(count, 1, 680 + trial), {count}, NamedSharding(mesh, P()));
    const auto pd = stacked(count, [&](int64_t i) { return spd(n, 690 + unsigned(trial * 10 + i)); });
    using dax::test::Params;
    dax::test::check_against_differences(
        [&](const Params& p) { return dax::sum(dax::linalg::cholesky(p[0]) * w_nn); }, {pd}, {sa}, {ha}, rng);
    dax::test::check_against_differences(
        [&](const Params& p) { return dax::sum(dax::linalg::solve(p[0], p[1]) * w_nk); }, {a, b}, {sa, sb}, {ha, hb}, rng);
    for (bool lower : {true, false})
      dax::test::check_against_differences(
          [&](const Params& p) { return dax::sum(dax::linalg::triangular_solve(p[0], p[1], lower) * w_nk); }, {a, b},
          {sa, sb}, {ha, hb}, rng);
    dax::test::check_against_differences([&](const Params& p) { return dax::sum(dax::linalg::inv(p[0]) * w_nn); }, {a},
                                         {sa}, {ha}, rng);
    dax::test::check_against_differences(
        [&](const Params& p) { return dax::sum(dax::linalg::slogdet(p[0]).logabsdet * w_c); }, {a}, {sa}, {ha}, rng);
    dax::test::check_against_differences([&](const Params& p) { return dax::sum(dax::linalg::det(p[0]) * w_c); }, {a},
                                         {sa}, {ha}, rng);
  }
  // Complex: cholesky and det, each matrix's own phases.
  using dax::DistArray;
  using Leaves = std::vector<DistArray<complex128>>;
  const Mesh& mesh = random_mesh(pick);
  const int64_t count = 2, n = 2;
  const NamedSharding ha = random_sharding(pick, mesh, 3);
  const auto hermitian = stacked(count, [&](int64_t i) { return hpd(n, 700 + unsigned(i)); });
  const auto w_nn = dax::device_put(random_complex_matrix(count * n, n, 710), {count, n, n}, ha);
  const auto w_c = dax::device_put(random_complex_matrix(count, 1, 720), {count}, NamedSharding(mesh, P()));
  dax::test::check_complex_gradient(
      [&](const Leaves& p) { return dax::sum(dax::real(dax::linalg::cholesky(p[0]) * w_nn)); }, {hermitian},
      {{count, n, n}}, {ha});
  auto general = random_complex_matrix(count * n, n, 730);
  for (int64_t i = 0; i < count * n; ++i) general[i * n + i % n] += complex128(3, 1);
  dax::test::check_complex_gradient([&](const Leaves& p) { return dax::sum(dax::real(dax::linalg::det(p[0]) * w_c)); },
                                    {general}, {{count, n, n}}, {ha});
}

TEST_CASE("batched linalg's errors name the failing matrix, on every rank", "[linalg][batched]") {
  const int world = dax::test::world_size();
  const Mesh mesh(Shape{world}, {"x"});
  const int64_t n = 3;
  auto pd = stacked(5, [&](int64_t i) { return spd(n, 800 + unsigned(i)); });
  pd[3 * n * n + 4] = -50;  // matrix 3's (1, 1): its leading minor of order 2 is negative
  CHECK(dax::test::error_of([&] { (void)dax::linalg::cholesky(dax::device_put(pd, {5, n, n}, NamedSharding(mesh, P("x")))); }) ==
        "cholesky: the batch's matrix (3,) is not positive definite (its leading minor of order 2 is not positive)");
  const auto zeros = dax::zeros<double>({2, 2, n, n}, NamedSharding(mesh, P(dax::none, "x")));
  CHECK(dax::test::error_of([&] { (void)dax::linalg::inv(zeros); }) ==
        "inv: the batch's matrix (0, 0) is singular (a zero on the diagonal of U, its LU factorization's)");
  CHECK(dax::test::error_of([&] { (void)dax::linalg::solve(zeros, dax::ones<double>({2, 3, n}, NamedSharding(mesh, P()))); }) ==
        "solve: a is a batch of matrices (2, 2, 3, 3): expected b of its batch dimensions and rank 3 (vectors) or 4 "
        "(matrices), got shape (2, 3, 3)");
  CHECK(dax::test::error_of([&] { (void)dax::linalg::cholesky(dax::zeros<double>({2, 3, 4}, NamedSharding(mesh, P()))); }) ==
        "cholesky: expected square matrices (..., n, n), got shape (2, 3, 4)");
  CHECK(dax::test::error_of([&] { (void)dax::linalg::qr(dax::zeros<double>({4}, NamedSharding(mesh, P()))); }) ==
        "qr: expected a matrix or a batch of them (..., m, n), got shape (4,)");
  // A singular matrix of the batch: sign 0 and -inf for it alone, and no gradient.
  auto mixed = stacked(2, [&](int64_t i) { return spd(n, 810 + unsigned(i)); });
  for (int64_t j = 0; j < n * n; ++j) mixed[n * n + j] = 0;
  const auto m = dax::device_put(mixed, {2, n, n}, NamedSharding(mesh, P("x")));
  const auto s = dax::linalg::slogdet(m);
  CHECK(host(s.sign)[1] == 0.0);
  CHECK(host(s.logabsdet)[1] == -std::numeric_limits<double>::infinity());
  CHECK(std::isfinite(host(s.logabsdet)[0]));
  CHECK(dax::test::error_of([&] {
          (void)dax::value_and_grad([](const dax::DistArray<double>& x) { return dax::sum(dax::linalg::slogdet(x).logabsdet); })(m);
        }) == "slogdet's gradient: 1 of the batch's 2 matrices singular (log |det| is -inf), so it has none");
}

namespace {

/// (m, k) x (k, n) on the host, row-major.
template <class S>
std::vector<S> host_matmul(const std::vector<S>& a, const std::vector<S>& b, int64_t m, int64_t k, int64_t n) {
  std::vector<S> c(size_t(m * n), S(0));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t l = 0; l < k; ++l)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[i * k + l] * b[l * n + j];
  return c;
}

/// The (m, n) matrix's conjugate transpose, on the host.
template <class S>
std::vector<S> host_adjoint(const std::vector<S>& a, int64_t m, int64_t n) {
  std::vector<S> t(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) t[j * m + i] = conjugate(a[i * n + j]);
  return t;
}

/// The k x k identity in W.
template <class W>
std::vector<W> identity(int64_t k) {
  std::vector<W> eye(size_t(k * k), W(0));
  for (int64_t i = 0; i < k; ++i) eye[i * k + i] = W(1);
  return eye;
}

}  // namespace

TEMPLATE_TEST_CASE("batches of matrices: eigh, qr and svd of each reproduce it", "[linalg][batched]", double,
                   dax::complex64) {
  using T = TestType;
  using W = std::conditional_t<dax::detail::is_complex_v<T>, complex128, double>;
  const double tol = std::is_same_v<T, double> ? 1e-11 : 2e-4;
  Pick pick(44);
  for (int trial = 0; trial < 4; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape batch = trial % 2 ? Shape{1 + int64_t(pick(2)), 1 + int64_t(pick(3))} : Shape{1 + int64_t(pick(7))};
    const int64_t n = 1 + int64_t(pick(6)), m = 1 + int64_t(pick(6)), k = std::min(m, n), count = dax::numel(batch);
    const Shape sq = with_matrix(batch, {n, n}), sa = with_matrix(batch, {m, n});
    const NamedSharding hq = random_sharding(pick, mesh, sq.size()), ha = random_sharding(pick, mesh, sa.size());
    INFO("batch " << dax::to_string(batch) << " m " << m << " n " << n << " " << dax::to_string(hq) << " "
                  << dax::to_string(ha));
    const unsigned seed = 900 + 10 * trial;
    // eigh: V diag(w) = A V with w ascending, V^H V = I; the vectors in a's sharding.
    const auto pd = stacked(count, [&](int64_t i) { return gram_plus_diagonal(random_of<W>(n, n, seed + i), n); });
    const auto e = dax::linalg::eigh(dax::device_put(narrow<T>(pd), sq, hq));
    CHECK(e.eigenvectors.sharding() == hq);
    CHECK(e.eigenvalues.shape() == with_matrix(batch, {n}));
    const auto w = host(e.eigenvalues);
    const auto v = host(e.eigenvectors);
    for (int64_t i = 0; i < count && !v.empty(); ++i) {
      const auto vi = narrow<W>(matrix_of(v, i, n * n));
      auto scaled = vi;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < n; ++c) scaled[r * n + c] *= W(w[i * n + c]);
      for (int64_t c = 0; c + 1 < n; ++c) CHECK(w[i * n + c] <= w[i * n + c + 1]);
      CHECK(relative_error(host_matmul(matrix_of(pd, i, n * n), vi, n, n, n), scaled) <= tol * double(n));
      CHECK(relative_error(host_matmul(host_adjoint(vi, n, n), vi, n, n, n), identity<W>(n)) <= tol * double(n));
    }
    // qr and svd of (m, n) matrices, tall and wide.
    const auto a = stacked(count, [&](int64_t i) { return random_of<W>(m, n, seed + 100 + i); });
    const auto da = dax::device_put(narrow<T>(a), sa, ha);
    const auto f = dax::linalg::qr(da);
    CHECK(f.q.shape() == with_matrix(batch, {m, k}));
    CHECK(f.r.shape() == with_matrix(batch, {k, n}));
    const auto q = host(f.q);
    const auto r = host(f.r);
    for (int64_t i = 0; i < count && !q.empty(); ++i) {
      const auto qi = narrow<W>(matrix_of(q, i, m * k)), ri = narrow<W>(matrix_of(r, i, k * n));
      CHECK(relative_error(host_matmul(qi, ri, m, k, n), matrix_of(a, i, m * n)) <= tol * double(n));
      CHECK(relative_error(host_matmul(host_adjoint(qi, m, k), qi, k, m, k), identity<W>(k)) <= tol * double(m));
      for (int64_t rr = 0; rr < k; ++rr)
        for (int64_t c = 0; c < rr; ++c) CHECK(ri[rr * n + c] == W(0));
    }
    const auto d = dax::linalg::svd(da);
    CHECK(d.s.shape() == with_matrix(batch, {k}));
    const auto u = host(d.u), vh = host(d.vh);
    const auto sv = host(d.s);
    for (int64_t i = 0; i < count && !u.empty(); ++i) {
      auto us = narrow<W>(matrix_of(u, i, m * k));
      const auto vhi = narrow<W>(matrix_of(vh, i, k * n));
      for (int64_t c = 0; c < k; ++c) {
        CHECK(sv[i * k + c] >= 0);
        if (c + 1 < k) CHECK(sv[i * k + c] >= sv[i * k + c + 1]);
      }
      CHECK(relative_error(host_matmul(vhi, host_adjoint(vhi, k, n), k, n, k), identity<W>(k)) <= tol * double(n));
      CHECK(relative_error(host_matmul(host_adjoint(us, m, k), us, k, m, k), identity<W>(k)) <= tol * double(m));
      for (int64_t rr = 0; rr < m; ++rr)
        for (int64_t c = 0; c < k; ++c) us[rr * k + c] *= W(sv[i * k + c]);
      CHECK(relative_error(host_matmul(us, vhi, m, k, n), matrix_of(a, i, m * n)) <= tol * double(n));
    }
  }
}

TEST_CASE("gradients of batched eigh, qr and svd equal central differences, tall and wide",
          "[linalg][batched][autodiff]") {
  Pick pick(45);
  std::mt19937 rng(46);
  for (int trial = 0; trial < 2; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t count = 2 + int64_t(pick(2)), n = 2 + int64_t(pick(3)), m = 2 + int64_t(pick(4)), k = std::min(m, n);
    const NamedSharding hq = random_sharding(pick, mesh, 3), ha = random_sharding(pick, mesh, 3);
    const NamedSharding hw = random_sharding(pick, mesh, 3), replicated(mesh, P());
    INFO("count " << count << " m " << m << " n " << n << " " << dax::to_string(hq) << " " << dax::to_string(ha));
    using dax::test::Params;
    const unsigned seed = 950 + 10 * unsigned(trial);
    const auto w_nn = dax::device_put(random_matrix(count * n, n, seed), {count, n, n}, hw);
    const auto w_n = dax::device_put(random_matrix(count * n, 1, seed + 1), {count, n}, replicated);
    // Eigenvectors' signs are arbitrary: the loss sees their squares.
    dax::test::check_against_differences(
        [&](const Params& p) {
          const auto e = dax::linalg::eigh(p[0]);
          return dax::sum(e.eigenvalues * w_n) + dax::sum(e.eigenvectors * e.eigenvectors * w_nn);
        },
        {stacked(count, [&](int64_t i) { return spd(n, seed + 2 + unsigned(i)); })}, {{count, n, n}}, {hq}, rng);
    const auto wq = dax::device_put(random_matrix(count * m, k, seed + 3), {count, m, k}, hw);
    const auto wr = dax::device_put(random_matrix(count * k, n, seed + 4), {count, k, n}, hw);
    dax::test::check_against_differences(
        [&](const Params& p) {
          const auto f = dax::linalg::qr(p[0]);
          return dax::sum(f.q * wq) + dax::sum(f.r * wr);
        },
        {random_matrix(count * m, n, seed + 5)}, {{count, m, n}}, {ha}, rng);
    // A singular pair's signs are arbitrary: u diag(c) vh, u o u and vh o vh leave them alone.
    const auto wu = dax::device_put(random_matrix(count * m, k, seed + 6), {count, m, k}, hw);
    const auto wv = dax::device_put(random_matrix(count * k, n, seed + 7), {count, k, n}, hw);
    const auto wa = dax::device_put(random_matrix(count * m, n, seed + 8), {count, m, n}, hw);
    const auto c = dax::device_put(random_matrix(count, k, seed + 9), {count, 1, k}, replicated);
    const auto ws = dax::device_put(random_matrix(count, k, seed + 10), {count, k}, replicated);
    dax::test::check_against_differences(
        [&](const Params& p) {
          const auto f = dax::linalg::svd(p[0]);
          return dax::sum(f.s * ws) + dax::sum(dax::matmul(f.u * c, f.vh) * wa) + dax::sum(f.u * f.u * wu) +
                 dax::sum(f.vh * f.vh * wv);
        },
        {random_matrix(count * m, n, seed + 11)}, {{count, m, n}}, {ha}, rng);
  }
  // Complex: eigh and svd through losses the phases leave alone (|V|^2, s).
  using dax::DistArray;
  using Leaves = std::vector<DistArray<complex128>>;
  const Mesh& mesh = random_mesh(pick);
  const int64_t count = 2, n = 3;
  const NamedSharding ha = random_sharding(pick, mesh, 3);
  const auto hermitian = stacked(count, [&](int64_t i) { return hpd(n, 990 + unsigned(i)); });
  const auto w_nn = dax::device_put(random_matrix(count * n, n, 995), {count, n, n}, ha);
  const auto w_n = dax::device_put(random_matrix(count * n, 1, 996), {count, n}, NamedSharding(mesh, P()));
  dax::test::check_complex_gradient(
      [&](const Leaves& p) {
        const auto e = dax::linalg::eigh(p[0]);
        return dax::sum(e.eigenvalues * w_n) + dax::sum(dax::square(dax::abs(e.eigenvectors)) * w_nn);
      },
      {hermitian}, {{count, n, n}}, {ha});
  dax::test::check_complex_gradient(
      [&](const Leaves& p) { return dax::sum(dax::linalg::svd(p[0]).s * w_n); }, {random_complex_matrix(count * n, n, 997)},
      {{count, n, n}}, {ha});
}
