// transpose, expand_dims, squeeze, broadcast_to, softmax and friends, and random arrays that are
// the same for every sharding and rank count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "../common/ulp.hpp"
#include "helpers.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;

using dax::test::host;

TEST_CASE("transpose moves the spec with the dimensions and communicates nothing", "[ops][shape]") {
  std::mt19937 rng(12);
  for (const Mesh& mesh : dax::test::meshes_that_fit()) {
    const Shape shape{3, 4, 5};
    const auto h = dax::test::random_values<float>(60, rng);
    for (const NamedSharding& s : dax::test::all_shardings(mesh, 3, false)) {
      const auto x = dax::device_put(h, shape, s);
      dax::comm_stats().reset();
      const auto t = dax::transpose(x, {2, 0, 1});
      const auto tt = x.T();
      CHECK(dax::comm_stats().total_bytes() == 0);
      CHECK(t.shape() == Shape{5, 3, 4});
      CHECK(t.sharding().dim_axes(0) == s.dim_axes(2));
      if (!mesh.contains(dax::test::world_rank())) continue;
      const auto ht = t.to_host(), htt = tt.to_host();
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 4; ++j)
          for (int k = 0; k < 5; ++k) {
            REQUIRE(ht[(k * 3 + i) * 4 + j] == h[(i * 4 + j) * 5 + k]);
            REQUIRE(htt[(k * 4 + j) * 3 + i] == h[(i * 4 + j) * 5 + k]);
          }
    }
  }
}

TEST_CASE("expand_dims, squeeze and broadcast_to", "[ops][shape]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  std::vector<double> h(3 * n);
  for (size_t i = 0; i < h.size(); ++i) h[i] = double(i) - 2.5;
  const auto x = dax::device_put(h, {3 * n}, NamedSharding(mesh, P("x")));
  const auto e = dax::expand_dims(x, 0);
  CHECK(e.shape() == Shape{1, 3 * n});
  CHECK(e.to_host() == h);
  CHECK(dax::squeeze(e).shape() == Shape{3 * n});
  const auto b = dax::broadcast_to(x, {2, 3 * n});
  std::vector<double> want(h);
  want.insert(want.end(), h.begin(), h.end());
  CHECK(b.to_host() == want);
  CHECK(b.sharding() == NamedSharding(mesh, P(dax::none, "x")));
}

TEST_CASE("softmax, log_softmax and logsumexp", "[ops][reduction]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  std::mt19937 rng(3);
  const Shape shape{4, 2 * n + 1};
  const auto h = dax::test::random_values<double>(dax::numel(shape), rng);
  for (const auto& spec : {P("x"), P(dax::none, "x")}) {
    const auto x = dax::device_put(h, shape, NamedSharding(mesh, spec));
    const auto sm = dax::softmax(x).to_host(), lsm = dax::log_softmax(x).to_host();
    const auto lse = dax::logsumexp(x, {1}).to_host();
    const int64_t cols = shape[1];
    // The reference sums in order; dax sums each piece, then the pieces: within the ULPs of
    // tests/common/ulp.hpp for a sum of `cols` terms (log_softmax, logsumexp at their terms' scale).
    std::vector<double> want_sm(h.size()), want_lsm(h.size()), lsm_scale(h.size()), want_lse(4), lse_scale(4);
    for (int i = 0; i < 4; ++i) {
      double mx = -1e300, total = 0;
      for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, h[i * cols + j]);
      for (int64_t j = 0; j < cols; ++j) total += std::exp(h[i * cols + j] - mx);
      want_lse[i] = mx + std::log(total);
      lse_scale[i] = std::max(std::abs(mx), 1.0);
      for (int64_t j = 0; j < cols; ++j) {
        want_sm[i * cols + j] = std::exp(h[i * cols + j] - mx) / total;
        want_lsm[i * cols + j] = h[i * cols + j] - mx - std::log(total);
        // dax computes x - (max + log(sum)): both terms are rounded at their own magnitude.
        lsm_scale[i * cols + j] = std::max({std::abs(h[i * cols + j]), std::abs(mx), 1.0});
      }
    }
    CHECK(dax::test::ulp_mismatch(sm, want_sm, "softmax", cols) == "");
    CHECK(dax::test::ulp_mismatch(lsm, want_lsm, "log_softmax", cols, lsm_scale) == "");
    CHECK(dax::test::ulp_mismatch(lse, want_lse, "logsumexp", cols, lse_scale) == "");
  }
}

TEST_CASE("random arrays are the same for every sharding and rank count", "[random]") {
  const auto k = dax::random::key(2026);
  const auto keys = dax::random::split(k, 2);
  CHECK_FALSE(keys[0] == keys[1]);
  const Shape shape{7, 5};
  // The reference: one device holding everything.
  const Mesh one({1}, {"x"});
  const auto ref_u = host(dax::random::uniform<float>(keys[0], shape, NamedSharding(one, P())));
  const auto ref_n = host(dax::random::normal<double>(keys[1], shape, NamedSharding(one, P())));
  const auto ref_b = host(dax::random::bernoulli(keys[0], 0.3, shape, NamedSharding(one, P())));
  int in_range = 0, heads = 0;
  if (dax::test::world_rank() == 0) {
    for (float v : ref_u) in_range += v >= 0.0f && v < 1.0f;
    for (bool v : ref_b) heads += v;
    CHECK(in_range == 35);
    CHECK(heads > 2);
    CHECK(heads < 25);
  }
  for (const Mesh& mesh : dax::test::meshes_that_fit()) {
    for (const NamedSharding& s : dax::test::all_shardings(mesh, 2, false)) {
      const auto u = host(dax::random::uniform<float>(keys[0], shape, s));
      const auto nn = host(dax::random::normal<double>(keys[1], shape, s));
      if (!mesh.contains(dax::test::world_rank()) || dax::test::world_rank() != 0) continue;
      REQUIRE(u == ref_u);
      REQUIRE(nn == ref_n);
    }
  }
}

TEST_CASE("reshape keeps major splits without communicating, gathers the rest", "[ops][shape]") {
  std::mt19937 rng(21);
  const std::vector<std::pair<Shape, Shape>> cases{{{4, 6}, {24}}, {{4, 6}, {2, 2, 6}}, {{24}, {4, 6}},
                                                   {{2, 3, 4}, {6, 4}}, {{6, 1, 4}, {3, 2, 4}}, {{8, 3}, {2, -1}},
                                                   {{0, 3}, {3, 0}}};
  for (const Mesh& mesh : dax::test::meshes_that_fit()) {
    for (const auto& [from, to] : cases) {
      const auto h = dax::test::random_values<int64_t>(dax::numel(from), rng);
      for (const NamedSharding& s : dax::test::all_shardings(mesh, from.size(), false)) {
        const auto x = dax::device_put(h, from, s);
        const std::string plan = dax::explain_reshape(x, to);
        dax::comm_stats().reset();
        const auto y = dax::reshape(x, to);
        if (plan.find("no communication") != std::string::npos) CHECK(dax::comm_stats().total_bytes() == 0);
        REQUIRE(y.size() == x.size());
        if (mesh.contains(dax::test::world_rank())) REQUIRE(y.to_host() == h);
      }
    }
  }
  // The textbook case: rows split 2 ways survive as the major part of a merged dimension.
  if (dax::test::world_size() >= 2) {
    const Mesh mesh({2}, {"x"});
    const auto x = dax::zeros<float>({4, 6}, NamedSharding(mesh, P("x")));
    CHECK(dax::explain_reshape(x, {24}) == "reshape (4, 6) P('x') -> (24,) P('x'): no communication (each device's piece keeps its data)\n");
    CHECK(dax::reshape(x, {24}).sharding() == NamedSharding(mesh, P("x")));
    const auto c = dax::zeros<float>({4, 6}, NamedSharding(mesh, P(dax::none, "x")));
    CHECK(dax::explain_reshape(c, {24}).find("reshards first") != std::string::npos);
  }
}

TEST_CASE("slice, concatenate and stack on random shardings", "[ops][shape]") {
  std::mt19937 rng(22);
  for (const Mesh& mesh : dax::test::meshes_that_fit()) {
    const Shape shape{5, 6};
    const auto h = dax::test::random_values<float>(30, rng);
    const auto g = dax::test::random_values<float>(30, rng);
    for (const NamedSharding& s : dax::test::all_shardings(mesh, 2, false)) {
      const auto x = dax::device_put(h, shape, s), y = dax::device_put(g, shape, s);
      const auto sl = dax::slice(x, {1, 0}, {5, 6}, {2, 1});
      const auto c0 = dax::concatenate<float>({x, y}, 0), c1 = dax::concatenate<float>({x, y}, 1);
      const auto st = dax::stack<float>({x, y}, 1);
      if (!mesh.contains(dax::test::world_rank())) continue;
      CHECK(sl.shape() == Shape{2, 6});
      std::vector<float> want_sl;
      for (int i : {1, 3})
        for (int j = 0; j < 6; ++j) want_sl.push_back(h[i * 6 + j]);
      CHECK(sl.to_host() == want_sl);
      std::vector<float> want_c0(h);
      want_c0.insert(want_c0.end(), g.begin(), g.end());
      CHECK(c0.to_host() == want_c0);
      std::vector<float> want_c1, want_st;
      for (int i = 0; i < 5; ++i) {
        for (int j = 0; j < 6; ++j) want_c1.push_back(h[i * 6 + j]);
        for (int j = 0; j < 6; ++j) want_c1.push_back(g[i * 6 + j]);
      }
      CHECK(c1.to_host() == want_c1);
      CHECK(st.shape() == Shape{5, 2, 6});
      CHECK(st.to_host() == want_c1);  // stacking on axis 1 interleaves the rows the same way
    }
  }
}
