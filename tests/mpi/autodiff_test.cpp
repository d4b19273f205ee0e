// Gradients of every differentiable op against central finite differences in double, on random
// shapes (uneven among them) and random shardings at every rank count; the same gradients for
// every sharding of the same computation; and the bytes the backward moves for data parallel,
// FSDP and Megatron-style layouts, equal to DESIGN §6's formulas.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>

#include "gradient_check.hpp"
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
using dax::test::check_against_differences;
using dax::test::Loss;
using dax::test::Params;
using dax::test::put_all;
using dax::test::scalar;
using dax::test::uniform;

namespace {

struct Case {
  std::string name;
  std::vector<Shape> shapes;  // of the parameters
  // The op under test, on the parameters; the test contracts its result with fixed weights.
  std::function<DistArray<double>(const Params&)> op;
};

/// sum(op(params) * w) for weights w fixed by `seed` (the same on every rank), laid out like the
/// result, so every element of the op's result gets its own cotangent.
Loss contracted(const Case& c, unsigned seed) {
  return [&c, seed](const Params& p) {
    const DistArray<double> y = c.op(p);
    std::mt19937 rng(seed);
    const auto w = dax::device_put(uniform(y.size(), rng), y.shape(),
                                   dax::detail::with_unreduced_axes(y.sharding(), y.ndim(), {}));
    return dax::sum(y * w);
  };
}

std::string comm_text() {
  std::string out;
  for (const auto& [key, c] : dax::comm_stats().entries())
    out += key.first + " " + key.second + ": " + std::to_string(c.calls) + " calls, " + std::to_string(c.bytes) + " B; ";
  return out;
}

// Positive inputs for log / sqrt / pow bases.
DistArray<double> positive(const DistArray<double>& x) { return x * x + 0.5; }

std::vector<Case> cases() {
  using D = DistArray<double>;
  std::vector<Case> c;
  auto unary = [&](std::string name, std::function<D(const D&)> f, Shape s) {
    c.push_back({name, {s}, [f](const Params& p) { return f(p[0]); }});
  };
  for (const Shape& s : {Shape{7, 5}, Shape{9}}) {
    unary("neg", [](const D& x) { return -x; }, s);
    unary("abs", [](const D& x) { return dax::abs(x); }, s);
    unary("square", [](const D& x) { return dax::square(x); }, s);
    unary("relu", [](const D& x) { return dax::relu(x); }, s);
    unary("exp", [](const D& x) { return dax::exp(x); }, s);
    unary("log", [](const D& x) { return dax::log(positive(x)); }, s);
    unary("sqrt", [](const D& x) { return dax::sqrt(positive(x)); }, s);
    unary("rsqrt", [](const D& x) { return dax::rsqrt(positive(x)); }, s);
    unary("sin", [](const D& x) { return dax::sin(x); }, s);
    unary("cos", [](const D& x) { return dax::cos(x); }, s);
    unary("tanh", [](const D& x) { return dax::tanh(x); }, s);
    unary("sigmoid", [](const D& x) { return dax::sigmoid(x); }, s);
    unary("gelu", [](const D& x) { return dax::gelu(x); }, s);
    unary("scalars", [](const D& x) { return 2.0 - (x + 1.5) * 3.0 / 2.0 + 3.0 / positive(x) - x; }, s);
    unary("pow scalar", [](const D& x) { return dax::pow(positive(x), 1.5); }, s);
    unary("maximum scalar", [](const D& x) { return dax::maximum(x, 0.1) + dax::minimum(x, -0.2); }, s);
    unary("astype", [](const D& x) { return dax::astype<double>(dax::astype<double>(x) * 2.0); }, s);
  }
  auto binary = [&](std::string name, std::function<D(const D&, const D&)> f, Shape a, Shape b) {
    c.push_back({name, {a, b}, [f](const Params& p) { return f(p[0], p[1]); }});
  };
  for (const auto& [a, b] : std::vector<std::pair<Shape, Shape>>{{{6, 5}, {6, 5}}, {{7, 3}, {3}}, {{4, 1, 5}, {3, 5}},
                                                                  {{5, 4}, {5, 1}}, {{3}, {}}}) {
    binary("add", [](const D& x, const D& y) { return x + y; }, a, b);
    binary("subtract", [](const D& x, const D& y) { return x - y; }, a, b);
    binary("multiply", [](const D& x, const D& y) { return x * y; }, a, b);
    binary("divide", [](const D& x, const D& y) { return x / positive(y); }, a, b);
    binary("pow", [](const D& x, const D& y) { return dax::pow(positive(x), y); }, a, b);
    binary("maximum", [](const D& x, const D& y) { return dax::maximum(x, y) + dax::minimum(x, y) * 2.0; }, a, b);
    binary("where", [](const D& x, const D& y) { return dax::where(x > y, x * 2.0, y * y); }, a, b);
  }
  // Reductions (their VJPs stretch the cotangent back with no communication).
  for (const Shape& s : {Shape{6, 7}, Shape{3, 5, 4}}) {
    unary("sum all", [](const D& x) { return dax::sum(x); }, s);
    unary("sum dim 0", [](const D& x) { return dax::sum(x, {0}); }, s);
    unary("sum last keepdims", [](const D& x) { return dax::sum(x, {-1}, true); }, s);
    unary("mean dim 1", [](const D& x) { return dax::mean(x, {1}); }, s);
    unary("max dim 0", [](const D& x) { return dax::max(x, {0}); }, s);
    unary("min last", [](const D& x) { return dax::min(x, {-1}, true); }, s);
    unary("logsumexp", [](const D& x) { return dax::logsumexp(x, {-1}); }, s);
    unary("softmax", [](const D& x) { return dax::softmax(x, 0); }, s);
    unary("log_softmax", [](const D& x) { return dax::log_softmax(x); }, s);
  }
  // Matmul: 2-d, vectors, batched with broadcast batch dimensions, transposed operands.
  binary("matmul", [](const D& x, const D& y) { return dax::matmul(x, y); }, {5, 7}, {7, 3});
  binary("matmul vec @ mat", [](const D& x, const D& y) { return dax::matmul(x, y); }, {7}, {7, 3});
  binary("matmul mat @ vec", [](const D& x, const D& y) { return dax::matmul(x, y); }, {5, 7}, {7});
  binary("dot", [](const D& x, const D& y) { return dax::dot(x, y); }, {6}, {6});
  binary("matmul batched", [](const D& x, const D& y) { return dax::matmul(x, y); }, {3, 4, 5}, {5, 2});
  binary("matmul broadcast batch", [](const D& x, const D& y) { return dax::matmul(x, y); }, {2, 1, 3, 4}, {3, 4, 5});
  binary("matmul of transposes", [](const D& x, const D& y) { return dax::matmul(x.T(), y.T()); }, {7, 5}, {3, 7});
  // Shape ops.
  unary("transpose", [](const D& x) { return dax::transpose(x, {1, 2, 0}) * 1.0; }, {3, 4, 5});
  unary("T", [](const D& x) { return x.T() * x.T(); }, {5, 3});
  unary("reshape", [](const D& x) { return dax::reshape(x, {4, -1}); }, {6, 2, 2});
  unary("slice", [](const D& x) { return dax::slice(x, {1, 0}, {5, 2}); }, {7, 3});
  unary("expand/squeeze", [](const D& x) { return dax::squeeze(dax::expand_dims(x, 1)) * 2.0; }, {5, 3});
  unary("broadcast_to", [](const D& x) { return dax::broadcast_to(x, {4, 5, 3}); }, {5, 1});
  binary("concatenate", [](const D& x, const D& y) { return dax::concatenate(std::vector<D>{x, y, x}, 1); }, {3, 2},
         {3, 5});
  binary("stack", [](const D& x, const D& y) { return dax::stack(std::vector<D>{y, x}, 1); }, {4, 3}, {4, 3});
  unary("reshard", [](const D& x) {
    return dax::reshard(x, NamedSharding(x.sharding().mesh(), P())) * 3.0;
  }, {5, 6});
  // A small network: two layers, a bias, a softmax loss.
  c.push_back({"mlp", {{6, 5}, {5, 4}, {4}, {4, 3}}, [](const Params& p) {
                 const D h = dax::gelu(dax::matmul(p[0], p[1]) + p[2]);
                 return dax::log_softmax(dax::matmul(h, p[3]));
               }});
  return c;
}

}  // namespace

TEST_CASE("every VJP matches central finite differences on random shardings", "[autodiff]") {
  Pick pick(2024);
  std::mt19937 rng(99);
  const auto all = cases();
  for (size_t i = 0; i < all.size(); ++i) {
    const Case& c = all[i];
    const Mesh& mesh = random_mesh(pick);
    std::vector<NamedSharding> shardings;
    std::vector<std::vector<double>> values;
    for (const Shape& s : c.shapes) {
      shardings.push_back(random_sharding(pick, mesh, s.size()));
      values.push_back(uniform(dax::numel(s), rng));
    }
    INFO(c.name << " on " << dax::to_string(mesh) << " with " << dax::to_string(shardings[0]));
    check_against_differences(contracted(c, 1234 + i), values, c.shapes, shardings, rng);
  }
}

TEST_CASE("gradients agree across shardings of the same computation", "[autodiff]") {
  Pick pick(77);
  std::mt19937 rng(5);
  const auto all = cases();
  for (size_t i = 0; i < all.size(); i += 3) {
    const Case& c = all[i];
    const Mesh& mesh = random_mesh(pick);
    std::vector<std::vector<double>> values;
    std::vector<NamedSharding> replicated, sharded;
    for (const Shape& s : c.shapes) {
      values.push_back(uniform(dax::numel(s), rng));
      replicated.push_back(NamedSharding(mesh, P()));
      sharded.push_back(random_sharding(pick, mesh, s.size()));
    }
    INFO(c.name << " on " << dax::to_string(mesh));
    const Loss loss = contracted(c, 4321 + i);
    const auto g1 = dax::grad(loss)(put_all(values, c.shapes, replicated));
    const auto g2 = dax::grad(loss)(put_all(values, c.shapes, sharded));
    for (size_t k = 0; k < g1.size(); ++k) {
      const auto a = host(g1[k]), b = host(g2[k]);
      REQUIRE(a.size() == b.size());
      for (size_t e = 0; e < a.size(); ++e) CHECK(a[e] == Approx(b[e]).epsilon(1e-12).margin(1e-12));
    }
  }
}

TEST_CASE("vjp, has_aux, stop_gradient, zeros for unused parameters, errors", "[autodiff]") {
  const Mesh mesh({dax::test::world_size()}, {"x"});
  std::mt19937 rng(3);
  const auto xv = uniform(10, rng), yv = uniform(10, rng);
  const auto x = dax::device_put(xv, {10}, NamedSharding(mesh, P("x")));
  const auto y = dax::device_put(yv, {10}, NamedSharding(mesh, P()));

  SECTION("vjp gives one cotangent per argument, NoCotangent for non-arrays") {
    auto [out, pullback] = dax::vjp([](const DistArray<double>& a, const DistArray<double>& b, double s) {
      return a * b * s;
    }, x, y, 3.0);
    CHECK(out.trace_id() == 0);
    const auto ct = dax::device_put(uniform(10, rng), {10}, NamedSharding(mesh, P("x")));
    const auto [ga, gb, gs] = pullback(ct);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(gs)>, dax::NoCotangent>);
    const auto c = ct.to_host(), ha = ga.to_host(), hb = gb.to_host();
    CHECK(ga.sharding() == x.sharding());
    CHECK(gb.sharding() == y.sharding());
    for (int i = 0; i < 10; ++i) {
      CHECK(ha[i] == Approx(c[i] * yv[i] * 3.0));
      CHECK(hb[i] == Approx(c[i] * xv[i] * 3.0));
    }
  }
  SECTION("has_aux returns ((value, aux), grads); stop_gradient blocks; unused params get zeros") {
    auto f = [&](const Params& p) {
      const auto loss = dax::sum(p[0] * dax::stop_gradient(p[0]));
      return std::pair{loss, 42};
    };
    auto [value_aux, grads] = dax::value_and_grad(f)(Params{x, y});
    CHECK(value_aux.second == 42);
    const auto g0 = grads[0].to_host(), g1 = grads[1].to_host();
    for (int i = 0; i < 10; ++i) {
      CHECK(g0[i] == Approx(xv[i]));  // d/dx of x * const(x)
      CHECK(g1[i] == 0.0);
    }
  }
  SECTION("a non-scalar loss, a nested gradient and an op with no rule are errors on every rank") {
    auto vector_loss = [](const DistArray<double>& a) { return a * 2.0; };
    CHECK_THAT(dax::test::error_of([&] { dax::grad(vector_loss)(x); }),
               Catch::Contains("gradient only defined for scalar-output functions; the function returned shape (10,)"));
    auto nested = [](const DistArray<double>& a) {
      return dax::grad([](const DistArray<double>& b) { return dax::sum(b); })(a);
    };
    CHECK_THAT(dax::test::error_of([&] { dax::grad([&](const DistArray<double>& a) { return dax::sum(nested(a)); })(x); }),
               Catch::Contains("higher-order gradients are not supported"));
    CHECK_THAT(dax::test::error_of([&] { dax::grad([](const DistArray<double>& a) { return dax::prod(a); })(x); }),
               Catch::Contains("prod has no gradient rule"));
  }
}

TEST_CASE("the backward moves what a hand-written schedule moves", "[autodiff][comm]") {
  const int n = dax::test::world_size();
  if (n < 2) return;
  const Mesh mesh({n}, {"data"});
  std::mt19937 rng(8);
  const int64_t batch = 4 * n, in = 8, out = 6;
  const auto x = dax::device_put(uniform(batch * in, rng), {batch, in}, NamedSharding(mesh, P("data")));
  const auto t = dax::device_put(uniform(batch * out, rng), {batch, out}, NamedSharding(mesh, P("data")));
  auto mse = [&](const DistArray<double>& w) { return dax::mean(dax::square(dax::matmul(x, w) - t)); };
  // comm_stats counts what a rank receives: an all-reduce of m elements over n devices as the
  // 2(n-1)/n m of the bandwidth-optimal ring, an all-gather or reduce-scatter as (n-1)/n m.
  auto all_reduce = [&](int64_t m) { return 2 * (n - 1) * m / n * int64_t(sizeof(double)); };
  auto gather_or_scatter = [&](int64_t m) { return (n - 1) * m / n * int64_t(sizeof(double)); };

  SECTION("data parallel: one all-reduce of the gradient, 2(n-1)/n |W|") {
    const auto w = dax::device_put(uniform(in * out, rng), {in, out}, NamedSharding(mesh, P()));
    dax::comm_stats().reset();
    const auto g = dax::grad(mse)(w);
    CHECK(g.sharding() == w.sharding());
    // Forward: the loss's sum is an all-reduce of one scalar; backward: the gradient's all-reduce.
    INFO(comm_text());
    CHECK(dax::comm_stats().of("all_reduce").calls == 2);
    CHECK(dax::comm_stats().total_bytes() == all_reduce(in * out) + all_reduce(1));
  }
  SECTION("FSDP: all-gather forward, one reduce-scatter of the gradient backward, (n-1)/n |W| each") {
    const int64_t rows = 2 * n;  // divisible, so the formulas are exact
    const auto xs = dax::device_put(uniform(batch * rows, rng), {batch, rows}, NamedSharding(mesh, P("data")));
    const auto w = dax::device_put(uniform(rows * out, rng), {rows, out}, NamedSharding(mesh, P("data")));
    auto fsdp = [&](const DistArray<double>& ws) {
      const auto full = dax::reshard(ws, NamedSharding(mesh, P()));  // gather the weight for the layer
      return dax::mean(dax::square(dax::matmul(xs, full) - t));
    };
    dax::comm_stats().reset();
    const auto g = dax::grad(fsdp)(w);
    CHECK(g.sharding() == w.sharding());
    INFO(comm_text());
    CHECK(dax::comm_stats().of("reduce_scatter").calls == 1);
    CHECK(dax::comm_stats().total_bytes() == 2 * gather_or_scatter(rows * out) + all_reduce(1));
  }
  SECTION("Megatron column -> row MLP: no weight-gradient traffic over the model axis") {
    // Weights larger than the activations (as in a transformer), so the column -> row strategy is
    // the fastest for the forward too.
    const Mesh model({n}, {"model"});
    const int64_t rows = 4, width = 32, hidden = 8 * n;
    const auto xm = dax::device_put(uniform(rows * width, rng), {rows, width}, NamedSharding(model, P()));
    const auto tm = dax::device_put(uniform(rows * width, rng), {rows, width}, NamedSharding(model, P()));
    const Params w{
        dax::device_put(uniform(width * hidden, rng), {width, hidden}, NamedSharding(model, P(dax::none, "model"))),
        dax::device_put(uniform(hidden * width, rng), {hidden, width}, NamedSharding(model, P("model")))};
    auto mlp = [&](const Params& p) {
      const auto h = dax::relu(dax::matmul(xm, p[0]));
      return dax::mean(dax::square(dax::matmul(h, p[1]) - tm));
    };
    dax::comm_stats().reset();
    const auto g = dax::grad(mlp)(w);
    CHECK(g[0].sharding() == w[0].sharding());
    CHECK(g[1].sharding() == w[1].sharding());
    // Forward: one all-reduce of the (batch, in) activation; the backward moves nothing (the input
    // needs no gradient, the weight gradients are local).
    INFO(comm_text());
    CHECK(dax::comm_stats().total_calls() == 1);
    CHECK(dax::comm_stats().total_bytes() == all_reduce(rows * width));
  }
  SECTION("a row-parallel output split by rows (sequence parallelism): its cotangent gathered once") {
    // Forward: the partial sums reduce-scattered into row blocks. Backward: both products (the
    // input's and the weight's gradient) want the cotangent whole; one all-gather serves both.
    const Mesh model({n}, {"model"});
    const int64_t rows = 2 * n, width = 4, hidden = 3 * n;
    const NamedSharding by_rows(model, P("model"));
    const auto target = uniform(rows * width, rng);
    const auto ts = dax::device_put(target, {rows, width}, by_rows);
    const auto tr = dax::device_put(target, {rows, width}, NamedSharding(model, P()));
    const Params w{
        dax::device_put(uniform(rows * hidden, rng), {rows, hidden}, NamedSharding(model, P(dax::none, "model"))),
        dax::device_put(uniform(hidden * width, rng), {hidden, width}, NamedSharding(model, P("model")))};
    auto split = [&](const Params& p) { return dax::mean(dax::square(dax::matmul(p[0], p[1], by_rows) - ts)); };
    auto whole = [&](const Params& p) { return dax::mean(dax::square(dax::matmul(p[0], p[1]) - tr)); };
    dax::comm_stats().reset();
    const auto g = dax::grad(split)(w);
    INFO(comm_text());
    CHECK(dax::comm_stats().of("reduce_scatter").calls == 1);
    CHECK(dax::comm_stats().of("all_gather").calls == 1);
    CHECK(dax::comm_stats().total_bytes() == 2 * gather_or_scatter(rows * width) + all_reduce(1));
    const auto want = dax::grad(whole)(w);
    for (size_t i = 0; i < 2; ++i) {
      const auto got_host = host(g[i]), want_host = host(want[i]);
      REQUIRE(got_host.size() == want_host.size());
      for (size_t k = 0; k < got_host.size(); ++k) CHECK(got_host[k] == Approx(want_host[k]).margin(1e-12));
    }
  }
}
