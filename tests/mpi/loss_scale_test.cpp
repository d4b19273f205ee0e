// Dynamic loss scaling (issue 44, part 2): the scale's rule (halve and skip on inf / NaN, grow
// after an interval of good steps), an overflow on one rank's piece (or on a mesh of one rank)
// skipped on every rank alike, unscaled gradients equal to those taken without a scale, and a
// float16 model with float32 master weights that trains without a skipped step after warm-up.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::optim::DynamicLossScale;
using dax::test::error_of;
using dax::test::host;
using dax::test::world_size;

namespace {

Mesh line() { return Mesh({world_size()}, {"x"}); }

std::vector<float> values(int64_t n, unsigned seed) { return dax::test::uniform_values(n, seed); }

}  // namespace

TEST_CASE("loss scale: halve and skip on an inf or a NaN anywhere, grow after the interval", "[loss_scale]") {
  const Mesh mesh = line();
  const NamedSharding split(mesh, P("x"));
  const int64_t n = 7;  // uneven over 2-4 ranks; the last rank's piece holds the last element
  DynamicLossScale scaler({.initial = 1024, .growth_interval = 3});
  const auto finite = values(n, 1);
  for (int step = 1; step <= 3; ++step) {
    std::vector<DistArray<float>> grads{dax::device_put(finite, Shape{n}, split)};
    REQUIRE(scaler.unscale(grads));
    // Divided by the scale it was taken at (a power of two: exact).
    std::vector<float> want = finite;
    for (auto& v : want) v /= 1024.0f;
    CHECK(host(grads[0]) == want);
    CHECK(scaler.scale() == (step < 3 ? 1024 : 2048));
  }
  CHECK(scaler.good_steps() == 0);
  CHECK(scaler.skipped() == 0);
  double norm = 0;
  for (float v : finite) norm += double(v) * v;
  CHECK(scaler.grad_norm() == Approx(std::sqrt(norm) / 1024).epsilon(1e-12));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> v = finite;
    v.back() = bad;  // on the last rank's piece only
    std::vector<DistArray<float>> grads{dax::device_put(values(3, 9), Shape{3}, NamedSharding(mesh, P())),
                                        dax::device_put(v, Shape{n}, split)};
    const double before = scaler.scale();
    CHECK_FALSE(scaler.unscale(grads));  // on every rank
    CHECK(scaler.scale() == before / 2);
    CHECK(std::isnan(scaler.grad_norm()));
    CHECK(host(grads[1])[0] == v[0]);  // left as they were
  }
  CHECK(scaler.skipped() == 3);
  // Its state goes through a tree (save_tree / load_tree) into a fresh scaler, as a resumed run's.
  const dax::optim::LossScaleState state = scaler.state();
  CHECK(dax::tree_size(state) == 3);
  DynamicLossScale resumed({.initial = 1024, .growth_interval = 3});
  resumed.set_state(state);
  CHECK(resumed.scale() == scaler.scale());
  CHECK(resumed.skipped() == 3);
  CHECK(resumed.good_steps() == scaler.good_steps());
  const dax::optim::LossScaleState zero{dax::zeros<double>({}, state.scale.sharding()), state.good_steps, state.skipped};
  CHECK(error_of([&] { resumed.set_state(zero); }) ==
        "DynamicLossScale.set_state: the scale must be a finite number >= min_scale = 1, got 0");
  SECTION("the scale stops at min_scale; bad options are errors") {
    DynamicLossScale small({.initial = 4, .min_scale = 2});
    std::vector<float> v = finite;
    v[0] = std::numeric_limits<float>::infinity();
    for (int i = 0; i < 3; ++i) {
      auto g = dax::device_put(v, Shape{n}, split);
      CHECK_FALSE(small.unscale(g));
    }
    CHECK(small.scale() == 2);
    CHECK(error_of([] { (void)DynamicLossScale({.backoff_factor = 1}); }) ==
          "DynamicLossScale: backoff_factor must be in (0, 1), got 1");
    CHECK(error_of([] { (void)DynamicLossScale({.initial = 0}); }) ==
          "DynamicLossScale: initial must be a finite number > 0, got 0");
  }
}

TEST_CASE("loss scale: an overflow on a mesh of one rank is skipped by every rank", "[loss_scale]") {
  const Mesh mine({1}, {"x"}, {world_size() - 1});  // the last rank alone
  std::vector<float> v = values(5, 2);
  v[2] = std::numeric_limits<float>::infinity();
  std::vector<DistArray<float>> grads{dax::device_put(v, Shape{5}, NamedSharding(mine, P())),
                                      dax::device_put(values(4, 3), Shape{4}, NamedSharding(line(), P("x")))};
  DynamicLossScale scaler;
  CHECK_FALSE(scaler.unscale(grads));
  CHECK(scaler.scale() == 32768);
}

TEST_CASE("loss scale: inside OnlyMeshRanks, a model on one rank agrees on the flag alone", "[loss_scale]") {
  // As transformer_lm's reference on one device: rank 0 trains alone while the others wait.
  if (dax::Runtime::current().rank() == 0) {
    dax::OnlyMeshRanks alone;
    const Mesh mine({1}, {"x"}, {0});
    std::vector<float> v = values(5, 2);
    std::vector<DistArray<float>> grads{dax::device_put(v, Shape{5}, NamedSharding(mine, P()))};
    DynamicLossScale scaler({.initial = 8});
    REQUIRE(scaler.unscale(grads));
    for (auto& x : v) x /= 8;
    CHECK(host(grads[0]) == v);
    v[1] = std::numeric_limits<float>::quiet_NaN();
    std::vector<DistArray<float>> bad{dax::device_put(v, Shape{5}, NamedSharding(mine, P()))};
    CHECK_FALSE(scaler.unscale(bad));
    CHECK(scaler.scale() == 4);
  }
}

TEST_CASE("loss scale: gradients of a scaled loss, unscaled, are the unscaled loss's", "[loss_scale]") {
  const Mesh mesh = line();
  const auto x = dax::device_put(values(12 * 5, 4), Shape{12, 5}, NamedSharding(mesh, P("x")));
  const auto w = dax::device_put(values(5 * 3, 5), Shape{5, 3}, NamedSharding(mesh, P()));
  const auto loss = [&](const DistArray<float>& p) { return dax::mean(dax::square(dax::tanh(dax::matmul(x, p)))); };
  const auto [value, grad] = dax::value_and_grad(loss)(w);
  DynamicLossScale scaler;
  auto [scaled_value, scaled_grad] = dax::value_and_grad([&](const DistArray<float>& p) { return scaler.scale(loss(p)); })(w);
  CHECK(host(scaled_value)[0] / scaler.scale() == host(value)[0]);  // powers of two scale exactly
  REQUIRE(scaler.unscale(scaled_grad));
  CHECK(host(scaled_grad) == host(grad));
}

TEST_CASE("loss scale: a float16 model with float32 master weights trains, skipping only while the scale settles",
          "[loss_scale]") {
  const Mesh mesh = line();
  const int64_t rows = 64, in = 16, out = 8;
  const NamedSharding data(mesh, P("x")), whole(mesh, P());
  // A teacher's targets: y = tanh(x @ t).
  const auto xs = values(rows * in, 6), ts = values(in * out, 7);
  std::vector<float> ys(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < out; ++c) {
      double s = 0;
      for (int64_t k = 0; k < in; ++k) s += double(xs[size_t(r * in + k)]) * ts[size_t(k * out + c)];
      ys[size_t(r * out + c)] = static_cast<float>(std::tanh(s));
    }
  const auto x = dax::astype<dax::half>(dax::device_put(xs, Shape{rows, in}, data));
  const auto y = dax::device_put(ys, Shape{rows, out}, data);
  auto w = dax::device_put(values(in * out, 8), Shape{in, out}, whole);  // float32 master weights
  const auto loss = [&](const DistArray<float>& master) {
    const DistArray<dax::half> h = dax::tanh(dax::matmul(x, dax::astype<dax::half>(master)));  // float16 compute
    return dax::mean(dax::square(dax::astype<float>(h) - y));                                  // float32 loss
  };
  // 2^24 overflows float16's gradients at first (its largest finite is 65504): the scale halves
  // until they fit, then stays (no growth within the run).
  DynamicLossScale scaler({.initial = 16777216.0, .growth_interval = 1000});
  dax::optim::SGD opt(w, {.lr = 0.5});
  std::vector<int> skipped_at;
  double first = 0, last = 0;
  for (int step = 1; step <= 60; ++step) {
    auto [scaled, grad] = dax::value_and_grad([&](const DistArray<float>& p) { return scaler.scale(loss(p)); })(w);
    const double value = host(scaled)[0] / scaler.scale();
    if (step == 1) first = value;
    last = value;
    if (scaler.unscale(grad)) opt.step(w, grad);
    else skipped_at.push_back(step);
  }
  INFO("first loss " << first << ", last " << last << ", final scale " << scaler.scale());
  REQUIRE(!skipped_at.empty());  // the warm-up did overflow
  for (size_t i = 0; i < skipped_at.size(); ++i) CHECK(skipped_at[i] == int(i) + 1);  // only the first steps
  CHECK(skipped_at.size() <= 12);
  CHECK(scaler.scale() >= 1024);
  CHECK(last < 0.5 * first);
}
