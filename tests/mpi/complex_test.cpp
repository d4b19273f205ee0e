// Complex element types (complex64, complex128) on random shardings at every rank count: reshards
// keep every bit (MPI's complex datatypes, partial sums added as complex numbers), elementwise ops
// and the ones that take numbers apart equal std::complex's on the gathered array, sums and
// products (cgemm / zgemm) within stated tolerances, and .npy files NumPy reads.
#include <catch2/catch.hpp>

#include <complex>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include <dax/io.hpp>

#include "helpers.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::host;
using dax::test::Pick;
using dax::test::random_complex;
using dax::test::random_mesh;
using dax::test::random_sharding;

namespace {

/// Small Gaussian integers: sums and products of a few of them are exact in either precision, so
/// any grouping of a sum gives the same bits.
template <class C>
std::vector<C> small_complex(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-8, 8);
  std::vector<C> v(static_cast<size_t>(n));
  for (auto& z : v) z = C(d(rng), d(rng));
  return v;
}

/// x gathered equals `want` bit for bit (true on a rank outside x's mesh, which holds nothing).
template <class C>
bool same_bits(const dax::DistArray<C>& x, const std::vector<C>& want) {
  if (!x.is_addressable()) return true;
  const auto a = x.to_host();
  return a.size() == want.size() && (a.empty() || std::memcmp(a.data(), want.data(), a.size() * sizeof(C)) == 0);
}

template <class C>
dax::DistArray<C> put(const std::vector<C>& values, const Shape& shape, const NamedSharding& s) {
  const NamedSharding reduced = dax::detail::with_unreduced_axes(s, shape.size(), {});
  return dax::reshard(dax::device_put(values, shape, reduced), s);
}

Shape random_shape(Pick& pick, size_t ndim) {
  Shape s(ndim);
  for (auto& d : s) d = 1 + static_cast<int64_t>(pick(7));
  return s;
}

}  // namespace

TEMPLATE_TEST_CASE("complex arrays reshard bit for bit, partial sums added as complex numbers", "[complex]",
                   dax::complex64, dax::complex128) {
  using C = TestType;
  Pick pick(11);
  for (int trial = 0; trial < 24; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const size_t ndim = 1 + pick(3);
    const Shape shape = random_shape(pick, ndim);
    const auto values = random_complex<C>(dax::numel(shape), 100 + trial);
    const NamedSharding from = random_sharding(pick, mesh, ndim), to = random_sharding(pick, mesh, ndim);
    INFO(dax::to_string(shape) << " " << dax::to_string(from) << " -> " << dax::to_string(to));
    const auto moved = dax::reshard(dax::device_put(values, shape, from), to);
    CHECK(moved.sharding() == to);
    CHECK(same_bits(moved, values));
    // A partial sum (small integers, so any order of the adds is exact) reduced by the planner.
    const auto ints = small_complex<C>(dax::numel(shape), 200 + trial);
    const NamedSharding partial = random_sharding(pick, mesh, ndim, true);
    const auto summed = dax::reshard(put(ints, shape, partial) * C(2, 1), to);
    std::vector<C> want(ints.size());
    for (size_t i = 0; i < ints.size(); ++i) want[i] = ints[i] * C(2, 1);
    CHECK(same_bits(summed, want));
  }
}

TEMPLATE_TEST_CASE("complex elementwise ops equal std::complex's", "[complex]", dax::complex64, dax::complex128) {
  using C = TestType;
  using R = typename C::value_type;
  const R tol = std::is_same_v<R, float> ? R(1e-6) : R(1e-14);
  Pick pick(12);
  for (int trial = 0; trial < 12; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape shape = random_shape(pick, 2);
    const auto ha = random_complex<C>(dax::numel(shape), 300 + trial), hb = random_complex<C>(dax::numel(shape), 400 + trial);
    const auto a = dax::device_put(ha, shape, random_sharding(pick, mesh, 2));
    const auto b = dax::device_put(hb, shape, random_sharding(pick, mesh, 2));
    INFO(dax::to_string(shape) << " " << dax::to_string(a.sharding()) << " " << dax::to_string(b.sharding()));
    const auto sum = host(a + b), diff = host(a - b), prod = host(a * b), quot = host(a / b);
    const auto neg = host(-a), conj = host(dax::conj(a)), scaled = host(a * R(0.5) + C(1, -2));
    const auto re = host(dax::real(a)), im = host(dax::imag(a)), mod = host(dax::abs(a));
    const auto arg = host(dax::angle(a));
    const auto rebuilt = host(dax::complex(dax::real(a), dax::imag(b)));
    if (sum.empty()) continue;  // a rank outside the mesh
    for (size_t i = 0; i < ha.size(); ++i) {
      CHECK(sum[i] == ha[i] + hb[i]);
      CHECK(diff[i] == ha[i] - hb[i]);
      CHECK(std::abs(prod[i] - ha[i] * hb[i]) <= tol);
      CHECK(std::abs(quot[i] - ha[i] / hb[i]) <= tol * std::abs(quot[i]));
      CHECK(neg[i] == -ha[i]);
      CHECK(conj[i] == std::conj(ha[i]));
      CHECK(std::abs(scaled[i] - (ha[i] * R(0.5) + C(1, -2))) <= tol);
      CHECK(re[i] == ha[i].real());
      CHECK(im[i] == ha[i].imag());
      CHECK(mod[i] == std::abs(ha[i]));
      CHECK(arg[i] == std::arg(ha[i]));
      CHECK(rebuilt[i] == C(ha[i].real(), hb[i].imag()));
    }
  }
}

TEMPLATE_TEST_CASE("complex sums, means and products (cgemm / zgemm) on random shardings", "[complex]",
                   dax::complex64, dax::complex128) {
  using C = TestType;
  using R = typename C::value_type;
  const R tol = std::is_same_v<R, float> ? R(2e-5) : R(1e-12);
  Pick pick(13);
  for (int trial = 0; trial < 12; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t m = 1 + int64_t(pick(9)), k = 1 + int64_t(pick(40)), n = 1 + int64_t(pick(9));
    const auto ha = random_complex<C>(m * k, 500 + trial), hb = random_complex<C>(k * n, 600 + trial);
    const auto a = dax::device_put(ha, {m, k}, random_sharding(pick, mesh, 2));
    const auto b = dax::device_put(hb, {k, n}, random_sharding(pick, mesh, 2));
    INFO(m << "x" << k << "x" << n << " " << dax::to_string(a.sharding()) << " @ " << dax::to_string(b.sharding()));
    const auto c = host(dax::matmul(a, b));
    const auto rows = host(dax::sum(a, {1}));
    const auto all = host(dax::mean(a));
    if (c.empty()) continue;  // a rank outside the mesh
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        C want = 0;
        for (int64_t l = 0; l < k; ++l) want += ha[i * k + l] * hb[l * n + j];
        CHECK(std::abs(c[i * n + j] - want) <= tol * R(k));
      }
    C total = 0;
    for (int64_t i = 0; i < m; ++i) {
      C row = 0;
      for (int64_t l = 0; l < k; ++l) row += ha[i * k + l];
      total += row;
      CHECK(std::abs(rows[i] - row) <= tol * R(k));
    }
    CHECK(std::abs(all[0] - total / R(m * k)) <= tol);
  }
}

TEMPLATE_TEST_CASE("complex arrays save and load as NumPy's complex .npy", "[complex][io]", dax::complex64,
                   dax::complex128) {
  using C = TestType;
  const Mesh mesh(Shape{dax::test::world_size()}, {"x"});  // every rank writes and reads a piece
  const Shape shape{5, 3};
  const auto values = random_complex<C>(15, 700);
  const auto x = dax::device_put(values, shape, NamedSharding(mesh, P("x")));
  const std::string dir = "complex_npy_" + std::to_string(dax::test::world_size());
  const std::string path = dir + "/z.npy";
  if (dax::test::world_rank() == 0) std::filesystem::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  dax::save(path, x);
  const auto back = dax::load<C>(path, NamedSharding(mesh, P(dax::none, "x")));
  CHECK(same_bits(back, values));
  // The descr NumPy writes for these types.
  std::FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  char head[128] = {};
  CHECK(std::fread(head, 1, sizeof head - 1, f) > 0);
  std::fclose(f);
  CHECK(std::string(head + 10).find(std::is_same_v<C, dax::complex64> ? "'<c8'" : "'<c16'") != std::string::npos);
  // Loading it as another type names both.
  const std::string err = dax::test::error_of([&] { (void)dax::load<double>(path, NamedSharding(mesh, P())); });
  CHECK(err.find(std::is_same_v<C, dax::complex64> ? "complex64" : "complex128") != std::string::npos);
  MPI_Barrier(MPI_COMM_WORLD);
  if (dax::test::world_rank() == 0) std::filesystem::remove_all(dir);
}
