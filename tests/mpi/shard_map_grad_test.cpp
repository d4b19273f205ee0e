// Gradients through shard_map (replication typing, docs/autodiff.md): every collective's transpose
// and the implicit broadcast of invariant values, checked against central finite differences in
// double and against the same computation written with global ops; the bytes the backward moves
// for data-parallel and Megatron bodies; and the errors of the typing check.
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include "gradient_check.hpp"
#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::PartitionSpec;
using dax::Shape;
using dax::test::check_against_differences;
using dax::test::Params;
using dax::test::uniform;
using D = DistArray<double>;

namespace {

/// A global function of the parameters written twice: with a shard_map body, and with global ops.
struct Case {
  std::string name;
  Mesh mesh;
  std::vector<Shape> shapes;
  std::vector<PartitionSpec> specs;  // the parameters' shardings
  std::function<D(const Params&)> mapped, reference;
};

/// sum(f(params) * w) for fixed random weights laid out like the result.
std::function<D(const Params&)> contracted(std::function<D(const Params&)> f, unsigned seed) {
  return [f, seed](const Params& p) {
    const D y = f(p);
    std::mt19937 rng(seed);
    const auto w = dax::device_put(uniform(y.size(), rng), y.shape(),
                                   dax::detail::with_unreduced_axes(y.sharding(), y.ndim(), {}));
    return dax::sum(y * w);
  };
}

Mesh line() { return Mesh(Shape{dax::test::world_size()}, {"i"}); }

/// n copies of x along dimension 0.
D tiled_copies(const D& x, int64_t n) { return dax::concatenate(std::vector<D>(n, x), 0); }

std::vector<Case> cases() {
  const Mesh m = line();
  const int64_t n = m.size();
  std::vector<Case> c;
  c.push_back({"psum of a replicated input", m, {{3, 4}}, {P()},
               [m](const Params& p) {
                 return dax::shard_map([](const D& b) { return dax::psum(b * b, "i"); }, m, {P()}, P())(p[0]);
               },
               [n](const Params& p) { return p[0] * p[0] * static_cast<double>(n); }});
  c.push_back({"pmean of a split input", m, {{2 * n, 3}}, {P("i")},
               [m](const Params& p) {
                 return dax::shard_map([](const D& b) { return dax::pmean(dax::sin(b), "i"); }, m, {P("i")}, P())(p[0]);
               },
               [n](const Params& p) { return dax::mean(dax::reshape(dax::sin(p[0]), {n, 2, 3}), {0}); }});
  c.push_back({"data parallel: replicated weight, split batch", m, {{4, 3}, {2 * n, 4}}, {P(), P("i")},
               [m](const Params& p) {
                 auto body = [](const D& w, const D& x) { return dax::psum(dax::sum(dax::tanh(dax::matmul(x, w))), "i"); };
                 return dax::shard_map(body, m, {P(), P("i")}, P())(p[0], p[1]);
               },
               [](const Params& p) { return dax::sum(dax::tanh(dax::matmul(p[1], p[0]))); }});
  c.push_back({"Megatron column then row", m, {{2, 4}, {4, 2 * n}, {2 * n, 4}}, {P(), P(dax::none, "i"), P("i", dax::none)},
               [m](const Params& p) {
                 auto body = [](const D& x, const D& w1, const D& w2) {
                   return dax::psum(dax::matmul(dax::tanh(dax::matmul(x, w1)), w2), "i");
                 };
                 return dax::shard_map(body, m, {P(), P(dax::none, "i"), P("i", dax::none)}, P())(p[0], p[1], p[2]);
               },
               [](const Params& p) { return dax::matmul(dax::tanh(dax::matmul(p[0], p[1])), p[2]); }});
  c.push_back({"implicit broadcast of an invariant input", m, {{3}, {3 * n}}, {P(), P("i")},
               [m](const Params& p) {
                 return dax::shard_map([](const D& x, const D& y) { return x * y; }, m, {P(), P("i")}, P("i"))(p[0], p[1]);
               },
               [n](const Params& p) { return tiled_copies(p[0], n) * p[1]; }});
  c.push_back({"an invariant output split by the out spec", m, {{2, 3}}, {P()},
               [m](const Params& p) {
                 return dax::shard_map([](const D& x) { return dax::exp(x); }, m, {P()}, P("i"))(p[0]);
               },
               [n](const Params& p) { return tiled_copies(dax::exp(p[0]), n); }});
  c.push_back({"all_gather tiled", m, {{2 * n, 3}}, {P("i")},
               [m](const Params& p) {
                 return dax::shard_map([](const D& b) { return dax::all_gather(b * b, "i", 0, true); }, m, {P("i")},
                                       P("i"))(p[0]);
               },
               [n](const Params& p) { return tiled_copies(p[0] * p[0], n); }});
  c.push_back({"all_gather untiled", m, {{2 * n, 3}}, {P("i")},
               [m](const Params& p) {
                 return dax::shard_map([](const D& b) { return dax::all_gather(b, "i", 1); }, m, {P("i")}, P("i"))(p[0]);
               },
               [n](const Params& p) {
                 // Each device holds [2, n, 3]: row r, member j = x[2j + r].
                 const D per = dax::transpose(dax::reshape(p[0], {n, 2, 3}), {1, 0, 2});
                 return tiled_copies(per, n);
               }});
  c.push_back({"psum_scatter tiled", m, {{2 * n * n, 3}}, {P("i")},
               [m](const Params& p) {
                 return dax::shard_map([](const D& b) { return dax::psum_scatter(dax::tanh(b), "i", 0, true); }, m,
                                       {P("i")}, P("i"))(p[0]);
               },
               [n](const Params& p) { return dax::sum(dax::reshape(dax::tanh(p[0]), {n, 2 * n, 3}), {0}); }});
  c.push_back({"all_to_all tiled", m, {{2 * n * n, 3}}, {P("i")},
               [m](const Params& p) {
                 return dax::shard_map([](const D& b) { return dax::all_to_all(b * 2.0, "i", 0, 1, true); }, m,
                                       {P("i")}, P("i"))(p[0]);
               },
               [n](const Params& p) {
                 // Device d's block splits into parts j (2 rows each); device j lays the parts of
                 // every d side by side along dimension 1.
                 const D parts = dax::reshape(p[0] * 2.0, {n, n, 2, 3});            // [d, j, r, c]
                 return dax::reshape(dax::transpose(parts, {1, 2, 0, 3}), {2 * n, 3 * n});  // [j, r, d, c]
               }});
  c.push_back({"ppermute, a cyclic shift", m, {{2 * n, 3}}, {P("i")},
               [m, n](const Params& p) {
                 std::vector<std::pair<int, int>> shift;
                 for (int k = 0; k < n; ++k) shift.emplace_back(k, static_cast<int>((k + 1) % n));
                 return dax::shard_map([shift](const D& b) { return dax::ppermute(dax::exp(b), "i", shift); }, m,
                                       {P("i")}, P("i"))(p[0]);
               },
               [n](const Params& p) {
                 const D e = dax::exp(p[0]);
                 if (n == 1) return e;
                 return dax::concatenate(std::vector<D>{dax::slice(e, {2 * n - 2, 0}, {2 * n, 3}), dax::slice(e, {0, 0}, {2 * n - 2, 3})}, 0);
               }});
  if (n == 4 || n == 8) {
    const Mesh g(Shape{2, n / 2}, {"x", "y"});
    const int64_t ny = n / 2;
    c.push_back({"2-d: psum over one axis of a block split over both", g, {{4, 2 * ny}}, {P("x", "y")},
                 [g](const Params& p) {
                   return dax::shard_map([](const D& b) { return dax::psum(b * b, "x"); }, g, {P("x", "y")},
                                         P(nullptr, "y"))(p[0]);
                 },
                 [](const Params& p) { return dax::sum(dax::reshape(p[0] * p[0], {2, 2, p[0].shape()[1]}), {0}); }});
    c.push_back({"2-d: psum over an axis the block is replicated on", g, {{4, 3}}, {P("x")},
                 [g](const Params& p) {
                   return dax::shard_map([](const D& b) { return dax::psum(dax::tanh(b), "y"); }, g, {P("x")}, P("x"))(p[0]);
                 },
                 [ny](const Params& p) { return dax::tanh(p[0]) * static_cast<double>(ny); }});
    c.push_back({"2-d: psum over both axes, named in either order", g, {{4, 2 * ny}}, {P("x", "y")},
                 [g](const Params& p) {
                   return dax::shard_map([](const D& b) { return dax::psum(dax::sin(b), dax::axes("y", "x")); }, g,
                                         {P("x", "y")}, P())(p[0]);
                 },
                 [ny](const Params& p) {
                   return dax::sum(dax::reshape(dax::sin(p[0]), {2, 2, ny, 2}), {0, 2});
                 }});
  }
  return c;
}

std::vector<NamedSharding> shardings_of(const Case& c) {
  std::vector<NamedSharding> s;
  for (const auto& spec : c.specs) s.emplace_back(c.mesh, spec);
  return s;
}

int64_t all_reduce_bytes() {
  int64_t bytes = 0;
  for (const auto& [key, count] : dax::comm_stats().entries())
    if (key.first == "all_reduce") bytes += count.bytes;
  return bytes;
}

int64_t total_bytes() {
  int64_t bytes = 0;
  for (const auto& [key, count] : dax::comm_stats().entries()) bytes += count.bytes;
  return bytes;
}

}  // namespace

TEST_CASE("gradients through shard_map match finite differences and the global computation", "[autodiff][shard_map]") {
  std::mt19937 rng(20261123);
  for (const Case& c : cases()) {
    SECTION(c.name) {
      std::vector<std::vector<double>> values;
      for (const Shape& s : c.shapes) values.push_back(uniform(dax::numel(s), rng));
      const auto shardings = shardings_of(c);
      const auto mapped = contracted(c.mapped, 7), reference = contracted(c.reference, 7);
      // The two functions agree in value...
      const Params params = dax::test::put_all(values, c.shapes, shardings);
      CHECK(dax::test::scalar(mapped(params)) == Approx(dax::test::scalar(reference(params))).epsilon(1e-12));
      // ...and the shard_map's gradients match finite differences and the global ops' gradients.
      const auto g = check_against_differences(mapped, values, c.shapes, shardings, rng);
      auto [value, expected] = dax::value_and_grad(reference)(params);
      for (size_t i = 0; i < g.size(); ++i) {
        const auto want = expected[i].to_host();
        REQUIRE(want.size() == g[i].size());
        for (size_t k = 0; k < want.size(); ++k) CHECK(g[i][k] == Approx(want[k]).epsilon(1e-10).margin(1e-12));
      }
    }
  }
}

TEST_CASE("the backward of a shard_map body moves what a hand-written schedule moves", "[autodiff][shard_map][comm]") {
  const Mesh m = line();
  const int64_t n = m.size();
  std::mt19937 rng(11);
  auto bytes_of = [](auto&& run) {
    dax::comm_stats().reset();
    run();
    return std::pair{all_reduce_bytes(), total_bytes()};
  };
  // All-reduces count 2(n-1)/n of the elements in whole elements (dax::detail::all_reduce_received).
  auto all_reduce = [n](int64_t elements) { return 2 * (n - 1) * elements / n * int64_t(sizeof(double)); };

  SECTION("data parallel: one all-reduce of the weight's gradient") {
    const D w = dax::device_put(uniform(64 * 32, rng), {64, 32}, NamedSharding(m, P()));
    const D x = dax::device_put(uniform(8 * n * 64, rng), {8 * n, 64}, NamedSharding(m, P("i")));
    auto loss = [&](const D& weight) {
      auto body = [](const D& wb, const D& xb) { return dax::psum(dax::sum(dax::tanh(dax::matmul(xb, wb))), "i"); };
      return dax::shard_map(body, m, {P(), P("i")}, P())(weight, x);
    };
    const auto forward = bytes_of([&] { (void)loss(w); });
    const auto both = bytes_of([&] { (void)dax::value_and_grad(loss)(w); });
    CHECK(both.first - forward.first == all_reduce(64 * 32));
    CHECK(both.second - forward.second == all_reduce(64 * 32));
  }
  SECTION("Megatron column then row: one all-reduce of the input's gradient") {
    const D x = dax::device_put(uniform(16 * 32, rng), {16, 32}, NamedSharding(m, P()));
    const D w1 = dax::device_put(uniform(32 * 8 * n, rng), {32, 8 * n}, NamedSharding(m, P(dax::none, "i")));
    const D w2 = dax::device_put(uniform(8 * n * 32, rng), {8 * n, 32}, NamedSharding(m, P("i", dax::none)));
    auto loss = [&](const Params& p) {
      auto body = [](const D& xb, const D& a, const D& b) {
        return dax::psum(dax::matmul(dax::tanh(dax::matmul(xb, a)), b), "i");
      };
      return dax::sum(dax::shard_map(body, m, {P(), P(dax::none, "i"), P("i", dax::none)}, P())(p[0], p[1], p[2]));
    };
    const Params p{x, w1, w2};
    const auto forward = bytes_of([&] { (void)loss(p); });
    const auto both = bytes_of([&] { (void)dax::value_and_grad(loss)(p); });
    CHECK(both.first - forward.first == all_reduce(16 * 32));
    CHECK(both.second - forward.second == all_reduce(16 * 32));
  }
}

TEST_CASE("replication typing: errors and what needs no gradient", "[autodiff][shard_map]") {
  const Mesh m = line();
  const int64_t n = m.size();
  std::mt19937 rng(5);
  const D x = dax::device_put(uniform(2 * n * 3, rng), {2 * n, 3}, NamedSharding(m, P("i")));

  SECTION("an output that varies over an axis its out spec replicates is an error under a gradient") {
    auto loss = [&](const D& a) {
      return dax::sum(dax::shard_map([](const D& b) { return dax::exp(b); }, m, {P("i")}, P())(a));
    };
    const std::string e = dax::test::error_of([&] { (void)dax::value_and_grad(loss)(x); });
    CHECK_THAT(e, Catch::Contains("shard_map: output 0 varies over mesh axis 'i' but out_specs[0] = P() says it is "
                                  "replicated there"));
    CHECK_THAT(e, Catch::Contains("reduce it with psum"));
  }
  SECTION("pmax has no gradient rule") {
    auto loss = [&](const D& a) {
      return dax::sum(dax::shard_map([](const D& b) { return dax::pmax(b, "i"); }, m, {P("i")}, P())(a));
    };
    CHECK_THAT(dax::test::error_of([&] { (void)dax::value_and_grad(loss)(x); }),
               Catch::Contains("pmax has no gradient rule"));
  }
  SECTION("a varying value that needs no gradient still types what it touches") {
    // The batch is not differentiated, yet w * batch varies: w's gradient is summed over 'i'.
    const D w = dax::device_put(uniform(3, rng), {3}, NamedSharding(m, P()));
    auto loss = [&](const D& weight) {
      auto body = [](const D& wb, const D& b) { return dax::psum(dax::sum(b * wb), "i"); };
      return dax::shard_map(body, m, {P(), P("i")}, P())(weight, x);
    };
    auto [value, g] = dax::value_and_grad(loss)(w);
    const auto xs = x.to_host();
    std::vector<double> want(3, 0.0);
    for (int64_t r = 0; r < 2 * n; ++r)
      for (int c = 0; c < 3; ++c) want[c] += xs[r * 3 + c];
    const auto got = g.to_host();
    for (int c = 0; c < 3; ++c) CHECK(got[c] == Approx(want[c]).epsilon(1e-12));
  }
  SECTION("a comparison of a varying value is varying too") {
    // where(b > 0, w, 0) with w invariant: w's gradient counts the positive entries on every device.
    const D w = dax::device_put(uniform(3, rng), {3}, NamedSharding(m, P()));
    auto loss = [&](const D& weight) {
      auto body = [](const D& wb, const D& b) {
        const D zero = dax::zeros<double>(b.shape(), dax::local_sharding());
        return dax::psum(dax::sum(dax::where(b > zero, dax::broadcast_to(wb, b.shape()), zero)), "i");
      };
      return dax::shard_map(body, m, {P(), P("i")}, P())(weight, x);
    };
    auto [value, g] = dax::value_and_grad(loss)(w);
    const auto xs = x.to_host();
    std::vector<double> want(3, 0.0);
    for (int64_t r = 0; r < 2 * n; ++r)
      for (int c = 0; c < 3; ++c) want[c] += xs[r * 3 + c] > 0 ? 1.0 : 0.0;
    const auto got = g.to_host();
    for (int c = 0; c < 3; ++c) CHECK(got[c] == Approx(want[c]).epsilon(1e-12));
  }
  SECTION("pvary types a value built from axis_index as varying") {
    // sum(w * (i + 1)) over the devices: w's gradient is 1 + 2 + ... + n in every element.
    const D w = dax::device_put(uniform(3, rng), {3}, NamedSharding(m, P()));
    auto loss = [&](const D& weight) {
      auto body = [](const D& wb) {
        const D c = dax::full<double>(wb.shape(), dax::axis_index("i") + 1.0, dax::local_sharding());
        return dax::psum(dax::sum(wb * dax::pvary(c, "i")), "i");
      };
      return dax::shard_map(body, m, {P()}, P())(weight);
    };
    auto [value, g] = dax::value_and_grad(loss)(w);
    for (double v : g.to_host()) CHECK(v == Approx(n * (n + 1) / 2.0).epsilon(1e-12));
  }
  SECTION("a gradient through a shard_map on part of the world is an error on every rank") {
    if (n == 1) return;
    const Mesh part(Shape{1}, {"i"}, {0});
    const D y = dax::device_put(uniform(3, rng), {3}, NamedSharding(part, P()));
    auto loss = [&](const D& a) {
      return dax::sum(dax::shard_map([](const D& b) { return b * b; }, part, {P()}, P())(a));
    };
    CHECK_THAT(dax::test::error_of([&] { (void)dax::value_and_grad(loss)(y); }),
               Catch::Contains("a gradient through a shard_map needs its mesh to hold every rank"));
  }
  SECTION("one called by its mesh's ranks alone (dax::OnlyMeshRanks) takes gradients there") {
    const Mesh part(Shape{1}, {"i"}, {0});
    const std::vector<double> values = uniform(3, rng);
    if (dax::test::world_rank() != 0) return;  // the others run nothing
    dax::OnlyMeshRanks alone;
    const D y = dax::device_put(values, {3}, NamedSharding(part, P()));
    auto loss = [&](const D& a) {
      return dax::sum(dax::shard_map([](const D& b) { return b * b; }, part, {P()}, P())(a));
    };
    const auto g = dax::value_and_grad(loss)(y).second.to_host();
    for (size_t i = 0; i < 3; ++i) CHECK(g[i] == Approx(2 * values[i]).epsilon(1e-14));
  }
}

TEST_CASE("a collective whose output one device drops still runs its backward there", "[autodiff][shard_map]") {
  // A pipeline hands device 0's block to device 1, which alone uses it; device 0 ignores what it
  // receives. Device 1's backward sends the cotangent back through the reverse ppermute, so device
  // 0 must run that ppermute's pullback too (on a zero cotangent), or the ranks would wait on each
  // other. Every size: a ring of n devices where device i + 1 uses device i's block unless it is 0.
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"i"});
  std::mt19937 rng(31);
  const std::vector<double> values = dax::test::random_values<double>(4 * n, rng);
  const D x = dax::device_put(values, {4 * n}, NamedSharding(mesh, P("i")));
  std::vector<std::pair<int, int>> ring;
  for (int d = 0; d < n; ++d) ring.emplace_back(d, (d + 1) % n);
  auto loss = [&](const D& v) {
    return dax::shard_map(
        [&](const D& b) {
          const D y = dax::ppermute(b * 2.0, "i", ring);  // device d receives device d-1's block
          const bool uses = dax::axis_index("i") % 2 == 1;  // odd devices use it, even ones drop it
          const D s = uses ? dax::sum(y * y) : dax::sum(b) * 0.0;
          return dax::psum(s, "i");
        },
        mesh, {P("i")}, P())(v);
  };
  const auto [value, grad] = dax::value_and_grad(loss)(x);
  // loss = sum over odd d of |2 x_{d-1}|^2: d/dx_j = 8 x_j when device j + 1 is odd (j even), else 0.
  double want_loss = 0;
  std::vector<double> want_grad(values.size(), 0.0);
  for (int d = 1; d < n; d += 2)
    for (int k = 0; k < 4; ++k) {
      const double u = values[4 * (d - 1) + k];
      want_loss += 4 * u * u;
      want_grad[4 * (d - 1) + k] = 8 * u;
    }
  CHECK(value.to_host()[0] == Approx(want_loss).epsilon(1e-12));
  const auto got = grad.to_host();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want_grad[i]).margin(1e-12));
}

TEST_CASE("collectives carry the user's call site: named scopes, explicit moves and their backward",
          "[autodiff][shard_map][comm][call_site]") {
  const Mesh m = line();
  const int64_t n = m.size();
  std::mt19937 rng(43);
  const D w = dax::device_put(uniform(4 * n * 3, rng), {4 * n, 3}, NamedSharding(m, P("i")));
  auto sites = [] {
    std::map<std::string, std::pair<std::string, int64_t>> out;  // site -> (kind, calls)
    for (const auto& [key, c] : dax::comm_stats().by_site())
      out[std::get<2>(key)] = {std::get<0>(key), c.calls};
    return out;
  };
  const std::string file = "shard_map_grad_test.cpp:";
  dax::comm_stats().reset();
  int gather_line = 0, reshard_line = 0;
  auto loss = [&](const D& weight) {
    const dax::NamedScope scope("block");
    auto body = [&](const D& b) {
      gather_line = __LINE__ + 1;
      return dax::all_gather(b * b, "i", 0, true);
    };
    const D gathered = dax::shard_map(body, m, {P("i")}, P("i"))(weight);
    reshard_line = __LINE__ + 1;
    const D again = dax::reshard(weight, NamedSharding(m, P()));
    return dax::sum(gathered) + dax::sum(again);
  };
  const auto [value, grad] = dax::value_and_grad(loss)(w);
  const auto seen = sites();
  const std::string gather_site = "block/all_gather @ " + file + std::to_string(gather_line);
  const std::string reshard_site = "block/reshard @ " + file + std::to_string(reshard_line);
  for (const auto& [site, c] : seen) INFO(site << ": " << c.first << " x" << c.second);
  if (n == 1) {  // nothing moves on one device
    CHECK(dax::comm_stats().total_calls() == 0);
    return;
  }
  // Forward: the body's all-gather at its line inside the scope, the reshard at its own.
  REQUIRE(seen.count(gather_site) == 1);
  CHECK(seen.at(gather_site).first == "all_gather");
  REQUIRE(seen.count(reshard_site) == 1);
  CHECK(seen.at(reshard_site).first == "all_gather");
  // Backward: the all-gather's transpose (a reduce-scatter, which dax's pullback asks psum_scatter
  // for: a call from dax's own header, which adds no frame) at the forward's site, marked so.
  REQUIRE(seen.count(gather_site + " (backward)") == 1);
  CHECK(seen.at(gather_site + " (backward)").first == "reduce_scatter");
  // Outside every scope: the scope is gone, and a collective there has no site.
  dax::comm_stats().reset();
  (void)dax::reshard(w, NamedSharding(m, P()));
  const auto after = sites();
  REQUIRE(after.size() == 1);
  CHECK(after.begin()->first.find("reshard @ " + file) == 0);
  dax::comm_stats().reset();
  const D y = dax::shard_map([](const D& b) { return dax::psum(b, "i"); }, m, {P("i")}, P())(w);
  (void)y;
  for (const auto& [key, c] : dax::comm_stats().by_site()) CHECK(std::get<2>(key).find("psum @ " + file) == 0);
  // Another explicit collective at its own line.
  dax::comm_stats().reset();
  const int pmean_line = __LINE__ + 1;
  (void)dax::shard_map([](const D& b) { return dax::pmean(b, "i"); }, m, {P("i")}, P())(w);
  for (const auto& [key, c] : dax::comm_stats().by_site())
    CHECK(std::get<2>(key) == "pmean @ " + file + std::to_string(pmean_line));
}
