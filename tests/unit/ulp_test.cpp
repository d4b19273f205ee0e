// The ULP comparison the op tests use (tests/common/ulp.hpp): distances count representable
// values, a result one step past the allowance fails, and every op has a row.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <dax/core/float_math.hpp>

#include "../common/ulp.hpp"

using dax::test::max_ulps;
using dax::test::ulp_distance;
using dax::test::ulp_mismatch;

namespace {

template <class T>
T step(T v, int n) {
  for (int i = 0; i < n; ++i) v = std::nextafter(v, std::numeric_limits<T>::infinity());
  return v;
}

/// The float math functions' sweep: `f` against `reference` (in double, rounded) at every 61st
/// float of magnitude up to `top` and at its negative, plus `extra` points; the worst distance.
struct Worst {
  int64_t ulps = 0;
  float at = 0;
};
template <class F, class R>
Worst sweep_worst(F f, R reference, float top, const std::vector<float>& extra = {}) {
  Worst w;
  auto check = [&](float x) {
    const int64_t d = ulp_distance(f(x), static_cast<float>(reference(static_cast<double>(x))));
    if (d > w.ulps) w = {d, x};
  };
  uint32_t last = 0;
  std::memcpy(&last, &top, sizeof last);
  for (uint32_t bits = 0; bits <= last; bits += 61) {
    float x = 0;
    std::memcpy(&x, &bits, sizeof x);
    check(x);
    check(-x);
  }
  for (float x : extra) check(x);
  return w;
}

}  // namespace

TEMPLATE_TEST_CASE("ulp_distance counts representable values", "[ulp]", float, double) {
  using T = TestType;
  CHECK(ulp_distance(T(1), T(1)) == 0);
  CHECK(ulp_distance(T(1), step(T(1), 1)) == 1);
  CHECK(ulp_distance(step(T(1), 7), T(1)) == 7);
  CHECK(ulp_distance(T(-1), step(T(-1), 3)) == 3);  // towards zero
  CHECK(ulp_distance(T(0), -T(0)) == 0);
  const T tiny = std::numeric_limits<T>::denorm_min();
  CHECK(ulp_distance(tiny, -tiny) == 2);  // across zero: -tiny, 0, tiny
  CHECK(ulp_distance(std::nextafter(T(2), T(0)), T(2)) == 1);  // across a binade
  const T nan = std::numeric_limits<T>::quiet_NaN();
  CHECK(ulp_distance(nan, nan) == 0);
  CHECK(ulp_distance(nan, T(1)) == std::numeric_limits<int64_t>::max());
  CHECK(ulp_distance(std::numeric_limits<T>::max(), -std::numeric_limits<T>::max()) > int64_t(1) << 30);
  CHECK(dax::test::ulp_of(T(1)) == std::numeric_limits<T>::epsilon());
  CHECK(dax::test::ulp_of(T(0)) == tiny);
}

TEMPLATE_TEST_CASE("ulp_mismatch passes within the table's ULPs and fails one step past them", "[ulp]", float, double) {
  using T = TestType;
  const std::vector<T> want{T(1.5), T(-3.25), T(1e-3), T(42)};
  const int64_t allowed = max_ulps("exp");
  REQUIRE(allowed == 3);
  std::vector<T> got = want;
  for (auto& v : got) v = step(v, int(allowed));
  CHECK(ulp_mismatch(got, want, "exp") == "");
  got[2] = step(got[2], 1);
  const std::string text = ulp_mismatch(got, want, "exp");
  CHECK(text.find("exp: element 2") == 0);
  CHECK(text.find("4 ULPs apart, allowed 3") != std::string::npos);
  // A summed op allows a ULP per term.
  CHECK(max_ulps("softmax", 9) == 7 + 9);
  // A result near zero from a cancellation is measured at the given scale, not at itself.
  const std::vector<T> small{T(1e-6)};
  const std::vector<T> near{T(1e-6) + T(4) * std::numeric_limits<T>::epsilon()};
  CHECK(ulp_mismatch(near, small, "gelu") != "");  // no scale given: refused
  CHECK(ulp_mismatch(near, small, "gelu", 1, std::vector<T>{T(1)}) == "");
  CHECK(ulp_mismatch(near, small, "gelu", 1, std::vector<T>{T(1e-3)}) != "");
  // A wrong answer is far outside every row.
  CHECK(ulp_mismatch(std::vector<T>{T(std::exp(1.0))}, std::vector<T>{T(std::exp(1.0) * (1 + 1e-5))}, "pow") != "");
  CHECK(ulp_mismatch(got, want, "no_such_op").find("no ULP tolerance for 'no_such_op'") == 0);
  CHECK(ulp_mismatch(std::vector<T>{T(1)}, want, "exp").find("sizes differ") == 0);
}

TEST_CASE("the ULP table is small and whole", "[ulp]") {
  for (const auto& row : dax::test::ulp_table) {
    INFO(row.op);
    CHECK(row.ulps > 0);
    CHECK(row.ulps <= 8);  // a few ULPs: a wrong formula is millions away
    CHECK(row.ulps_per_term <= 1);
  }
  for (const char* op : {"exp", "log", "tanh", "sin", "cos", "pow", "sigmoid", "gelu", "gelu_erf", "silu", "softmax", "log_softmax", "logsumexp"})
    CHECK(max_ulps(op) > 0);
}

TEST_CASE("tanh_float: within 2 ULPs of tanh over every float magnitude, exact at the edges", "[ulp]") {
  // The CPU's vectorizable float tanh (core/float_math.hpp) against tanh in double, rounded: every
  // 61st float from 0 to 12 (past 10 it is 1) and its negative, both sides of the 0.625 seam
  // densely, and the special values.
  std::vector<float> seam;  // both sides of the 0.625 seam, densely
  for (float x = 0.6f; x < 0.65f; x = std::nextafter(x, 1.0f)) seam.push_back(x);
  const Worst w = sweep_worst([](float x) { return dax::detail::tanh_float(x); },
                              [](double x) { return std::tanh(x); }, 12.0f, seam);
  const int64_t worst = w.ulps;
  const float worst_at = w.at;
  INFO("worst " << worst << " ULPs at " << worst_at);
  CHECK(worst <= 2);
  CHECK(worst >= 1);  // the sweep reaches the rounding differences (a sweep of nothing passes too)
  CHECK(dax::detail::tanh_float(0.0f) == 0.0f);
  CHECK(std::signbit(dax::detail::tanh_float(-0.0f)));
  CHECK(dax::detail::tanh_float(1e-30f) == 1e-30f);
  CHECK(dax::detail::tanh_float(std::numeric_limits<float>::denorm_min()) == std::numeric_limits<float>::denorm_min());
  CHECK(dax::detail::tanh_float(1e30f) == 1.0f);
  CHECK(dax::detail::tanh_float(-std::numeric_limits<float>::infinity()) == -1.0f);
  CHECK(std::isnan(dax::detail::tanh_float(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("exp_float: within 2 ULPs of exp from underflow to overflow, exact at the edges", "[ulp]") {
  // softmax's and cross-entropy's vectorizable float exp (core/float_math.hpp) against exp in
  // double, rounded: every 61st float of magnitude below 120 (both signs: overflow past 88.7,
  // subnormal results below -87.3, 0 below -103.97), and the special values.
  const Worst w = sweep_worst([](float x) { return dax::detail::exp_float(x); },
                              [](double x) { return std::exp(x); }, 120.0f);
  const int64_t worst = w.ulps;
  const float worst_at = w.at;
  INFO("worst " << worst << " ULPs at " << worst_at);
  CHECK(worst <= 2);
  CHECK(worst >= 1);
  CHECK(dax::detail::exp_float(0.0f) == 1.0f);
  CHECK(dax::detail::exp_float(89.0f) == std::numeric_limits<float>::infinity());
  CHECK(dax::detail::exp_float(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
  CHECK(dax::detail::exp_float(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(dax::detail::exp_float(std::numeric_limits<float>::lowest()) == 0.0f);  // a masked score
  CHECK(dax::detail::exp_float(-103.0f) == static_cast<float>(std::exp(-103.0)));  // subnormal
  CHECK(std::isnan(dax::detail::exp_float(std::numeric_limits<float>::quiet_NaN())));
}
