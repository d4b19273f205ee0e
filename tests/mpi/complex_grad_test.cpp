// Gradients through complex values, in JAX's convention: the gradient of a real loss L of complex z
// is dL/dRe(z) - i dL/dIm(z). Checked against central differences in double (each real and
// imaginary part of every element perturbed) on random shardings at every rank count, with fresh
// random inputs: the ops that take complex numbers apart and put them together, the arithmetic,
// sums and products, and every FFT (c2c both ways, r2c, c2r with even and odd lengths, one axis
// and several, each norm); and JAX's own example, grad(|z|^2)(3 + 4i) = 6 - 8i.
#include <catch2/catch.hpp>

#include <complex>
#include <functional>
#include <random>
#include <vector>

#include <dax/fft.hpp>

#include "gradient_check.hpp"
#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::complex128;
using dax::test::Pick;
using dax::test::random_complex;
using dax::test::random_mesh;
using dax::test::random_sharding;
using dax::test::shared_seed;
using dax::test::check_complex_gradient;
using dax::test::value_of;

TEST_CASE("grad of a real loss of complex z is dL/dRe z - i dL/dIm z, as JAX's (|z|^2 at 3 + 4i: 6 - 8i)",
          "[complex][autodiff]") {
  const Mesh mesh({1}, {"x"}, {0});
  if (dax::test::world_rank() != 0) return;
  dax::OnlyMeshRanks alone;
  const NamedSharding here(mesh, P());
  auto loss = [](const DistArray<complex128>& z) { return dax::sum(dax::real(z * dax::conj(z))); };
  const auto [value, grad] = dax::value_and_grad(loss)(dax::device_put(std::vector<complex128>{{3, 4}}, {1}, here));
  CHECK(value.to_host()[0] == 25);
  CHECK(grad.to_host()[0] == complex128(6, -8));
  auto via_abs = [](const DistArray<complex128>& z) {
    const auto r = dax::abs(z);
    return dax::sum(r * r);
  };
  CHECK(dax::value_and_grad(via_abs)(dax::device_put(std::vector<complex128>{{3, 4}}, {1}, here)).second.to_host()[0] ==
        complex128(6, -8));
}

TEST_CASE("gradients through complex arithmetic, parts, products and sums equal central differences",
          "[complex][autodiff]") {
  Pick pick(shared_seed());
  for (int trial = 0; trial < 3; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const int64_t m = 1 + int64_t(pick(3)), k = 1 + int64_t(pick(3)), n = 1 + int64_t(pick(3));
    const std::vector<Shape> shapes{{m, k}, {k, n}};
    const std::vector<NamedSharding> where{random_sharding(pick, mesh, 2), random_sharding(pick, mesh, 2)};
    const auto seed = static_cast<unsigned>(pick(1u << 30));
    const std::vector<std::vector<complex128>> values{random_complex<complex128>(m * k, seed),
                                                      random_complex<complex128>(k * n, seed + 1)};
    INFO(m << "x" << k << "x" << n << " " << dax::to_string(where[0]) << " @ " << dax::to_string(where[1]));
    auto loss = [](const std::vector<DistArray<complex128>>& z) {
      const auto c = dax::matmul(z[0], z[1]) + complex128(0.5, -0.25);
      const auto d = c / (c * c + complex128(2, 1)) - dax::conj(c) * 0.3;
      const auto e = dax::complex(dax::real(d), dax::imag(c) * 2.0);  // put back together from parts
      return dax::sum(dax::abs(e)) + dax::sum(dax::angle(c + complex128(3, 0))) +
             dax::sum(dax::real(dax::mean(z[0], {1}) * complex128(1, 2)));
    };
    check_complex_gradient(loss, values, shapes, where);
  }
}

TEST_CASE("complex(re, im) passes gradients back to its real parts", "[complex][autodiff]") {
  Pick pick(shared_seed());
  const Mesh& mesh = random_mesh(pick);
  const Shape shape{3, 2};
  const auto s = random_sharding(pick, mesh, 2);
  const auto z0 = dax::device_put(random_complex<complex128>(6, 7), shape, s);
  std::mt19937 rng(static_cast<unsigned>(pick(1000)));
  std::vector<double> re(6), im(6);
  for (auto& x : re) x = std::uniform_real_distribution<double>(-1, 1)(rng);
  for (auto& x : im) x = std::uniform_real_distribution<double>(-1, 1)(rng);
  auto loss = [&](const std::vector<DistArray<double>>& p) { return dax::sum(dax::abs(dax::complex(p[0], p[1]) * z0)); };
  auto at = [&](const std::vector<double>& a, const std::vector<double>& b) {
    return std::vector<DistArray<double>>{dax::device_put(a, shape, s), dax::device_put(b, shape, s)};
  };
  const auto grads = dax::value_and_grad(loss)(at(re, im)).second;
  const double h = 1e-6;
  for (size_t part = 0; part < 2; ++part) {
    const bool here = grads[part].is_addressable();
    const auto got = here ? grads[part].to_host() : std::vector<double>(6);
    for (size_t e = 0; e < 6; ++e) {
      auto up_re = re, up_im = im, down_re = re, down_im = im;
      (part == 0 ? up_re : up_im)[e] += h;
      (part == 0 ? down_re : down_im)[e] -= h;
      const double want = (value_of(loss(at(up_re, up_im))) - value_of(loss(at(down_re, down_im)))) / (2 * h);
      if (here) CHECK(got[e] == Approx(want).margin(1e-7));
    }
  }
}

TEST_CASE("gradients through fft, ifft, fftn, ifftn, rfftn and irfftn equal central differences",
          "[complex][autodiff][fft]") {
  using dax::fft::Norm;
  Pick pick(shared_seed());
  const Norm norms[] = {Norm::backward, Norm::ortho, Norm::forward};
  // The losses are linear or quadratic in the leaves, where central differences are exact for any
  // step: a long one keeps the loss's rounding (|L| eps / step) out of the check. With 1e-6 a
  // correct gradient failed by 4e-7 once (a 128-point line over 8 ranks).
  const double step = 1e-3;
  for (int trial = 0; trial < 4; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape shape{2 + int64_t(pick(3)), 2 + int64_t(pick(4))};  // odd and even lengths
    const NamedSharding s = random_sharding(pick, mesh, 2);
    const Norm norm = norms[pick(3)];
    const std::vector<int> axes = pick(2) == 0 ? std::vector<int>{1} : std::vector<int>{0, 1};
    const auto seed = static_cast<unsigned>(pick(1u << 30));
    const int64_t n = dax::numel(shape);
    // Fixed weights make the loss a general real-linear functional of each transform's output.
    const auto w = dax::device_put(random_complex<complex128>(n, seed + 2), shape, s);
    INFO(dax::to_string(shape) << " " << dax::to_string(s) << " axes " << axes.size() << " norm " << int(norm));
    {  // c2c, forward then inverse
      auto loss = [&](const std::vector<DistArray<complex128>>& z) {
        const auto f = dax::fft::fftn(z[0], axes, norm);
        const auto g = dax::fft::ifftn(f * w, axes, norm);
        return dax::sum(dax::real(g * w)) + dax::sum(dax::imag(dax::fft::fft(z[0], 0, norm)));
      };
      check_complex_gradient(loss, {random_complex<complex128>(n, seed)}, {shape}, {s}, 1e-7, step);
    }
    {  // a 1-D transform of an array split over its only axis: four steps, dax's own ops
      const int64_t len = int64_t(mesh.size()) * mesh.size() * (1 + int64_t(pick(2)));
      const NamedSharding line(mesh, P(mesh.num_axes() == 1 ? dax::PartitionSpec::Entry(mesh.axis_names()[0])
                                                            : dax::PartitionSpec::Entry(dax::axes(mesh.axis_names()[0], mesh.axis_names()[1]))));
      const auto wl = dax::device_put(random_complex<complex128>(len, seed + 4), {len}, line);
      auto loss = [&](const std::vector<DistArray<complex128>>& z) {
        return dax::sum(dax::real(dax::fft::ifft(dax::fft::fft(z[0], 0, norm) * wl, 0, norm) * wl));
      };
      check_complex_gradient(loss, {random_complex<complex128>(len, seed + 5)}, {{len}}, {line}, 1e-7, step);
      // rfft and irfft of the split line (four steps on x + 0i, the spectrum padded and weighted).
      const int64_t half = len / 2 + 1;
      const auto wr = dax::device_put(random_complex<complex128>(half, seed + 6), {half}, line);
      auto real_loss = [&](const std::vector<DistArray<complex128>>& z) {
        const auto r = dax::fft::irfft(dax::fft::rfft(dax::real(z[0]), 0, norm) * wr + z[1], len, 0, norm);
        return dax::sum(r * r);
      };
      check_complex_gradient(real_loss, {random_complex<complex128>(len, seed + 7), random_complex<complex128>(half, seed + 8)},
                             {{len}, {half}}, {line, line}, 1e-7, step);
    }
    {  // r2c and c2r
      // rfftn of a real array made from the first leaf, weighted, plus the second leaf (a general,
      // not Hermitian, half spectrum), then irfftn to a length on the halved axis that may be odd
      // (and may need the input padded).
      const int64_t back = shape[1] + int64_t(pick(2));
      const Shape half{shape[0], shape[1] / 2 + 1};
      const auto wh = dax::device_put(random_complex<complex128>(dax::numel(half), seed + 3), half, s);
      std::vector<int64_t> lengths;
      for (int a : axes) lengths.push_back(a == 1 ? back : shape[size_t(a)]);
      auto loss = [&](const std::vector<DistArray<complex128>>& z) {
        const auto spectrum = dax::fft::rfftn(dax::real(z[0]) * 1.5, axes, norm);
        const auto r = dax::fft::irfftn(spectrum * wh + z[1], lengths, axes, norm);
        return dax::sum(r * r) + dax::sum(dax::imag(z[0]) * 0.5);
      };
      check_complex_gradient(loss, {random_complex<complex128>(n, seed), random_complex<complex128>(dax::numel(half), seed + 1)},
                             {shape, half}, {s, random_sharding(pick, mesh, 2)}, 1e-7, step);
    }
  }
}
