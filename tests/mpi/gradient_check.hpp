// Gradients checked against central finite differences in double: the shared machinery of the
// autodiff tests (tests/mpi/autodiff_test.cpp, shard_map_grad_test.cpp).
#pragma once

#include <catch2/catch.hpp>

#include <complex>
#include <functional>
#include <random>
#include <vector>

#include <dax/dax.hpp>

namespace dax::test {

using Params = std::vector<DistArray<double>>;
using Loss = std::function<DistArray<double>(const Params&)>;

inline std::vector<double> uniform(int64_t n, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline Params put_all(const std::vector<std::vector<double>>& values, const std::vector<Shape>& shapes,
                      const std::vector<NamedSharding>& shardings) {
  Params p;
  for (size_t i = 0; i < values.size(); ++i) p.push_back(dax::device_put(values[i], shapes[i], shardings[i]));
  return p;
}

/// The value of a scalar array on the mesh's ranks (0 elsewhere: they hold no piece).
inline double scalar(const DistArray<double>& x) { return x.is_addressable() ? x.to_host()[0] : 0.0; }

/// Gradient of `loss` at `values` (laid out by `shardings`) against central differences along
/// three random directions; also returns the gathered gradients.
inline std::vector<std::vector<double>> check_against_differences(const Loss& loss,
                                                                  const std::vector<std::vector<double>>& values,
                                                                  const std::vector<Shape>& shapes,
                                                                  const std::vector<NamedSharding>& shardings,
                                                                  std::mt19937& rng) {
  const Params params = put_all(values, shapes, shardings);
  auto [value, grads] = dax::value_and_grad(loss)(params);
  REQUIRE(grads.size() == params.size());
  const bool member = params[0].is_addressable();
  std::vector<std::vector<double>> g;
  for (size_t i = 0; i < grads.size(); ++i) {
    CHECK(grads[i].sharding() == params[i].sharding());  // each gradient has its parameter's sharding
    CHECK(grads[i].shape() == params[i].shape());
    g.push_back(member ? grads[i].to_host() : std::vector<double>(values[i].size(), 0.0));
  }
  const double direct = scalar(loss(params));
  if (member) CHECK(scalar(value) == Approx(direct).epsilon(1e-12));
  const double eps = 1e-6;
  for (int direction = 0; direction < 3; ++direction) {
    std::vector<std::vector<double>> v, plus, minus;
    double analytic = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      v.push_back(uniform(values[i].size(), rng));
      plus.push_back(values[i]);
      minus.push_back(values[i]);
      for (size_t k = 0; k < values[i].size(); ++k) {
        plus[i][k] += eps * v[i][k];
        minus[i][k] -= eps * v[i][k];
        analytic += g[i][k] * v[i][k];
      }
    }
    const double numeric = (scalar(loss(put_all(plus, shapes, shardings))) -
                            scalar(loss(put_all(minus, shapes, shardings)))) / (2 * eps);
    if (member) CHECK(analytic == Approx(numeric).epsilon(1e-6).margin(1e-7));
  }
  return g;
}

// Gradients through complex values, in JAX's convention: the gradient of a real loss L of complex
// z is dL/dRe(z) - i dL/dIm(z) (tests/mpi/complex_grad_test.cpp, linalg_test.cpp).

/// The loss's value as a host number (0 on a rank outside its mesh, which checks nothing).
inline double value_of(const DistArray<double>& loss) { return loss.is_addressable() ? loss.to_host()[0] : 0.0; }

/// Checks value_and_grad of `loss` at the complex leaves `values` (each of `shapes[i]`, placed by
/// `where[i]`) against central differences of both parts of every element.
inline void check_complex_gradient(
    const std::function<DistArray<double>(const std::vector<DistArray<complex128>>&)>& loss,
    const std::vector<std::vector<complex128>>& values, const std::vector<Shape>& shapes,
    const std::vector<NamedSharding>& where, double tolerance = 1e-7, double h = 1e-6) {
  auto place = [&](const std::vector<std::vector<complex128>>& v) {
    std::vector<DistArray<complex128>> leaves;
    for (size_t i = 0; i < v.size(); ++i) leaves.push_back(dax::device_put(v[i], shapes[i], where[i]));
    return leaves;
  };
  const auto [value, grads] = dax::value_and_grad(loss)(place(values));
  CHECK(value_of(value) == Approx(value_of(loss(place(values)))).epsilon(1e-12));
  const bool here = value.is_addressable();  // the ranks outside the mesh run the same steps, check nothing
  for (size_t i = 0; i < values.size(); ++i) {
    CHECK(grads[i].sharding() == where[i]);
    const auto got = here ? grads[i].to_host() : std::vector<complex128>(values[i].size());
    for (size_t e = 0; e < values[i].size(); ++e) {
      double parts[2];
      for (int part = 0; part < 2; ++part) {
        const complex128 step = part == 0 ? complex128(h, 0) : complex128(0, h);
        auto up = values, down = values;
        up[i][e] += step;
        down[i][e] -= step;
        parts[part] = (value_of(loss(place(up))) - value_of(loss(place(down)))) / (2 * h);
      }
      INFO("leaf " << i << ", element " << e);
      if (!here) continue;
      CHECK(got[e].real() == Approx(parts[0]).margin(tolerance));
      CHECK(got[e].imag() == Approx(-parts[1]).margin(tolerance));
    }
  }
}

}  // namespace dax::test
