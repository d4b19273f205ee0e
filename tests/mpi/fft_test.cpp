// dax::fft on random shapes (uneven), shardings, axes, norms and result layouts at every rank count,
// against a direct O(n^2) DFT of the gathered array in double; round trips; the bytes a slab
// transform moves (one all-to-all each way, none back when the transposed layout is kept); errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <complex>
#include <numbers>
#include <random>

#include <dax/fft.hpp>

#include "helpers.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::fft::Norm;
using dax::fft::Output;
using dax::test::Pick;
using dax::test::random_complex;
using dax::test::random_mesh;
using dax::test::random_sharding;
using Z = std::complex<double>;

namespace {

/// The DFT of `x` (row-major, `shape`) along `axis`, in double: sign -1 forward, +1 inverse
/// (unscaled).
std::vector<Z> dft_axis(const std::vector<Z>& x, const Shape& shape, int axis, int sign) {
  const int64_t n = shape[axis];
  int64_t inner = 1;
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t outer = dax::numel(shape) / (n * inner);
  std::vector<Z> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      for (int64_t k = 0; k < n; ++k) {
        Z acc = 0;
        for (int64_t j = 0; j < n; ++j)
          acc += x[(o * n + j) * inner + i] * std::polar(1.0, sign * 2 * std::numbers::pi * double(j * k % n) / double(n));
        y[(o * n + k) * inner + i] = acc;
      }
  return y;
}

double norm_factor(Norm norm, bool forward, double n) {
  if (norm == Norm::ortho) return 1 / std::sqrt(n);
  if (norm == Norm::backward) return forward ? 1 : 1 / n;
  return forward ? 1 / n : 1;
}

std::vector<Z> dftn(std::vector<Z> x, const Shape& shape, const std::vector<int>& axes, int sign, Norm norm) {
  double points = 1;
  for (int a : axes) {
    x = dft_axis(x, shape, a, sign);
    points *= double(shape[a]);
  }
  const double f = norm_factor(norm, sign < 0, points);
  for (auto& z : x) z *= f;
  return x;
}

template <class T>
std::vector<Z> widen(const std::vector<T>& v) {
  std::vector<Z> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Z(v[i]);
  return out;
}

/// The largest |x - want| over the gathered array (0 on a rank outside x's mesh, which holds none).
template <class T>
double max_error(const dax::DistArray<T>& x, const std::vector<Z>& want) {
  if (!x.is_addressable()) return 0;
  const auto got = x.to_host();
  REQUIRE(got.size() == want.size());
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::abs(Z(got[i]) - want[i]));
  return e;
}

Shape random_shape(Pick& pick, size_t ndim) {
  Shape s(ndim);
  for (auto& d : s) d = 1 + static_cast<int64_t>(pick(9));
  return s;
}

/// x (row-major, 2-D `shape`) cropped or zero-padded at the end of each axis to `to`: NumPy's
/// n / s on the host.
std::vector<Z> fit(const std::vector<Z>& x, const Shape& shape, const Shape& to) {
  std::vector<Z> out(size_t(dax::numel(to)), Z(0));
  for (int64_t i = 0; i < std::min(shape[0], to[0]); ++i)
    for (int64_t j = 0; j < std::min(shape[1], to[1]); ++j) out[size_t(i * to[1] + j)] = x[size_t(i * shape[1] + j)];
  return out;
}

std::vector<int> random_axes(Pick& pick, size_t ndim) {
  std::vector<int> axes;
  for (size_t d = 0; d < ndim; ++d)
    if (pick(2) == 1) axes.push_back(static_cast<int>(d));
  if (axes.empty()) axes.push_back(static_cast<int>(pick(ndim)));
  if (pick(2) == 1) std::reverse(axes.begin(), axes.end());  // any order: the transform is the same
  return axes;
}

Norm random_norm(Pick& pick) { return std::array{Norm::backward, Norm::ortho, Norm::forward}[pick(3)]; }

}  // namespace

TEMPLATE_TEST_CASE("fftn and ifftn equal the direct DFT on any sharding, axes and norm", "[fft]", float, double) {
  using R = TestType;
  using C = std::complex<R>;
  const double tol = std::is_same_v<R, float> ? 2e-6 : 1e-13;
  Pick pick(21);
  for (int trial = 0; trial < 30; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const size_t ndim = 1 + pick(3);
    const Shape shape = random_shape(pick, ndim);
    const auto axes = random_axes(pick, ndim);
    const Norm norm = random_norm(pick);
    const Output output = pick(2) ? Output::transposed : Output::like_input;
    const NamedSharding s = random_sharding(pick, mesh, ndim, pick(4) == 0);
    const auto host = random_complex<C>(dax::numel(shape), 800 + trial);
    INFO(dax::to_string(shape) << " " << dax::to_string(s) << " axes " << axes.size() << " first " << axes[0]
                               << " norm " << int(norm) << " transposed " << int(output));
    const auto x = dax::reshard(dax::device_put(host, shape, dax::detail::with_unreduced_axes(s, ndim, {})), s);
    // A partial sum's input: every device but one holds zeros, so the sum is `host` again.
    const auto y = dax::fft::fftn(x, axes, norm, output);
    double points = 1;
    for (int a : axes) points *= double(shape[a < 0 ? a + int(ndim) : a]);
    const auto want = dftn(widen(host), shape, axes, -1, norm);
    CHECK(max_error(y, want) <= tol * points);
    if (output == Output::like_input) CHECK(y.sharding() == dax::detail::with_unreduced_axes(s, ndim, {}));
    const auto back = dax::fft::ifftn(y, axes, norm, output);
    CHECK(max_error(back, widen(host)) <= tol * points);
  }
}

TEMPLATE_TEST_CASE("rfftn and irfftn equal the direct DFT's half spectrum and invert it", "[fft]", float, double) {
  using R = TestType;
  const double tol = std::is_same_v<R, float> ? 2e-6 : 1e-13;
  Pick pick(22);
  for (int trial = 0; trial < 30; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const size_t ndim = 1 + pick(3);
    const Shape shape = random_shape(pick, ndim);
    auto axes = random_axes(pick, ndim);
    const Norm norm = random_norm(pick);
    const Output output = pick(2) ? Output::transposed : Output::like_input;
    const NamedSharding s = random_sharding(pick, mesh, ndim);
    std::mt19937 rng(900 + trial);
    std::uniform_real_distribution<R> u(-1, 1);
    std::vector<R> host(static_cast<size_t>(dax::numel(shape)));
    for (auto& v : host) v = u(rng);
    INFO(dax::to_string(shape) << " " << dax::to_string(s) << " last axis " << axes.back() << " of " << axes.size()
                               << " norm " << int(norm) << " transposed " << int(output));
    const auto x = dax::device_put(host, shape, s);
    const auto y = dax::fft::rfftn(x, axes, norm, output);
    const int h = axes.back();
    Shape half = shape;
    half[h] = shape[h] / 2 + 1;
    REQUIRE(y.shape() == half);
    // The full spectrum's first n / 2 + 1 entries along the halved axis.
    const auto full = dftn(widen(host), shape, axes, -1, norm);
    std::vector<Z> want(static_cast<size_t>(dax::numel(half)));
    const auto fs = dax::detail::row_major_strides(shape), hs = dax::detail::row_major_strides(half);
    for (int64_t i = 0; i < dax::numel(half); ++i) {
      int64_t rest = i, src = 0;
      for (size_t d = 0; d < ndim; ++d) {
        src += (rest / hs[d]) * fs[d];
        rest %= hs[d];
      }
      want[i] = full[src];
    }
    double points = 1;
    for (int a : axes) points *= double(shape[a]);
    CHECK(max_error(y, want) <= tol * points);
    std::vector<int64_t> lengths;
    for (int a : axes) lengths.push_back(shape[a]);
    const auto back = dax::fft::irfftn(y, lengths, axes, norm, output);
    REQUIRE(back.shape() == shape);
    CHECK(max_error(back, widen(host)) <= tol * points);
    if (output == Output::like_input) CHECK(back.sharding() == s);
  }
}

TEST_CASE("fft, ifft, rfft and irfft along one axis, odd lengths too", "[fft]") {
  Pick pick(23);
  for (int trial = 0; trial < 12; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape shape = random_shape(pick, 2);
    const int axis = pick(2) ? -1 : 0;
    const NamedSharding s = random_sharding(pick, mesh, 2);
    const auto host = random_complex<Z>(dax::numel(shape), 1000 + trial);
    const auto x = dax::device_put(host, shape, s);
    const int a = axis < 0 ? 1 : 0;
    INFO(dax::to_string(shape) << " " << dax::to_string(s) << " axis " << axis);
    CHECK(max_error(dax::fft::fft(x, axis), dft_axis(host, shape, a, -1)) <= 1e-13 * double(shape[a]));
    CHECK(max_error(dax::fft::ifft(dax::fft::fft(x, axis), axis), host) <= 1e-13 * double(shape[a]));
    const auto re = dax::real(x);
    const auto spectrum = dax::fft::rfft(re, axis);
    CHECK(spectrum.shape()[a] == shape[a] / 2 + 1);
    const auto again = dax::fft::irfft(spectrum, shape[a], axis);  // odd n needs n given
    CHECK(max_error(again, widen(dax::test::host(re))) <= 1e-13 * double(shape[a]));
    CHECK(again.sharding() == s);
  }
}

TEST_CASE("a slab transform moves one all-to-all each way, none back when transposed", "[fft]") {
  const int n = dax::test::world_size();
  const Mesh mesh(Shape{n}, {"x"});
  const int64_t side = 24 % n == 0 ? 24 : 4 * n;  // the rank count divides it: even pieces
  const Shape shape{side, side};
  const auto host = random_complex<Z>(side * side, 31);
  const auto x = dax::device_put(host, shape, NamedSharding(mesh, P("x")));
  const int64_t moved = (side - side / n) * (side / n) * int64_t(sizeof(Z));  // per rank and all-to-all
  dax::comm_stats().reset();
  const auto kept = dax::fft::fftn(x, {}, Norm::backward, Output::transposed);
  CHECK(dax::comm_stats().total_bytes() == moved);
  CHECK(kept.sharding() == NamedSharding(mesh, P(dax::none, "x")));
  dax::comm_stats().reset();
  const auto back = dax::fft::ifftn(kept, {}, Norm::backward, Output::transposed);  // transforms dim 1 first, in place
  CHECK(dax::comm_stats().total_bytes() == moved);
  CHECK(back.sharding() == NamedSharding(mesh, P("x")));
  CHECK(max_error(back, host) <= 1e-12);
  dax::comm_stats().reset();
  const auto same = dax::fft::fftn(x);
  CHECK(dax::comm_stats().total_bytes() == 2 * moved);
  CHECK(same.sharding() == x.sharding());
  CHECK(max_error(same, widen(dax::test::host(kept))) <= 1e-12);
}

TEST_CASE("a split 1-D array transforms in four steps (three all-to-alls) where that moves no more than gathering",
          "[fft]") {
  const int p = dax::test::world_size();
  const Mesh mesh(Shape{p}, {"x"});
  Pick pick(29);
  for (const int64_t k : {int64_t(1), int64_t(3), int64_t(6)}) {  // n = p^2 k: n1, n2 multiples of p
    const int64_t n = int64_t(p) * p * k;
    const auto host = random_complex<Z>(n, 2000 + unsigned(k));
    const NamedSharding s(mesh, P("x"));
    const auto x = dax::device_put(host, {n}, s);
    for (const Norm norm : {Norm::backward, Norm::ortho, Norm::forward}) {
      INFO("n " << n << " norm " << int(norm));
      dax::comm_stats().reset();
      const auto f = dax::fft::fft(x, 0, norm);
      const auto stats = dax::comm_stats();
      CHECK(f.sharding() == s);
      CHECK(max_error(f, dftn(host, {n}, {0}, -1, norm)) <= 1e-13 * double(n));
      // From 3 pieces on each all-to-all moves (p-1)/p of a device's n/p elements; at 2 the
      // gather of (p-1)/p of all n moves less (the result is cut where it lies).
      const bool four = p >= 3;
      CHECK(dax::detail::complex_four_step_pays(n, p) == four);
      if (four) CHECK(stats.of("all_gather").calls == 0);
      CHECK(stats.total_bytes() == (four ? 3 * (n / p - n / p / p) : n - n / p) * int64_t(sizeof(Z)));
      CHECK(max_error(dax::fft::ifft(f, 0, norm), host) <= 1e-13 * double(n));
      CHECK(max_error(dax::fft::ifftn(dax::fft::fftn(x, {}, norm), {}, norm), host) <= 1e-13 * double(n));
    }
  }
  // A length with no such split (prime) is gathered, and still right.
  const Mesh& any = random_mesh(pick);
  const auto prime = random_complex<Z>(13, 77);
  CHECK(max_error(dax::fft::fft(dax::device_put(prime, {13}, random_sharding(pick, any, 1))), dftn(prime, {13}, {0}, -1, Norm::backward)) <=
        1e-12);
}

namespace {

/// Bytes of complex double device `rank` receives when the first min(from, to) elements of a 1-D
/// array of `from` elements split in p ceil-chunks are laid out again as `to` elements split the
/// same way (what a slice or a zero padding moves): each element whose owner changes, once.
int64_t relaid_bytes(int64_t from, int64_t to, int64_t p, int64_t rank) {
  const int64_t a = (from + p - 1) / p, b = (to + p - 1) / p;
  int64_t moved = 0;
  for (int64_t i = 0; i < std::min(from, to); ++i) moved += i / b == rank && i / a != rank;
  return moved * int64_t(sizeof(Z));
}

}  // namespace

TEST_CASE("a split 1-D real array's rfft and irfft run in four steps where that moves fewer bytes than gathering",
          "[fft]") {
  const int p = dax::test::world_size();
  const Mesh mesh(Shape{p}, {"x"});
  const NamedSharding s(mesh, P("x"));
  for (const int64_t k : {int64_t(1), int64_t(3), int64_t(6)}) {  // n = p^2 k: odd at p = 3, k = 1 and 3
    const int64_t n = int64_t(p) * p * k, m = n / 2 + 1;
    std::mt19937 rng(3000 + unsigned(k));
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> host(static_cast<size_t>(n));
    for (auto& v : host) v = u(rng);
    const auto x = dax::device_put(host, {n}, s);
    const auto full = dftn(widen(host), {n}, {0}, -1, Norm::backward);
    for (const Norm norm : {Norm::backward, Norm::ortho, Norm::forward}) {
      INFO("n " << n << " norm " << int(norm));
      const double f = norm_factor(norm, true, double(n));
      std::vector<Z> want(full.begin(), full.begin() + m);
      for (auto& z : want) z *= f;
      // From 7 pieces on: three all-to-alls of (p-1)/p of a device's n/p complex elements, and the
      // slice to m; below, the real values gathered (fewer bytes: (p-1)/p of n doubles).
      const bool four = p >= 7;
      CHECK(dax::detail::real_four_step_pays(n, p) == four);
      const int64_t steps = 3 * (n / p - n / p / p) * int64_t(sizeof(Z)), me = dax::test::world_rank();
      const int64_t chunk = (m + p - 1) / p, own = std::clamp<int64_t>(m - me * chunk, 0, chunk);
      dax::comm_stats().reset();
      const auto y = dax::fft::rfft(x, 0, norm);
      auto stats = dax::comm_stats();
      REQUIRE(y.shape() == Shape{m});
      CHECK(y.sharding() == s);
      CHECK(max_error(y, want) <= 1e-13 * double(n));
      if (four) {
        CHECK(stats.of("all_gather").calls == 0);
        CHECK(stats.total_bytes() == steps + relaid_bytes(n, m, p, me));
      } else {  // the others' real values, the result cut from the whole spectrum where it lies
        CHECK(stats.total_bytes() == (n - n / p) * int64_t(sizeof(double)));
      }
      // Back: the spectrum padded to n (the same elements move back), three all-to-alls; or the
      // others' spectrum values gathered.
      dax::comm_stats().reset();
      const auto back = dax::fft::irfft(y, n, 0, norm);
      stats = dax::comm_stats();
      CHECK(back.sharding() == s);
      CHECK(max_error(back, widen(host)) <= 1e-13 * double(n));
      if (four) {
        CHECK(stats.of("all_gather").calls == 0);
        CHECK(stats.total_bytes() == steps + relaid_bytes(m, n, p, me));
      } else {
        CHECK(stats.total_bytes() == (m - own) * int64_t(sizeof(Z)));
      }
    }
    // c2r ignores the imaginary parts of bins 0 and n / 2, as NumPy's irfft does.
    auto spectrum = dax::test::host(dax::fft::rfft(x));
    spectrum[0] += Z(0, 0.25);
    if (n % 2 == 0) spectrum[size_t(n / 2)] += Z(0, -0.5);
    CHECK(max_error(dax::fft::irfft(dax::device_put(spectrum, {m}, s), n), widen(host)) <= 1e-13 * double(n));
  }
}

TEST_CASE("fft, ifft, rfft with Length(n) and fftn, ifftn, rfftn with Lengths(s) crop or pad their input, as NumPy",
          "[fft]") {
  Pick pick(37);
  for (int trial = 0; trial < 10; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape shape = random_shape(pick, 2);
    const NamedSharding s = random_sharding(pick, mesh, 2);
    const auto host = random_complex<Z>(dax::numel(shape), 3000 + trial);
    const auto x = dax::device_put(host, shape, s);
    const Shape to{1 + int64_t(pick(9)), 1 + int64_t(pick(9))};  // shorter or longer on each axis
    const Norm norm = pick(2) ? Norm::ortho : Norm::backward;
    INFO(dax::to_string(shape) << " -> " << dax::to_string(to) << " " << dax::to_string(s));
    const Shape along1{shape[0], to[1]};
    const auto one = dax::fft::fft(x, dax::fft::Length(to[1]), 1, norm);
    CHECK(one.shape() == along1);
    CHECK(one.sharding() == s);
    CHECK(max_error(one, dftn(fit(host, shape, along1), along1, {1}, -1, norm)) <= 1e-12 * double(to[1]));
    CHECK(max_error(dax::fft::ifft(x, dax::fft::Length(to[1]), -1, norm), dftn(fit(host, shape, along1), along1, {1}, 1, norm)) <=
          1e-12 * double(to[1]));
    const auto both = dax::fft::fftn(x, dax::fft::Lengths({to[0], to[1]}), {}, norm);
    CHECK(max_error(both, dftn(fit(host, shape, to), to, {0, 1}, -1, norm)) <= 1e-12 * double(dax::numel(to)));
    CHECK(max_error(dax::fft::ifftn(x, dax::fft::Lengths({to[0], to[1]}), {0, 1}, norm), dftn(fit(host, shape, to), to, {0, 1}, 1, norm)) <=
          1e-12 * double(dax::numel(to)));
    // Real input: the transform of the fitted real parts, the halved axis n / 2 + 1 long.
    const auto re = dax::real(x);
    const auto half = dax::fft::rfftn(re, dax::fft::Lengths({to[0], to[1]}), {}, norm);
    CHECK(half.shape() == Shape{to[0], to[1] / 2 + 1});
    auto real_parts = fit(host, shape, to);
    for (auto& z : real_parts) z = Z(z.real(), 0);
    const auto full = dftn(real_parts, to, {0, 1}, -1, norm);
    std::vector<Z> want;
    for (int64_t i = 0; i < to[0]; ++i)
      for (int64_t j = 0; j <= to[1] / 2; ++j) want.push_back(full[size_t(i * to[1] + j)]);
    CHECK(max_error(half, want) <= 1e-12 * double(dax::numel(to)));
    CHECK(dax::fft::rfft(re, dax::fft::Length(to[1])).shape() == Shape{shape[0], to[1] / 2 + 1});
  }
  const Mesh mesh(Shape{1}, {"x"});
  const auto z = dax::zeros<dax::complex128>({4, 5}, NamedSharding(mesh, P()));
  CHECK(dax::test::error_of([&] { (void)dax::fft::fft(z, dax::fft::Length(0)); }) ==
        "fft: the length along axis 1 must be positive, got 0");
  CHECK(dax::test::error_of([&] { (void)dax::fft::fftn(z, dax::fft::Lengths({4})); }) == "fftn: s has 1 lengths for 2 axes");
}

TEST_CASE("fft's errors name what was expected and what came", "[fft]") {
  const Mesh mesh(Shape{1}, {"x"});
  const auto z = dax::zeros<dax::complex128>({4, 5}, NamedSharding(mesh, P()));
  CHECK(dax::test::error_of([&] { (void)dax::fft::fft(z, 2); }) == "fft: axis 2 is out of range for an array of rank 2");
  CHECK(dax::test::error_of([&] { (void)dax::fft::fftn(z, {1, -1}); }) == "fftn: axis -1 is named twice");
  CHECK(dax::test::error_of([&] { (void)dax::fft::irfft(z, 0); }) ==
        "irfftn: the output length along axis 1 must be positive, got 0");
}

TEST_CASE("irfft and irfftn crop or pad their input with zeros to the lengths asked for, as NumPy", "[fft]") {
  Pick pick(41);
  for (int trial = 0; trial < 10; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape shape = random_shape(pick, 2);
    const NamedSharding sharding = random_sharding(pick, mesh, 2);
    const auto host = random_complex<Z>(dax::numel(shape), 2000 + trial);
    const auto x = dax::device_put(host, shape, sharding);
    // Output lengths that take fewer and more input values than x holds, along both axes.
    const std::vector<int64_t> s{std::max<int64_t>(1, shape[0] + int64_t(pick(5)) - 2), int64_t(pick(2 * shape[1] + 3)) + 1};
    const Shape need{s[0], s[1] / 2 + 1};
    const auto fitted = fit(host, shape, need);  // the input NumPy would transform
    INFO(dax::to_string(shape) << " -> s (" << s[0] << ", " << s[1] << ") " << dax::to_string(sharding));
    const auto got = dax::fft::irfftn(x, s, {0, 1});
    REQUIRE(got.shape() == Shape{s[0], s[1]});
    CHECK(got.sharding() == sharding);
    const auto want = dax::fft::irfftn(dax::device_put(fitted, need, sharding), s, {0, 1});
    CHECK(max_error(got, widen(dax::test::host(want))) <= 1e-12);
    const auto one = dax::fft::irfft(x, s[1]);  // the last axis alone
    REQUIRE(one.shape() == Shape{shape[0], s[1]});
  }
}

TEST_CASE("copies of a replicated result are bit-identical (their plans are not timed per rank)", "[fft]") {
  const int n = dax::test::world_size();
  if (n < 2) return;  // no copies at one rank
  const Mesh mesh(Shape{n / 2, 2}, {"x", "y"});  // every piece held by the two devices along 'y'
  if (dax::test::world_rank() >= 2 * (n / 2)) {  // outside the mesh (3 ranks): the collective below only
    std::vector<uint64_t> all(static_cast<size_t>(n));
    uint64_t none = 0;
    MPI_Allgather(&none, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    return;
  }
  const Shape shape{12, 96};
  const auto x = dax::device_put(random_complex<Z>(12 * 96, 41), shape, NamedSharding(mesh, P("x")));
  const auto y = dax::fft::fftn(x, {1});  // the whole of axis 1 on each device, copies along 'y'
  const auto local = y.local_to_host();
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the piece's bytes
  for (size_t i = 0; i < local.size() * sizeof(Z); ++i) h = (h ^ reinterpret_cast<const unsigned char*>(local.data())[i]) * 1099511628211ull;
  std::vector<uint64_t> all(static_cast<size_t>(n));
  MPI_Allgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  const int me = dax::test::world_rank(), partner = me ^ 1;  // mesh (i, j) is device 2 i + j
  CHECK(all[me] == all[partner]);
}
