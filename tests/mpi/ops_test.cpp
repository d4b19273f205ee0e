// Ops on random shardings (uneven and multi-axis among them) at every rank count, compared with the
// same computation done by plain loops on the global arrays in this process. Inputs are small
// integers, so float results of +, -, *, /, sums and products are exact; transcendental ops are
// compared within the ULPs of tests/common/ulp.hpp, the same on CPU and CUDA.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "../common/simulate.hpp"
#include "../common/ulp.hpp"
#include "helpers.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::host;
using dax::test::Pick;
using dax::test::source_index;
using dax::test::random_mesh;
using dax::test::random_sharding;

namespace {

template <class T, class F>
std::vector<T> reference_binary(const std::vector<T>& a, const Shape& as, const std::vector<T>& b, const Shape& bs,
                                const Shape& out, F f) {
  std::vector<T> r(dax::numel(out));
  for (int64_t i = 0; i < dax::numel(out); ++i) r[i] = f(a[source_index(as, out, i)], b[source_index(bs, out, i)]);
  return r;
}

template <class T>
dax::DistArray<T> put(const std::vector<T>& host, const Shape& shape, const NamedSharding& s) {
  return dax::device_put(host, shape, s);
}

}  // namespace

TEMPLATE_TEST_CASE("elementwise ops with broadcasting on random shardings", "[ops][elementwise]", float, double,
                   int32_t, int64_t) {
  using T = TestType;
  Pick pick;
  const std::vector<std::pair<Shape, Shape>> pairs{{{5, 6}, {5, 6}}, {{7, 3}, {3}},   {{4, 1, 5}, {3, 5}},
                                                   {{6}, {}},        {{2, 3, 4}, {2, 1, 4}}, {{0, 3}, {3}}};
  for (int trial = 0; trial < 30; ++trial) {
    // Named references, not a structured binding: clang before 16 cannot capture bindings in lambdas.
    const auto& as = pairs[trial % pairs.size()].first;
    const auto& bs = pairs[trial % pairs.size()].second;
    const Mesh& mesh = random_mesh(pick);
    const auto sa = random_sharding(pick, mesh, as.size()), sb = random_sharding(pick, mesh, bs.size());
    const auto ha = dax::test::random_values<T>(dax::numel(as), pick.rng);
    auto hb = dax::test::random_values<T>(dax::numel(bs), pick.rng);
    for (auto& v : hb) v = v == 0 ? 1 : v;  // a divisor
    const auto a = put(ha, as, sa), b = put(hb, bs, sb);
    const Shape out = dax::detail::broadcast_shapes({as, bs});
    INFO("trial " << trial << " " << dax::to_string(as) << " " << sa << " with " << dax::to_string(bs) << " " << sb);
    const auto sum = host(a + b);
    const auto diff = host(a - b);
    const auto prod = host(a * b);
    const auto quot = host(a / b);
    const auto big = host(dax::maximum(a, b));
    const auto lt = dax::less(a, b);
    const auto pick_ab = host(dax::where(lt, a, b));
    if (!mesh.contains(dax::test::world_rank())) continue;
    CHECK(sum == reference_binary<T>(ha, as, hb, bs, out, [](T x, T y) { return x + y; }));
    CHECK(diff == reference_binary<T>(ha, as, hb, bs, out, [](T x, T y) { return x - y; }));
    CHECK(prod == reference_binary<T>(ha, as, hb, bs, out, [](T x, T y) { return x * y; }));
    CHECK(quot == reference_binary<T>(ha, as, hb, bs, out, [](T x, T y) { return x / y; }));
    CHECK(big == reference_binary<T>(ha, as, hb, bs, out, [](T x, T y) { return x > y ? x : y; }));
    CHECK(pick_ab == reference_binary<T>(ha, as, hb, bs, out, [](T x, T y) { return x < y ? x : y; }));
    const auto lh = host(lt);
    CHECK(std::vector<bool>(lh.begin(), lh.end()) ==
          [&] {
            std::vector<bool> r(dax::numel(out));
            for (int64_t i = 0; i < dax::numel(out); ++i) r[i] = ha[source_index(as, out, i)] < hb[source_index(bs, out, i)];
            return r;
          }());
  }
}

TEST_CASE("unary ops, scalars and astype for every dtype", "[ops][elementwise]") {
  Pick pick;
  for (int trial = 0; trial < 20; ++trial) {
    const Shape shape{5, 3};
    const Mesh& mesh = random_mesh(pick);
    const auto s = random_sharding(pick, mesh, 2);
    const auto hd = dax::test::random_values<double>(15, pick.rng);
    const auto hi = dax::test::random_values<int64_t>(15, pick.rng);
    const auto x = put(hd, shape, s);
    const auto n = put(hi, shape, s);
    auto each = [&](auto f) {
      std::vector<double> r(hd.size());
      for (size_t i = 0; i < r.size(); ++i) r[i] = f(hd[i]);
      return r;
    };
    const auto e = host(dax::exp(x * 0.01));
    const auto g = host(dax::gelu(x / 10.0));
    const auto sg = host(dax::sigmoid(-x));
    const auto r = host(dax::relu(x - 3.0));
    const auto q = host(dax::sqrt(dax::abs(x) + 1.0));
    const auto sq = host(dax::square(n));
    const auto cast = host(dax::astype<int32_t>(x * 2.0));
    auto acc = x;
    acc += x;
    acc *= 3.0;
    const auto acc_h = host(acc);
    if (!mesh.contains(dax::test::world_rank())) continue;
    // Transcendental results within the ULPs of tests/common/ulp.hpp (CUDA's libm and FMA
    // contraction differ from glibc in the last bits); relu, sqrt of these values exact.
    CHECK(dax::test::ulp_mismatch(e, each([](double v) { return std::exp(v * 0.01); }), "exp") == "");
    CHECK(dax::test::ulp_mismatch(g, each([](double v) {
                                    const double u = v / 10.0;
                                    return 0.5 * u * (1.0 + std::tanh(0.7978845608028654 * (u + 0.044715 * u * u * u)));
                                  }),
                                  "gelu", 1, each([](double v) { return v / 10.0; })) == "");
    CHECK(dax::test::ulp_mismatch(sg, each([](double v) { return 1.0 / (1.0 + std::exp(v)); }), "sigmoid") == "");
    CHECK(r == each([](double v) { return v - 3.0 > 0 ? v - 3.0 : 0.0; }));
    CHECK(q == each([](double v) { return std::sqrt(std::abs(v) + 1.0); }));  // IEEE sqrt: correctly rounded
    CHECK(acc_h == each([](double v) { return (v + v) * 3.0; }));
    for (size_t i = 0; i < hi.size(); ++i) {
      CHECK(sq[i] == hi[i] * hi[i]);
      CHECK(cast[i] == int32_t(hd[i] * 2.0));
    }
  }
}

TEMPLATE_TEST_CASE("reductions over random dimensions, exact on uneven pieces", "[ops][reduction]", double, float,
                   int64_t) {
  using T = TestType;
  Pick pick;
  for (int trial = 0; trial < 20; ++trial) {
    const Shape shape{5, 3, 4};
    const Mesh& mesh = random_mesh(pick);
    const auto s = random_sharding(pick, mesh, 3);
    const auto h = dax::test::random_values<T>(60, pick.rng);
    const auto x = put(h, shape, s);
    std::vector<int> dims;
    for (int d = 0; d < 3; ++d)
      if (pick(2)) dims.push_back(d);
    const bool keep = pick(2);
    INFO("trial " << trial << " " << s << " dims " << dims.size() << " keepdims " << keep);
    const auto su = dax::sum(x, dims, keep), mx = dax::max(x, dims, keep), mn = dax::min(x, dims, keep);
    const auto me = dax::mean(x, dims, keep);
    const auto hs = host(su), hmx = host(mx), hmn = host(mn), hme = host(me);
    if (!mesh.contains(dax::test::world_rank())) continue;
    // Reference: fold over the reduced dimensions.
    std::vector<bool> red(3, dims.empty());
    for (int d : dims) red[d] = true;
    Shape out;
    for (int d = 0; d < 3; ++d)
      if (!red[d]) out.push_back(shape[d]);
      else if (keep) out.push_back(1);
    std::vector<T> rs(dax::numel(out), T(0)), rmx(dax::numel(out), std::numeric_limits<T>::lowest()),
        rmn(dax::numel(out), std::numeric_limits<T>::max());
    int64_t count = 1;
    for (int d = 0; d < 3; ++d) count *= red[d] ? shape[d] : 1;
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 4; ++k) {
          int64_t o = 0;
          const int64_t idx[3] = {i, j, k};
          for (int d = 0; d < 3; ++d)
            if (!red[d]) o = o * shape[d] + idx[d];
          const T v = h[(i * 3 + j) * 4 + k];
          rs[o] += v;
          rmx[o] = std::max(rmx[o], v);
          rmn[o] = std::min(rmn[o], v);
        }
    CHECK(su.shape() == out);
    CHECK(hs == rs);
    CHECK(hmx == rmx);
    CHECK(hmn == rmn);
    if constexpr (std::is_floating_point_v<T>)
      for (size_t o = 0; o < rs.size(); ++o) CHECK(hme[o] == rs[o] / T(count));  // an exact sum, one IEEE division
  }
}

TEST_CASE("sums of unreduced values, and reduce-scatter on request", "[ops][reduction]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  const int r = dax::test::world_rank();
  std::vector<float> part(12);
  for (int i = 0; i < 12; ++i) part[i] = float((r + 1) * (i - 5));
  const auto u = dax::from_local(part, {4, 3}, NamedSharding(mesh, P().with_unreduced("x")));
  const float k = float(n * (n + 1) / 2);
  const auto twice = (u + u) * 0.5f;  // stays unreduced: no communication until the sum
  CHECK(twice.sharding().is_unreduced());
  const auto rows = dax::sum(twice, {1});
  std::vector<float> want(4);
  for (int i = 0; i < 4; ++i) want[i] = k * float((3 * i - 5) + (3 * i - 4) + (3 * i - 3));
  CHECK(host(rows) == want);
  const auto all = dax::arange<float>({4 * n, 2}, NamedSharding(mesh, P()));
  dax::comm_stats().reset();
  const auto scattered = dax::sum(dax::from_local(all.local_to_host(), {4 * n, 2}, NamedSharding(mesh, P().with_unreduced("x"))),
                                  {1}, false, NamedSharding(mesh, P("x")));
  if (n > 1) CHECK(dax::comm_stats().of("reduce_scatter").calls == 1);
  std::vector<float> col(4 * n);
  for (int i = 0; i < 4 * n; ++i) col[i] = float(n) * float(4 * i + 1);
  CHECK(host(scattered) == col);
}

TEST_CASE("integer division reduces partial sums first", "[ops][elementwise]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  // Every rank holds 1: the value is n, and n / 2 is not the sum of the halves 1 / 2 = 0.
  const auto u = dax::from_local(std::vector<int64_t>{1, 1}, {2}, NamedSharding(mesh, P().with_unreduced("x")));
  CHECK((u / int64_t(2)).to_host() == std::vector<int64_t>{n / 2, n / 2});
  CHECK_FALSE((u / int64_t(2)).sharding().is_unreduced());
  const auto f = dax::from_local(std::vector<double>{1, 1}, {2}, NamedSharding(mesh, P().with_unreduced("x")));
  CHECK((f / 2.0).sharding().is_unreduced());  // exact for floats: stays a partial sum
  CHECK((f / 2.0).to_host() == std::vector<double>{n / 2.0, n / 2.0});
}

TEMPLATE_TEST_CASE("matmul on random shardings: 1-d, 2-d and batched with broadcasting", "[ops][matmul]", float,
                   double, int32_t, int64_t) {
  using T = TestType;
  Pick pick;
  struct Case { Shape a, b; };
  const std::vector<Case> cases{{{6, 5}, {5, 4}}, {{7, 3}, {3, 9}}, {{2, 4, 3}, {3, 5}}, {{2, 4, 3}, {2, 3, 5}},
                                {{3, 1, 4, 2}, {5, 2, 3}}, {{5}, {5, 3}}, {{4, 5}, {5}}, {{6}, {6}}};
  for (int trial = 0; trial < 24; ++trial) {
    const Case& c = cases[trial % cases.size()];
    const Mesh& mesh = random_mesh(pick);
    const auto sa = random_sharding(pick, mesh, c.a.size()), sb = random_sharding(pick, mesh, c.b.size());
    const auto ha = dax::test::random_values<T>(dax::numel(c.a), pick.rng);
    const auto hb = dax::test::random_values<T>(dax::numel(c.b), pick.rng);
    INFO("trial " << trial << " " << dax::to_string(c.a) << " " << sa << " @ " << dax::to_string(c.b) << " " << sb);
    const auto got = dax::matmul(put(ha, c.a, sa), put(hb, c.b, sb));
    const auto h = host(got);
    if (!mesh.contains(dax::test::world_rank())) continue;
    // Reference: promote 1-d operands, loop over the broadcast batch.
    Shape a2 = c.a, b2 = c.b;
    if (a2.size() == 1) a2.insert(a2.begin(), 1);
    if (b2.size() == 1) b2.push_back(1);
    const int64_t m = a2[a2.size() - 2], k = a2.back(), nn = b2.back();
    const Shape ab(a2.begin(), a2.end() - 2), bb(b2.begin(), b2.end() - 2);
    const Shape batch = dax::detail::broadcast_shapes({ab, bb});
    std::vector<T> want;
    for (int64_t t = 0; t < dax::numel(batch); ++t) {
      const int64_t ta = source_index(ab, batch, t), tb = source_index(bb, batch, t);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < nn; ++j) {
          T acc = 0;
          for (int64_t l = 0; l < k; ++l) acc += ha[(ta * m + i) * k + l] * hb[(tb * k + l) * nn + j];
          want.push_back(acc);
        }
    }
    CHECK(h == want);
  }
}

TEST_CASE("matmul communicates what its rule promises", "[ops][matmul][comm_stats]") {
  const int n = dax::test::world_size();
  std::mt19937 rng(9);
  {  // data parallel: row-sharded @ replicated -> nothing moves
    const Mesh mesh({n}, {"data"});
    const auto x = put(dax::test::random_values<float>(8 * n * 6, rng), {8 * n, 6}, NamedSharding(mesh, P("data")));
    const auto w = put(dax::test::random_values<float>(6 * 4, rng), {6, 4}, NamedSharding(mesh, P()));
    dax::comm_stats().reset();
    const auto y = dax::matmul(x, w);
    CHECK(dax::comm_stats().total_bytes() == 0);
    if (n > 1) CHECK(y.sharding() == NamedSharding(mesh, P("data")));
  }
  {  // model parallel: replicated @ column-sharded -> nothing moves
    const Mesh mesh({n}, {"model"});
    const auto x = put(dax::test::random_values<float>(8 * 6, rng), {8, 6}, NamedSharding(mesh, P()));
    const auto w = put(dax::test::random_values<float>(6 * 4 * n, rng), {6, 4 * n}, NamedSharding(mesh, P(dax::none, "model")));
    dax::comm_stats().reset();
    const auto y = dax::matmul(x, w);
    CHECK(dax::comm_stats().total_bytes() == 0);
    if (n > 1) CHECK(y.sharding() == NamedSharding(mesh, P(dax::none, "model")));
  }
  if (n >= 4) {  // 2-d: P('data','model') @ P('model', None) -> one reduction over 'model' only
    const Mesh mesh({2, 2}, {"data", "model"});
    const auto x = put(dax::test::random_values<float>(8 * 6, rng), {8, 6}, NamedSharding(mesh, P("data", "model")));
    const auto w = put(dax::test::random_values<float>(6 * 4, rng), {6, 4}, NamedSharding(mesh, P("model", dax::none)));
    dax::comm_stats().reset();
    const auto y = dax::matmul(x, w);
    if (dax::test::world_rank() < 4) {
      CHECK(dax::comm_stats().total_calls() == 1);
      CHECK(dax::comm_stats().of("all_reduce", "('model',)").calls == 1);
      CHECK(y.sharding() == NamedSharding(mesh, P("data")));
    }
  }
  if (n >= 2) {  // K split on A, B replicated and narrow: B sliced for free, the product all-reduced
    const Mesh mesh({n}, {"x"});
    const auto a = put(dax::test::random_values<float>(16 * 8 * n, rng), {16, 8 * n}, NamedSharding(mesh, P(dax::none, "x")));
    const auto b = put(dax::test::random_values<float>(8 * n * 2, rng), {8 * n, 2}, NamedSharding(mesh, P()));
    dax::comm_stats().reset();
    const auto y = dax::matmul(a, b);
    CHECK(dax::comm_stats().total_calls() == 1);
    CHECK(dax::comm_stats().of("all_reduce").calls == 1);
    // With an out sharding splitting rows over 'x', the reduction becomes a reduce-scatter.
    dax::comm_stats().reset();
    const auto z = dax::matmul(a, b, NamedSharding(mesh, P("x")));
    CHECK(dax::comm_stats().of("reduce_scatter").calls == 1);
    CHECK(host(z) == host(y));
  }
}

TEST_CASE("argmax and argmin along split and unsplit dimensions, first index on ties", "[ops][reduction]") {
  Pick pick;
  for (int trial = 0; trial < 30; ++trial) {
    const Shape shape{4, 7, 3};
    const Mesh& mesh = random_mesh(pick);
    const auto s = random_sharding(pick, mesh, 3);
    std::vector<int32_t> h(84);
    for (auto& v : h) v = static_cast<int32_t>(pick(6));  // many ties
    const int axis = static_cast<int>(pick(3));
    const auto x = put(h, shape, s);
    INFO("trial " << trial << " " << s << " axis " << axis);
    const auto amax = host(dax::argmax(x, axis)), amin = host(dax::argmin(x, axis, true));
    if (!mesh.contains(dax::test::world_rank())) continue;
    std::vector<int64_t> want_max, want_min;
    const int64_t len = shape[axis];
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 7; ++j)
        for (int64_t k = 0; k < 3; ++k) {
          const int64_t idx[3] = {i, j, k};
          if (idx[axis] != 0) continue;
          int64_t bmax = 0, bmin = 0;
          for (int64_t t = 0; t < len; ++t) {
            int64_t at[3] = {i, j, k};
            at[axis] = t;
            const int32_t v = h[(at[0] * 7 + at[1]) * 3 + at[2]];
            at[axis] = bmax;
            if (v > h[(at[0] * 7 + at[1]) * 3 + at[2]]) bmax = t;
            at[axis] = bmin;
            if (v < h[(at[0] * 7 + at[1]) * 3 + at[2]]) bmin = t;
          }
          want_max.push_back(bmax);
          want_min.push_back(bmin);
        }
    CHECK(amax == want_max);
    CHECK(amin == want_min);
  }
}

TEST_CASE("argmax and argmin: a NaN wins over every number, the first NaN among several (NumPy)",
          "[ops][reduction]") {
  Pick pick;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int trial = 0; trial < 30; ++trial) {
    const Shape shape{5, 9};
    const Mesh& mesh = random_mesh(pick);
    const auto s = random_sharding(pick, mesh, 2);
    std::vector<float> h(45);
    for (auto& v : h) v = static_cast<float>(pick(5)) - 2.0f;  // ties
    for (int k = static_cast<int>(pick(6)); k > 0; --k) h[pick(45)] = nan;
    const int axis = static_cast<int>(pick(2));
    const auto x = put(h, shape, s);
    INFO("trial " << trial << " " << s << " axis " << axis);
    const auto amax = host(dax::argmax(x, axis)), amin = host(dax::argmin(x, axis));
    if (!mesh.contains(dax::test::world_rank())) continue;
    std::vector<int64_t> want_max, want_min;
    const int64_t lines = axis == 0 ? 9 : 5, len = shape[axis];
    for (int64_t line = 0; line < lines; ++line) {
      const auto at = [&](int64_t t) { return axis == 0 ? h[t * 9 + line] : h[line * 9 + t]; };
      int64_t first_nan = -1, bmax = 0, bmin = 0;  // the extremes matter only without a NaN
      for (int64_t t = 0; t < len; ++t) {
        if (std::isnan(at(t)) && first_nan < 0) first_nan = t;
        if (at(t) > at(bmax)) bmax = t;
        if (at(t) < at(bmin)) bmin = t;
      }
      want_max.push_back(first_nan >= 0 ? first_nan : bmax);
      want_min.push_back(first_nan >= 0 ? first_nan : bmin);
    }
    CHECK(amax == want_max);
    CHECK(amin == want_min);
  }
}

TEST_CASE("argmax and argmin of a bool array (comparison results)", "[ops][reduction]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  const NamedSharding s(mesh, P("x"));
  const std::vector<float> v{1, 3, 0, 5, 5, 2};
  const auto above = dax::device_put(v, {6}, s) > dax::full<float>({6}, 2.5f, s);  // F T F T T F
  CHECK(host(dax::argmax(above, 0)) == std::vector<int64_t>{1});
  CHECK(host(dax::argmin(above, 0)) == std::vector<int64_t>{0});
}

TEST_CASE("explain for elementwise ops and sums", "[ops][explain]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  const auto a = dax::zeros<float>({8 * n, 4}, NamedSharding(mesh, P("x")));
  const auto b = dax::zeros<float>({4}, NamedSharding(mesh, P()));
  CHECK(dax::explain_elementwise(a, b) ==
        dax::detail::cat("elementwise -> (", 8 * n, ", 4) P('x', None)\n  operand 0 (", 8 * n,
                         ", 4) P('x') -> P('x', None): 0 bytes/device\n  operand 1 (4,) P() -> P(None): 0 bytes/device\n"
                         "  total 0 bytes/device, ~", dax::detail::time_text(32 / dax::cost_model().flops_per_s),
                         " estimated\n"));  // one FLOP per element: 0.64 ns on the CPU model, less on CUDA's
  if (dax::cost_model() == dax::cpu_cost_model()) CHECK(dax::detail::time_text(32 / dax::cost_model().flops_per_s) == "0.64 ns");
  const std::string s = dax::explain_sum(a, {0});
  CHECK(s.find("sum: local partial sums P(None, unreduced={'x'})") == 0);
  if (n > 1) CHECK(s.find("all_reduce over ('x',)") != std::string::npos);
}
