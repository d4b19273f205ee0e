// The 16-bit element types, dax::half and dax::bfloat16, on random shardings at every rank count.
// Resharding and the collectives (2-byte MPI types, user-defined reduction ops) must keep every
// bit; elementwise ops and matmul compute in float and round once, so each result is compared bit
// for bit with the same float computation done here; sums accumulate in float.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "helpers.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::host;
using dax::test::Pick;
using dax::test::random_mesh;
using dax::test::random_sharding;

namespace {

/// The raw 16-bit patterns, so that comparisons see -0 vs +0 and every rounding difference.
template <class T>
std::vector<uint16_t> bits(const std::vector<T>& v) {
  static_assert(sizeof(T) == 2);
  std::vector<uint16_t> out(v.size());
  if (!v.empty()) std::memcpy(out.data(), v.data(), v.size() * sizeof(T));
  return out;
}

/// Values over many binades, signs mixed: what a reshard must move without touching.
template <class T>
std::vector<T> spread_values(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> mantissa(0.f, 1.f);
  std::uniform_int_distribution<int> binade(-12, 12);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(std::ldexp(mantissa(rng), binade(rng)));
  return v;
}

/// Small integers: their sums and products stay exact in bfloat16's 8 significand bits as long as
/// they stay within 256, so any grouping of a sum gives the same bits.
template <class T>
std::vector<T> small_ints(int64_t n, std::mt19937& rng, int bound) {
  std::uniform_int_distribution<int> dist(-bound, bound);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

template <class T>
T round_to(float v) {
  return static_cast<T>(v);
}

}  // namespace

TEMPLATE_TEST_CASE("16-bit arrays reshard bit-exactly between random shardings", "[float16][reshard]", dax::half,
                   dax::bfloat16) {
  using T = TestType;
  Pick pick(1616);
  for (int trial = 0; trial < 40; ++trial) {
    const Shape shape{5, 7};
    const Mesh& mesh = random_mesh(pick);
    const auto from = random_sharding(pick, mesh, 2), to = random_sharding(pick, mesh, 2);
    const auto h = spread_values<T>(35, pick.rng);
    INFO("trial " << trial << " " << from << " -> " << to);
    const auto x = dax::device_put(h, shape, from);
    CHECK(x.dtype() == dax::dtype_v<T>);
    const auto y = dax::reshard(x, to);
    const auto got = host(y);
    if (!mesh.contains(dax::test::world_rank())) continue;
    CHECK(bits(got) == bits(h));
  }
}

TEMPLATE_TEST_CASE("16-bit elementwise ops compute in float and round once", "[float16][elementwise]", dax::half,
                   dax::bfloat16) {
  using T = TestType;
  Pick pick(1616);
  for (int trial = 0; trial < 12; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape shape{6, 5};
    const auto sa = random_sharding(pick, mesh, 2), sb = random_sharding(pick, mesh, 2);
    const auto ha = spread_values<T>(30, pick.rng), hb = spread_values<T>(30, pick.rng);
    const auto a = dax::device_put(ha, shape, sa), b = dax::device_put(hb, shape, sb);
    INFO("trial " << trial << " " << sa << " and " << sb);
    const auto sum = host(a + b), quotient = host(a / b), scaled = host(a * 0.3), top = host(dax::maximum(a, b));
    const auto e = host(dax::exp(a / 64.0)), t = host(dax::tanh(a)), g = host(dax::gelu(b)),
               r = host(dax::sqrt(dax::abs(a)));
    const auto less = host(a < b);
    const auto wide = host(dax::astype<float>(a));
    if (!mesh.contains(dax::test::world_rank())) continue;
    std::vector<T> want_sum, want_quotient, want_scaled, want_top, want_e, want_t, want_g, want_r;
    std::vector<bool> want_less;
    std::vector<float> want_wide;
    for (int i = 0; i < 30; ++i) {
      const float x = static_cast<float>(ha[i]), y = static_cast<float>(hb[i]);
      want_sum.push_back(round_to<T>(x + y));
      want_quotient.push_back(round_to<T>(x / y));
      want_scaled.push_back(round_to<T>(x * static_cast<float>(T(0.3))));  // the scalar is a T first
      want_top.push_back(round_to<T>(x > y ? x : y));
      want_e.push_back(round_to<T>(std::exp(static_cast<float>(round_to<T>(x / 64.f)))));
      want_t.push_back(round_to<T>(std::tanh(x)));
      want_g.push_back(round_to<T>(0.5f * y * (1.f + std::tanh(0.7978845608028654f * (y + 0.044715f * y * y * y)))));
      want_r.push_back(round_to<T>(std::sqrt(std::fabs(x))));
      want_less.push_back(x < y);
      want_wide.push_back(x);
    }
    CHECK(bits(sum) == bits(want_sum));
    CHECK(bits(quotient) == bits(want_quotient));
    CHECK(bits(scaled) == bits(want_scaled));
    CHECK(bits(top) == bits(want_top));
    CHECK(bits(e) == bits(want_e));
    CHECK(bits(t) == bits(want_t));
    CHECK(bits(g) == bits(want_g));
    CHECK(bits(r) == bits(want_r));
    CHECK(less == want_less);
    CHECK(wide == want_wide);
  }
}

TEMPLATE_TEST_CASE("16-bit reductions over random dimensions and shardings", "[float16][reduction]", dax::half,
                   dax::bfloat16) {
  using T = TestType;
  Pick pick(1616);
  for (int trial = 0; trial < 20; ++trial) {
    const Shape shape{5, 3, 4};
    const Mesh& mesh = random_mesh(pick);
    const auto s = random_sharding(pick, mesh, 3);
    const auto h = small_ints<T>(60, pick.rng, 4);  // |sum| <= 240: exact in any order
    const auto x = dax::device_put(h, shape, s);
    std::vector<int> dims;
    for (int d = 0; d < 3; ++d)
      if (pick(2)) dims.push_back(d);
    INFO("trial " << trial << " " << s << " dims " << dims.size());
    const auto su = host(dax::sum(x, dims)), mx = host(dax::max(x, dims)), mn = host(dax::min(x, dims)),
               me = host(dax::mean(x, dims));
    if (!mesh.contains(dax::test::world_rank())) continue;
    std::vector<bool> red(3, dims.empty());
    for (int d : dims) red[d] = true;
    int64_t outputs = 1, count = 1;
    for (int d = 0; d < 3; ++d) (red[d] ? count : outputs) *= shape[d];
    std::vector<float> rs(outputs, 0.f), rmx(outputs, -1e9f), rmn(outputs, 1e9f);
    for (int64_t i = 0; i < 60; ++i) {
      const int64_t idx[3] = {i / 12, i / 4 % 3, i % 4};
      int64_t o = 0;
      for (int d = 0; d < 3; ++d)
        if (!red[d]) o = o * shape[d] + idx[d];
      const float v = static_cast<float>(h[i]);
      rs[o] += v;
      rmx[o] = std::max(rmx[o], v);
      rmn[o] = std::min(rmn[o], v);
    }
    std::vector<T> ws, wmx, wmn, wme;
    for (int64_t o = 0; o < outputs; ++o) {
      ws.push_back(round_to<T>(rs[o]));
      wmx.push_back(round_to<T>(rmx[o]));
      wmn.push_back(round_to<T>(rmn[o]));
      wme.push_back(round_to<T>(rs[o] / static_cast<float>(count)));
    }
    CHECK(bits(su) == bits(ws));
    CHECK(bits(mx) == bits(wmx));
    CHECK(bits(mn) == bits(wmn));
    CHECK(bits(me) == bits(wme));
  }
}

TEMPLATE_TEST_CASE("16-bit sums accumulate in float; means never overflow", "[float16][reduction]", dax::half,
                   dax::bfloat16) {
  using T = TestType;
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  // Folding 4096 ones in the 16-bit type sticks at 2048 (half) or 256 (bfloat16).
  const auto ones = dax::ones<T>({4096, 2}, NamedSharding(mesh, P(dax::none, "x")));
  CHECK(bits(host(dax::sum(ones, {0}))) == bits(std::vector<T>(2, T(4096))));
  // 70000 > 65504, half's largest value: the sum would overflow, the mean must not.
  const auto many = dax::full<T>({70000}, T(0.5), NamedSharding(mesh, P("x")));
  CHECK(bits(host(dax::mean(many))) == bits(std::vector<T>{T(0.5)}));
}

TEMPLATE_TEST_CASE("16-bit partial sums all-reduce and reduce-scatter through MPI's user ops",
                   "[float16][reduction][comm_stats]", dax::half, dax::bfloat16) {
  using T = TestType;
  const int n = dax::test::world_size(), r = dax::test::world_rank();
  const Mesh mesh({n}, {"x"});
  std::vector<T> part(8 * n);
  for (int i = 0; i < 8 * n; ++i) part[i] = T(static_cast<float>((r + 1) * (i % 5 - 2)));
  const auto u = dax::from_local(part, {8 * n}, NamedSharding(mesh, P().with_unreduced("x")));
  const float k = static_cast<float>(n * (n + 1) / 2);
  std::vector<T> want(8 * n);
  for (int i = 0; i < 8 * n; ++i) want[i] = T(k * static_cast<float>(i % 5 - 2));
  dax::comm_stats().reset();
  CHECK(bits(host(dax::reshard(u, NamedSharding(mesh, P())))) == bits(want));
  CHECK(bits(host(dax::reshard(u, NamedSharding(mesh, P("x"))))) == bits(want));
  if (n > 1) {
    CHECK(dax::comm_stats().of("all_reduce").calls == 1);
    CHECK(dax::comm_stats().of("reduce_scatter").calls == 1);
  }
  // max and min of a split array combine the pieces' results with the user ops too.
  std::vector<T> h(6 * n);
  for (int i = 0; i < 6 * n; ++i) h[i] = T(static_cast<float>(((i * 7) % 11) - 5) * 0.375f);
  const auto x = dax::device_put(h, {6 * n}, NamedSharding(mesh, P("x")));
  CHECK(bits(host(dax::max(x))) == bits(std::vector<T>{T(5 * 0.375f)}));
  CHECK(bits(host(dax::min(x))) == bits(std::vector<T>{T(-5 * 0.375f)}));
}

TEMPLATE_TEST_CASE("16-bit matmul multiplies in float on random shardings", "[float16][matmul]", dax::half,
                   dax::bfloat16) {
  using T = TestType;
  Pick pick(1616);
  struct Case { Shape a, b; };
  const std::vector<Case> cases{{{6, 5}, {5, 4}}, {{7, 3}, {3, 9}}, {{2, 4, 3}, {3, 5}}};
  for (int trial = 0; trial < 12; ++trial) {
    const Case& c = cases[trial % cases.size()];
    const Mesh& mesh = random_mesh(pick);
    const auto sa = random_sharding(pick, mesh, c.a.size()), sb = random_sharding(pick, mesh, c.b.size());
    const auto ha = small_ints<T>(dax::numel(c.a), pick.rng, 5), hb = small_ints<T>(dax::numel(c.b), pick.rng, 5);
    INFO("trial " << trial << " " << sa << " @ " << sb);
    const auto got = host(dax::matmul(dax::device_put(ha, c.a, sa), dax::device_put(hb, c.b, sb)));
    if (!mesh.contains(dax::test::world_rank())) continue;
    const int64_t batch = c.a.size() == 3 ? c.a[0] : 1, m = c.a[c.a.size() - 2], k = c.a.back(), nn = c.b.back();
    std::vector<T> want;
    for (int64_t t = 0; t < batch; ++t)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < nn; ++j) {
          float acc = 0;  // |acc| <= 5 * 25 = 125: exact, whatever the grouping
          for (int64_t l = 0; l < k; ++l)
            acc += static_cast<float>(ha[(t * m + i) * k + l]) * static_cast<float>(hb[l * nn + j]);
          want.push_back(round_to<T>(acc));
        }
    CHECK(bits(got) == bits(want));
  }
  // 4096 products of ones: accumulated in the 16-bit type they would stick at 2048 (half) or 256
  // (bfloat16); accumulated in float and rounded once they come to 4096.
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  const auto a = dax::ones<T>({2, 4096}, NamedSharding(mesh, P()));
  const auto b = dax::ones<T>({4096, 3}, NamedSharding(mesh, P()));
  CHECK(bits(host(dax::matmul(a, b))) == bits(std::vector<T>(6, T(4096))));
}

TEMPLATE_TEST_CASE("16-bit argmax/argmin, astype and random", "[float16][random]", dax::half, dax::bfloat16) {
  using T = TestType;
  Pick pick(1616);
  for (int trial = 0; trial < 10; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const auto s = random_sharding(pick, mesh, 2);
    const auto h = small_ints<T>(21, pick.rng, 3);  // many ties
    const auto x = dax::device_put(h, {3, 7}, s);
    INFO("trial " << trial << " " << s);
    const auto am = host(dax::argmax(x, 1)), an = host(dax::argmin(x, 0));
    const auto as_int = host(dax::astype<int32_t>(x));
    if (!mesh.contains(dax::test::world_rank())) continue;
    std::vector<int64_t> wm, wn;
    for (int i = 0; i < 3; ++i) {
      int best = 0;
      for (int j = 1; j < 7; ++j)
        if (static_cast<float>(h[i * 7 + j]) > static_cast<float>(h[i * 7 + best])) best = j;
      wm.push_back(best);
    }
    for (int j = 0; j < 7; ++j) {
      int best = 0;
      for (int i = 1; i < 3; ++i)
        if (static_cast<float>(h[i * 7 + j]) < static_cast<float>(h[best * 7 + j])) best = i;
      wn.push_back(best);
    }
    std::vector<int32_t> wi;
    for (T v : h) wi.push_back(static_cast<int32_t>(static_cast<float>(v)));
    CHECK(am == wm);
    CHECK(an == wn);
    CHECK(as_int == wi);
  }
  // Uniform values use as many random bits as T's significand holds: exact multiples of 2^-11
  // (half) or 2^-8 (bfloat16) in [0, 1), the same for every sharding.
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  const auto key = dax::random::key(7);
  const auto split = host(dax::random::uniform<T>(key, {3 * n, 100}, NamedSharding(mesh, P("x"))));
  const auto whole = host(dax::random::uniform<T>(key, {3 * n, 100}, NamedSharding(mesh, P())));
  CHECK(bits(split) == bits(whole));
  const float step = std::is_same_v<T, dax::half> ? 2048.f : 256.f;
  std::set<float> distinct;
  for (T v : split) {
    const float f = static_cast<float>(v);
    CHECK(f >= 0.f);
    CHECK(f < 1.f);
    CHECK(f * step == std::floor(f * step));
    distinct.insert(f);
  }
  CHECK(distinct.size() > 100);
  const auto z = host(dax::random::normal<T>(key, {4096}, NamedSharding(mesh, P("x"))));
  double mean = 0, square = 0;
  for (T v : z) mean += static_cast<float>(v) / 4096.0, square += double(static_cast<float>(v)) * static_cast<float>(v) / 4096.0;
  CHECK(std::abs(mean) < 0.05);
  CHECK(std::abs(square - 1.0) < 0.1);
}
