// nn/: layer_norm, rms_norm, dropout, causal / masked softmax and cross_entropy against loops on
// the gathered arrays, on random uneven shapes and random shardings (the normalized or vocabulary
// dimension split among them); their custom-VJP gradients against central finite differences in
// double and equal across shardings; the bytes of the vocab-parallel cross-entropy (three
// all-reduces of one value per token forward, nothing backward); custom_vjp's own contract.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>

#include <dax/autodiff/custom_vjp.hpp>
#include <dax/nn/nn.hpp>

#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::host;
using dax::test::Pick;
using dax::test::random_mesh;
using dax::test::random_sharding;

namespace {

using Params = std::vector<DistArray<double>>;
using Loss = std::function<DistArray<double>(const Params&)>;

std::vector<double> uniform(int64_t n, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

Params put_all(const std::vector<std::vector<double>>& values, const std::vector<Shape>& shapes,
               const std::vector<NamedSharding>& shardings) {
  Params p;
  for (size_t i = 0; i < values.size(); ++i) p.push_back(dax::device_put(values[i], shapes[i], shardings[i]));
  return p;
}

double scalar(const DistArray<double>& x) { return x.is_addressable() ? x.to_host()[0] : 0.0; }

/// sum(y * w) for fixed weights w laid out like y: every element of y gets its own cotangent.
DistArray<double> contract(const DistArray<double>& y, unsigned seed) {
  std::mt19937 rng(seed);
  const auto w = dax::device_put(uniform(y.size(), rng), y.shape(),
                                 dax::detail::with_unreduced_axes(y.sharding(), y.ndim(), {}));
  return dax::sum(y * w);
}

/// The gathered gradients of `loss` at `values`, checked against central differences along three
/// random directions (and each gradient's sharding against its parameter's).
std::vector<std::vector<double>> check_gradients(const Loss& loss, const std::vector<std::vector<double>>& values,
                                                 const std::vector<Shape>& shapes,
                                                 const std::vector<NamedSharding>& shardings, std::mt19937& rng) {
  const Params params = put_all(values, shapes, shardings);
  auto [value, grads] = dax::value_and_grad(loss)(params);
  const bool member = params[0].is_addressable();
  std::vector<std::vector<double>> g;
  for (size_t i = 0; i < grads.size(); ++i) {
    CHECK(grads[i].sharding() == params[i].sharding());
    g.push_back(member ? grads[i].to_host() : std::vector<double>(values[i].size(), 0.0));
  }
  if (member) CHECK(scalar(value) == Approx(scalar(loss(params))).epsilon(1e-12));
  const double eps = 1e-6;
  for (int direction = 0; direction < 3; ++direction) {
    std::vector<std::vector<double>> plus = values, minus = values;
    double analytic = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const auto v = uniform(values[i].size(), rng);
      for (size_t k = 0; k < v.size(); ++k) {
        plus[i][k] += eps * v[k];
        minus[i][k] -= eps * v[k];
        analytic += g[i][k] * v[k];
      }
    }
    const double numeric =
        (scalar(loss(put_all(plus, shapes, shardings))) - scalar(loss(put_all(minus, shapes, shardings)))) / (2 * eps);
    if (member) CHECK(analytic == Approx(numeric).epsilon(1e-6).margin(1e-7));
  }
  return g;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(tol).margin(tol));
}

// ---- loop references on gathered data ----
std::vector<double> layer_norm_ref(const std::vector<double>& x, int64_t d, const std::vector<double>& gamma,
                                   const std::vector<double>& beta, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mu += x[r * d + j];
    mu /= d;
    for (int64_t j = 0; j < d; ++j) var += (x[r * d + j] - mu) * (x[r * d + j] - mu);
    var /= d;
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = (x[r * d + j] - mu) / std::sqrt(var + eps) * gamma[j] + beta[j];
  }
  return y;
}

std::vector<double> rms_norm_ref(const std::vector<double>& x, int64_t d, const std::vector<double>& gamma, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < d; ++j) ms += x[r * d + j] * x[r * d + j];
    ms /= d;
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] / std::sqrt(ms + eps) * gamma[j];
  }
  return y;
}

/// Causal softmax of (..., q, k) scores.
std::vector<double> causal_softmax_ref(const std::vector<double>& x, int64_t q, int64_t k) {
  std::vector<double> y(x.size(), 0.0);
  for (size_t r = 0; r < x.size() / k; ++r) {
    const int64_t row = static_cast<int64_t>(r) % q, last = row + (k - q);
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j <= last; ++j) m = std::max(m, x[r * k + j]);
    for (int64_t j = 0; j <= last; ++j) s += std::exp(x[r * k + j] - m);
    for (int64_t j = 0; j <= last; ++j) y[r * k + j] = std::exp(x[r * k + j] - m) / s;
  }
  return y;
}

double cross_entropy_ref(const std::vector<double>& x, int64_t v, const std::vector<int32_t>& labels) {
  double total = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < v; ++j) m = std::max(m, x[r * v + j]);
    for (int64_t j = 0; j < v; ++j) s += std::exp(x[r * v + j] - m);
    total += m + std::log(s) - x[r * v + labels[r]];
  }
  return total / static_cast<double>(labels.size());
}

std::vector<int32_t> random_labels(int64_t n, int64_t v, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(v - 1));
  std::vector<int32_t> out(n);
  for (auto& l : out) l = dist(rng);
  return out;
}

/// The world as one mesh axis, and an array sharding with only dimension `dim` split over it.
NamedSharding split_dim(const Mesh& mesh, size_t ndim, size_t dim) {
  std::vector<dax::PartitionSpec::Entry> entries(ndim, dax::none);
  entries[dim] = mesh.axis_names()[0];
  return NamedSharding(mesh, dax::PartitionSpec(entries));
}

const std::vector<Shape> norm_shapes{{5, 7}, {3, 4, 6}, {9}, {2, 5, 3}, {6, 10}, {4, 1}};

}  // namespace

TEST_CASE("layer_norm and rms_norm match loops on every sharding, the normalized dim split included", "[nn]") {
  Pick pick(31);
  std::mt19937 rng(7);
  const Mesh line({dax::test::world_size()}, {"x"});
  for (int round = 0; round < 3; ++round)
    for (const Shape& s : norm_shapes) {
      const int64_t d = s.back();
      const auto xv = uniform(dax::numel(s), rng, -2.0, 3.0), gv = uniform(d, rng), bv = uniform(d, rng);
      const Mesh& mesh = round == 0 ? line : random_mesh(pick);
      // Round 2 may hand the functions unreduced inputs (partial sums): they are reduced first.
      const NamedSharding xs = round == 0 ? split_dim(line, s.size(), s.size() - 1)
                                          : random_sharding(pick, mesh, s.size(), round == 2);
      const NamedSharding ps = random_sharding(pick, mesh, 1);
      INFO(dax::to_string(s) << " x " << dax::to_string(xs) << " gamma " << dax::to_string(ps));
      const auto x = dax::device_put(xv, s, xs);
      const auto gamma = dax::device_put(gv, {d}, ps), beta = dax::device_put(bv, {d}, ps);
      const auto ln = dax::layer_norm(x, gamma, beta, 1e-5);
      const auto rms = dax::rms_norm(x, gamma, 1e-6);
      CHECK(ln.shape() == s);
      if (!x.is_addressable()) continue;
      check_close(ln.to_host(), layer_norm_ref(xv, d, gv, bv, 1e-5));
      check_close(rms.to_host(), rms_norm_ref(xv, d, gv, 1e-6));
    }
  SECTION("float, and bad parameter shapes are errors on every rank") {
    const Shape s{6, 5};
    const auto xv = uniform(30, rng), gv = uniform(5, rng), bv = uniform(5, rng);
    std::vector<float> xf(xv.begin(), xv.end()), gf(gv.begin(), gv.end()), bf(bv.begin(), bv.end());
    const auto x = dax::device_put(xf, s, split_dim(line, 2, 1));
    const auto g = dax::device_put(gf, {5}, NamedSharding(line, P()));
    const auto b = dax::device_put(bf, {5}, NamedSharding(line, P("x")));
    const auto got = dax::layer_norm(x, g, b).to_host();
    const auto want = layer_norm_ref(xv, 5, gv, bv, 1e-5);
    for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-5).margin(1e-5));
    CHECK_THAT(dax::test::error_of([&] { dax::rms_norm(x, dax::device_put(gf, {1, 5}, NamedSharding(line, P()))); }),
               Catch::Contains("rms_norm: gamma must have shape (5,) (x's last dimension), got (1, 5)"));
  }
}

TEST_CASE("layer_norm and rms_norm gradients: finite differences, the same on every sharding", "[nn][autodiff]") {
  Pick pick(57);
  std::mt19937 rng(11);
  const Mesh line({dax::test::world_size()}, {"x"});
  for (size_t i = 0; i < norm_shapes.size(); ++i) {
    const Shape& s = norm_shapes[i];
    const int64_t d = s.back();
    const std::vector<Shape> shapes{s, {d}, {d}};
    const std::vector<std::vector<double>> values{uniform(dax::numel(s), rng, -2.0, 2.0), uniform(d, rng),
                                                  uniform(d, rng)};
    const Loss ln = [i](const Params& p) { return contract(dax::layer_norm(p[0], p[1], p[2], 1e-5), 100 + i); };
    const Loss rms = [i](const Params& p) { return contract(dax::rms_norm(p[0], p[1], 1e-6), 200 + i); };
    // Three layouts: replicated, the normalized dimension split over the world, random.
    const Mesh& mesh = random_mesh(pick);
    const std::vector<std::vector<NamedSharding>> layouts{
        {NamedSharding(line, P()), NamedSharding(line, P()), NamedSharding(line, P())},
        {split_dim(line, s.size(), s.size() - 1), NamedSharding(line, P("x")), NamedSharding(line, P())},
        {random_sharding(pick, mesh, s.size()), random_sharding(pick, mesh, 1), random_sharding(pick, mesh, 1)}};
    std::vector<std::vector<std::vector<double>>> ln_grads, rms_grads;
    for (const auto& layout : layouts) {
      INFO(dax::to_string(s) << " x " << dax::to_string(layout[0]) << " gamma " << dax::to_string(layout[1]));
      ln_grads.push_back(check_gradients(ln, values, shapes, layout, rng));
      const std::vector<Shape> rshapes{s, {d}};
      rms_grads.push_back(check_gradients(rms, {values[0], values[1]}, rshapes, {layout[0], layout[1]}, rng));
    }
    if (!layouts[2][0].mesh().contains(dax::test::world_rank())) continue;
    for (size_t l = 1; l < layouts.size(); ++l)
      for (size_t k = 0; k < ln_grads[0].size(); ++k) {
        check_close(ln_grads[l][k], ln_grads[0][k]);
        if (k < rms_grads[0].size()) check_close(rms_grads[l][k], rms_grads[0][k]);
      }
  }
}

TEST_CASE("layer_norm and rms_norm with the rows whole: one kernel each way, the input kept, not a copy", "[nn]") {
  const Mesh one({1}, {"x"});
  if (dax::test::world_rank() != 0) return;  // one device: the bytes of one rank
  std::mt19937 rng(23);
  const int64_t rows = 64, d = 96;
  const NamedSharding r(one, P());
  const auto x = dax::device_put(uniform(rows * d, rng, -2.0, 2.0), {rows, d}, r);
  const auto gamma = dax::device_put(uniform(d, rng), {d}, r), beta = dax::device_put(uniform(d, rng), {d}, r);
  const int64_t output = rows * d * 8, stat = rows * 8;  // y, and each row's rstd (layer_norm: and mean)
  const auto held_and_peak = [&](const auto& f) {
    dax::reset_peak_memory();
    const int64_t before = dax::memory_stats().bytes_in_use;
    auto [y, pullback] = dax::vjp(f, x, gamma, beta);  // y and what the backward keeps, alive
    return std::pair{dax::memory_stats().bytes_in_use - before, dax::memory_stats().peak_bytes_in_use - before};
  };
  const auto [ln_held, ln_peak] = held_and_peak(
      [](const DistArray<double>& a, const DistArray<double>& g, const DistArray<double>& b) {
        return dax::layer_norm(a, g, b);
      });
  const auto [rms_held, rms_peak] = held_and_peak(
      [](const DistArray<double>& a, const DistArray<double>& g, const DistArray<double>&) { return dax::rms_norm(a, g); });
  INFO("layer_norm held " << ln_held << " B (peak " << ln_peak << "), rms_norm " << rms_held << " (" << rms_peak
                          << "), y " << output << " B, a statistic " << stat << " B");
  // The composite kept a normalized copy of x (another `output`) and made three temporaries of x's size.
  CHECK(ln_held == output + 2 * stat);
  CHECK(ln_peak == output + 2 * stat);
  CHECK(rms_held == output + stat);  // rms_norm's mean is 0: neither kept nor computed
  CHECK(rms_peak == output + stat);
}

TEST_CASE("layer_norm and rms_norm in bfloat16 and half: statistics in float, against the rounded inputs' norm",
          "[nn]") {
  const Mesh line({dax::test::world_size()}, {"x"});
  std::mt19937 rng(29);
  const Shape s{dax::test::world_size() * 3 + 1, 200};
  const int64_t d = s.back();
  const auto run = [&]<class T>(double tol) {
    const auto xv = uniform(dax::numel(s), rng, 4.0, 6.0);  // a mean far from 0: a 16-bit mean would lose it
    const auto gv = uniform(d, rng), bv = uniform(d, rng);
    auto rounded = [](const std::vector<double>& v) {
      std::vector<T> out(v.begin(), v.end());
      return out;
    };
    auto back = [](const std::vector<T>& v) { return std::vector<double>(v.begin(), v.end()); };
    const auto x = dax::device_put(rounded(xv), s, split_dim(line, 2, 0));
    const auto gamma = dax::device_put(rounded(gv), {d}, NamedSharding(line, P()));
    const auto beta = dax::device_put(rounded(bv), {d}, NamedSharding(line, P()));
    const auto ln = dax::layer_norm(x, gamma, beta).to_host();
    const auto rms = dax::rms_norm(x, gamma).to_host();
    const auto ln_want = layer_norm_ref(back(rounded(xv)), d, back(rounded(gv)), back(rounded(bv)), 1e-5);
    const auto rms_want = rms_norm_ref(back(rounded(xv)), d, back(rounded(gv)), 1e-6);
    for (size_t i = 0; i < ln_want.size(); ++i) {
      CHECK(static_cast<double>(ln[i]) == Approx(ln_want[i]).epsilon(tol).margin(tol));
      CHECK(static_cast<double>(rms[i]) == Approx(rms_want[i]).epsilon(tol).margin(tol));
    }
  };
  run.operator()<dax::bfloat16>(1e-2);
  run.operator()<dax::half>(2e-3);
}

TEST_CASE("dropout: Bernoulli's mask whatever the sharding, scaled, with the mask as its gradient", "[nn]") {
  Pick pick(5);
  std::mt19937 rng(12);
  const auto key = dax::random::key(2024);
  for (const Shape& s : {Shape{7, 9}, Shape{3, 5, 4}, Shape{13}}) {
    const auto xv = uniform(dax::numel(s), rng);
    const Mesh& mesh = random_mesh(pick);
    const NamedSharding xs = random_sharding(pick, mesh, s.size());
    INFO(dax::to_string(s) << " " << dax::to_string(xs));
    const auto x = dax::device_put(xv, s, xs);
    for (double rate : {0.0, 0.3, 0.75, 1.0}) {
      const auto y = dax::dropout(key, x, rate);
      CHECK(y.sharding() == x.sharding());
      const auto keep = host(dax::random::bernoulli(key, 1.0 - rate, s, NamedSharding(mesh, P())));
      const auto got = host(y);
      const auto g = host(dax::grad([&](const DistArray<double>& a) { return contract(dax::dropout(key, a, rate), 9); })(x));
      if (!x.is_addressable()) continue;
      std::mt19937 wr(9);
      const auto w = uniform(xv.size(), wr);
      int kept = 0;
      for (size_t i = 0; i < xv.size(); ++i) {
        const double scale = rate == 0.0 ? 1.0 : (keep[i] ? 1.0 / (1.0 - rate) : 0.0);
        kept += scale != 0.0;
        CHECK(got[i] == Approx(xv[i] * scale).epsilon(1e-15));
        CHECK(g[i] == Approx(w[i] * scale).epsilon(1e-15));
      }
      if (rate == 1.0) CHECK(kept == 0);
      if (rate == 0.3) CHECK((kept > 0 && kept < static_cast<int>(xv.size())));  // a real mask, not all or none
    }
  }
  const Mesh line({dax::test::world_size()}, {"x"});
  const auto x = dax::device_put(uniform(40, rng), {40}, NamedSharding(line, P("x")));
  // The same mask at every sharding: a replicated and a split copy agree element by element.
  CHECK(host(dax::dropout(key, x, 0.5)) == host(dax::dropout(key, dax::reshard(x, NamedSharding(line, P())), 0.5)));
  CHECK_THAT(dax::test::error_of([&] { dax::dropout(key, x, 1.5); }),
             Catch::Contains("dropout: rate must be in [0, 1], got 1.5"));
}

TEST_CASE("causal mask and causal softmax: loops, finite differences, every sharding", "[nn]") {
  Pick pick(88);
  std::mt19937 rng(21);
  const Mesh line({dax::test::world_size()}, {"x"});
  for (const Shape& s : {Shape{5, 5}, Shape{2, 3, 4, 4}, Shape{3, 6}, Shape{2, 7, 7}}) {
    const int64_t q = s[s.size() - 2], k = s.back();
    const auto xv = uniform(dax::numel(s), rng, -3.0, 3.0);
    for (int layout = 0; layout < 3; ++layout) {
      const Mesh& mesh = layout == 2 ? random_mesh(pick) : line;
      const NamedSharding xs = layout == 0   ? split_dim(line, s.size(), s.size() - 1)
                               : layout == 1 ? split_dim(line, s.size(), s.size() - 2)
                                             : random_sharding(pick, mesh, s.size());
      INFO(dax::to_string(s) << " " << dax::to_string(xs));
      if (layout == 2) {  // unreduced scores are reduced first
        const NamedSharding us = random_sharding(pick, mesh, s.size(), true);
        const auto yu = host(dax::causal_softmax(dax::device_put(xv, s, us)));
        if (us.mesh().contains(dax::test::world_rank())) check_close(yu, causal_softmax_ref(xv, q, k));
      }
      const auto mask = host(dax::causal_mask(s, xs));
      const auto y = host(dax::causal_softmax(dax::device_put(xv, s, xs)));
      if (xs.mesh().contains(dax::test::world_rank())) {
        for (size_t i = 0; i < mask.size(); ++i) {
          const int64_t col = static_cast<int64_t>(i) % k, row = static_cast<int64_t>(i) / k % q;
          CHECK(mask[i] == (col <= row + k - q));
        }
        check_close(y, causal_softmax_ref(xv, q, k));
      }
      const Loss loss = [](const Params& p) { return contract(dax::causal_softmax(p[0]), 31); };
      check_gradients(loss, {xv}, {s}, {xs}, rng);
      // Scaled, as attention calls it (the fused kernels where the keys are whole, layouts 1 and
      // mostly 2; the masked softmax of the scaled scores where they are split, layout 0).
      const double scale = 0.37;
      std::vector<double> scaled(xv);
      for (double& v : scaled) v *= scale;
      const auto ys = host(dax::causal_softmax(dax::device_put(xv, s, xs), scale));
      if (xs.mesh().contains(dax::test::world_rank())) check_close(ys, causal_softmax_ref(scaled, q, k));
      const Loss scaled_loss = [scale](const Params& p) { return contract(dax::causal_softmax(p[0], scale), 31); };
      check_gradients(scaled_loss, {xv}, {s}, {xs}, rng);
    }
  }
  SECTION("a mask broadcast against the scores; a fully masked row is uniform, not NaN") {
    const Shape s{2, 3, 4};
    const auto xv = uniform(24, rng);
    const auto x = dax::device_put(xv, s, split_dim(line, 3, 2));
    const std::vector<int32_t> mv{1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1};
    const auto mask = dax::not_equal(dax::device_put(mv, {3, 4}, NamedSharding(line, P())),
                                     dax::zeros<int32_t>({}, NamedSharding(line, P())));
    const auto y = dax::masked_softmax(x, mask).to_host();
    for (int64_t r = 0; r < 6; ++r) {
      const int64_t mr = r % 3;
      double m = -INFINITY, sum = 0;
      bool any = false;
      for (int j = 0; j < 4; ++j)
        if (mv[mr * 4 + j]) m = std::max(m, xv[r * 4 + j]), any = true;
      for (int j = 0; j < 4; ++j)
        if (mv[mr * 4 + j]) sum += std::exp(xv[r * 4 + j] - m);
      for (int j = 0; j < 4; ++j)
        CHECK(y[r * 4 + j] == Approx(!any ? 0.25 : (mv[mr * 4 + j] ? std::exp(xv[r * 4 + j] - m) / sum : 0.0)).margin(1e-14));
    }
    CHECK_THAT(dax::test::error_of([&] { dax::causal_mask({5, 3}, NamedSharding(line, P())); }),
               Catch::Contains("causal_mask: more queries (5) than keys (3) in (5, 3)"));
  }
}

TEST_CASE("cross_entropy: loops, finite differences, the same gradient on every sharding", "[nn]") {
  Pick pick(64);
  std::mt19937 rng(41);
  const Mesh line({dax::test::world_size()}, {"x"});
  for (const Shape& s : {Shape{6, 11}, Shape{2, 5, 7}, Shape{9, 3}, Shape{1, 13}}) {
    const Shape tokens(s.begin(), s.end() - 1);
    const int64_t v = s.back();
    const auto xv = uniform(dax::numel(s), rng, -4.0, 4.0);
    const auto lv = random_labels(dax::numel(tokens), v, rng);
    std::vector<std::vector<double>> grads;  // of the layouts whose mesh holds this rank
    for (int layout = 0; layout < 4; ++layout) {
      const Mesh& mesh = layout >= 2 ? random_mesh(pick) : line;
      const NamedSharding xs = layout == 0   ? NamedSharding(line, P())
                               : layout == 1 ? split_dim(line, s.size(), s.size() - 1)
                                             : random_sharding(pick, mesh, s.size());
      const NamedSharding ls = random_sharding(pick, xs.mesh(), tokens.size());
      INFO(dax::to_string(s) << " logits " << dax::to_string(xs) << " labels " << dax::to_string(ls));
      const auto labels = dax::device_put(lv, tokens, ls);
      const auto loss = dax::cross_entropy(dax::device_put(xv, s, xs), labels);
      // Unreduced logits (a row-parallel head keeping its partial sums) are reduced first.
      const auto loss_u = dax::cross_entropy(dax::device_put(xv, s, random_sharding(pick, xs.mesh(), s.size(), true)), labels);
      CHECK(loss.ndim() == 0);
      if (xs.mesh().contains(dax::test::world_rank())) {
        CHECK(loss.to_host()[0] == Approx(cross_entropy_ref(xv, v, lv)).epsilon(1e-12));
        CHECK(loss_u.to_host()[0] == Approx(cross_entropy_ref(xv, v, lv)).epsilon(1e-12));
      }
      const Loss f = [&labels](const Params& p) { return dax::cross_entropy(p[0], labels) * 1.0; };
      auto g = check_gradients(f, {xv}, {s}, {xs}, rng)[0];
      if (xs.mesh().contains(dax::test::world_rank())) grads.push_back(std::move(g));
    }
    // The gradient is (softmax - one_hot) / tokens, whatever the layout.
    if (!line.contains(dax::test::world_rank())) continue;
    std::vector<double> want(xv.size());
    for (size_t r = 0; r < lv.size(); ++r) {
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < v; ++j) m = std::max(m, xv[r * v + j]);
      for (int64_t j = 0; j < v; ++j) sum += std::exp(xv[r * v + j] - m);
      for (int64_t j = 0; j < v; ++j)
        want[r * v + j] = (std::exp(xv[r * v + j] - m) / sum - (j == lv[r] ? 1.0 : 0.0)) / double(lv.size());
    }
    CHECK(grads.size() >= 2);
    for (const auto& g : grads) check_close(g, want);
  }
  SECTION("labels of the wrong shape are an error on every rank") {
    const auto x = dax::device_put(uniform(12, rng), {3, 4}, NamedSharding(line, P()));
    const auto bad = dax::device_put(std::vector<int32_t>{0, 1}, {2}, NamedSharding(line, P()));
    CHECK_THAT(dax::test::error_of([&] { dax::cross_entropy(x, bad); }),
               Catch::Contains("cross_entropy: labels must have the logits' shape without the last (vocabulary) "
                               "dimension, (3,), got (2,)"));
  }
}

TEST_CASE("vocab-parallel cross_entropy: three all-reduces of one value per token, a backward moving nothing",
          "[nn][comm]") {
  const int n = dax::test::world_size();
  if (n < 2) return;
  std::mt19937 rng(3);
  auto all_reduce = [](int members, int64_t elements) {
    return 2 * (members - 1) * elements * int64_t(sizeof(double)) / members;
  };
  SECTION("vocabulary split over every rank, labels replicated") {
    const Mesh mesh({n}, {"model"});
    const int64_t tokens = 12, vocab = 8 * n + 3;  // uneven vocabulary pieces
    const auto logits = dax::device_put(uniform(tokens * vocab, rng, -3, 3), {tokens, vocab},
                                        NamedSharding(mesh, P(dax::none, "model")));
    const auto labels = dax::device_put(random_labels(tokens, vocab, rng), {tokens}, NamedSharding(mesh, P()));
    dax::comm_stats().reset();
    auto [loss, pullback] = dax::vjp([&](const DistArray<double>& z) { return dax::cross_entropy(z, labels); }, logits);
    CHECK(dax::comm_stats().of("all_reduce").calls == 3);
    CHECK(dax::comm_stats().total_calls() == 3);
    CHECK(dax::comm_stats().total_bytes() == 3 * all_reduce(n, tokens));
    const auto seed = dax::ones<double>({}, NamedSharding(mesh, P()));
    dax::comm_stats().reset();
    const auto [dz] = pullback(seed);
    CHECK(dz.sharding() == logits.sharding());
    CHECK(dax::comm_stats().total_bytes() == 0);
    CHECK(dax::comm_stats().total_calls() == 0);
  }
  SECTION("(data, model) mesh: tokens split over data; plus the mean's one scalar over data") {
    if (n != 4) return;
    const Mesh mesh({2, 2}, {"data", "model"});
    const int64_t batch = 4, seq = 3, vocab = 9;
    const auto logits = dax::device_put(uniform(batch * seq * vocab, rng, -3, 3), {batch, seq, vocab},
                                        NamedSharding(mesh, P("data", dax::none, "model")));
    const auto labels = dax::device_put(random_labels(batch * seq, vocab, rng), {batch, seq},
                                        NamedSharding(mesh, P("data")));
    dax::comm_stats().reset();
    const auto g = dax::grad([&](const DistArray<double>& z) { return dax::cross_entropy(z, labels); })(logits);
    CHECK(g.sharding() == logits.sharding());
    // Forward: MAX, SUM, SUM of the 6 local tokens over model; the mean's scalar over data. Backward: nothing.
    CHECK(dax::comm_stats().of("all_reduce").calls == 4);
    CHECK(dax::comm_stats().total_bytes() == 3 * all_reduce(2, batch / 2 * seq) + all_reduce(2, 1));
  }
}

TEST_CASE("layer_norm and rms_norm backward: a partial-sum gradient is reduced once, up front", "[nn][comm]") {
  // The input gradient of a Megatron column-parallel layer arrives as partial sums over 'model';
  // the norms' backward needs its true values, so it is all-reduced once, and the row means need
  // no collectives of their own (before: two more all-reduces of one value per row).
  const int n = dax::test::world_size();
  if (n < 2) return;
  const Mesh mesh({n}, {"model"});
  const NamedSharding replicated(mesh, P()), partial(mesh, P().with_unreduced("model"));
  std::mt19937 rng(17);
  const int64_t rows = 6, d = 10;
  const auto x = dax::device_put(uniform(rows * d, rng), {rows, d}, replicated);
  const auto gamma = dax::device_put(uniform(d, rng, 0.5, 1.5), {d}, replicated);
  const auto beta = dax::device_put(uniform(d, rng), {d}, replicated);
  const auto g = dax::device_put(uniform(rows * d, rng), {rows, d}, replicated);
  const auto g_partial = dax::reshard(g, partial);  // the same values, held as partial sums
  const int64_t all_reduce = 2 * (n - 1) * rows * d / n * int64_t(sizeof(double));
  SECTION("layer_norm") {
    auto [y, pullback] = dax::vjp(
        [](const DistArray<double>& a, const DistArray<double>& s, const DistArray<double>& b) {
          return dax::layer_norm(a, s, b);
        },
        x, gamma, beta);
    const auto [dx_want, dg_want, db_want] = pullback(g);
    dax::comm_stats().reset();
    const auto [dx, dg, db] = pullback(g_partial);
    CHECK(dax::comm_stats().total_calls() == 1);
    CHECK(dax::comm_stats().of("all_reduce").bytes == all_reduce);
    CHECK(host(dx) == host(dx_want));
    CHECK(host(dg) == host(dg_want));
    CHECK(host(db) == host(db_want));
  }
  SECTION("rms_norm") {
    auto [y, pullback] = dax::vjp(
        [](const DistArray<double>& a, const DistArray<double>& s) { return dax::rms_norm(a, s); }, x, gamma);
    const auto [dx_want, dg_want] = pullback(g);
    dax::comm_stats().reset();
    const auto [dx, dg] = pullback(g_partial);
    CHECK(dax::comm_stats().total_calls() == 1);
    CHECK(dax::comm_stats().of("all_reduce").bytes == all_reduce);
    CHECK(host(dx) == host(dx_want));
    CHECK(host(dg) == host(dg_want));
  }
}

TEST_CASE("custom_vjp: the forward is untraced, the given backward is the gradient", "[nn][autodiff]") {
  const Mesh line({dax::test::world_size()}, {"x"});
  std::mt19937 rng(1);
  const auto xv = uniform(10, rng), yv = uniform(10, rng);
  const auto x = dax::device_put(xv, {10}, NamedSharding(line, P("x")));
  const auto y = dax::device_put(yv, {10}, NamedSharding(line, P()));
  // A deliberately "wrong" backward (3 g for both inputs) shows it is the one used.
  const auto f = dax::custom_vjp(
      "test_product",
      [](const DistArray<double>& a, const DistArray<double>& b) { return std::pair{a * b, 0}; },
      [](int, const DistArray<double>& g) { return std::tuple{g * 3.0, g * 3.0}; });
  using Pair = std::tuple<DistArray<double>, DistArray<double>>;
  auto [gx, gy] = dax::grad([&](const Pair& p) { return dax::sum(f(std::get<0>(p), std::get<1>(p))); })(Pair{x, y});
  for (double e : host(gx)) CHECK(e == 3.0);
  for (double e : host(gy)) CHECK(e == 3.0);
  const auto plain = host(f(x, y));
  for (size_t i = 0; i < xv.size() && !plain.empty(); ++i) CHECK(plain[i] == xv[i] * yv[i]);
  const auto bad = dax::custom_vjp(
      "bad_shape", [](const DistArray<double>& a) { return std::pair{a * 2.0, 0}; },
      [](int, const DistArray<double>& g) { return std::tuple{dax::sum(g, {0}, true)}; });
  CHECK_THAT(dax::test::error_of([&] { dax::grad([&](const DistArray<double>& a) { return dax::sum(bad(a)); })(x); }),
             Catch::Contains("bad_shape: the custom backward gave input 0 a cotangent of shape (1,) but the input has "
                             "shape (10,)"));
}
