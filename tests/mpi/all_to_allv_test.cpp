// all_to_allv in shard_map (uneven rows per member, a mixture of experts' dispatch): rows sent to
// random members in random counts (zero included), scaled by the receiver and sent back, against
// the same computed on the host; the gradient through both exchanges; the bytes (the rows that
// leave their device); the counts' checks.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;

TEST_CASE("all_to_allv sends uneven rows there and back, with their gradient", "[collectives][all_to_allv]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"i"});
  // Every member's send counts, the same on every rank: member r sends counts[r][j] rows to j.
  std::mt19937 rng(77 + unsigned(n));
  std::vector<std::vector<int64_t>> counts(static_cast<size_t>(n), std::vector<int64_t>(static_cast<size_t>(n)));
  int64_t most = 0;
  for (auto& row : counts) {
    int64_t total = 0;
    for (auto& c : row) total += (c = int64_t(rng() % 4));  // 0..3, zeros included
    most = std::max(most, total);
  }
  // Each member's block has `most` rows of width 3; the rows past its own total are padding kept
  // at home (sent to itself last), so every block has one shape.
  const int64_t width = 3;
  std::vector<double> x(size_t(n * most * width));
  for (auto& v : x) v = std::uniform_real_distribution<double>(-1, 1)(rng);
  std::vector<double> w(x.size());
  for (auto& v : w) v = std::uniform_real_distribution<double>(-1, 1)(rng);
  auto sends = [&](int r) {
    std::vector<int64_t> c = counts[size_t(r)];
    int64_t total = 0;
    for (int64_t v : c) total += v;
    c[size_t(r)] += most - total;  // the padding stays here
    return c;
  };
  // Where each row goes (host reference): member r's rows in order, counts[r][j] to member j.
  std::vector<double> factor(size_t(n * most));
  for (int r = 0; r < n; ++r) {
    const auto c = sends(r);
    int64_t row = 0;
    for (int j = 0; j < n; ++j)
      for (int64_t k = 0; k < c[size_t(j)]; ++k) factor[size_t(r * most + row++)] = j + 1;
  }
  auto body = [&](const DistArray<double>& xb) {
    const int me = dax::axis_index("i");
    const std::vector<int64_t> c = sends(me);
    const auto arrived = dax::all_to_allv(xb, "i", c);
    const auto back = dax::all_to_allv(arrived * double(me + 1), "i", dax::all_to_allv_counts(c, "i"), c);
    return back;
  };
  const auto f = dax::shard_map(body, mesh, {P("i")}, P("i"));
  const auto xs = dax::device_put(x, {n * most, width}, NamedSharding(mesh, P("i")));
  dax::comm_stats().reset();
  const auto y = f(xs).to_host();
  int64_t left = 0;  // rows this rank receives from others, out and back
  {
    const int me = dax::test::world_rank();
    for (int r = 0; r < n; ++r)
      if (r != me) left += sends(r)[size_t(me)] + sends(me)[size_t(r)];
  }
  CHECK(dax::comm_stats().of("all_to_allv").bytes == (n > 1 ? left * width * int64_t(sizeof(double)) : 0));
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == Approx(x[i] * factor[i / size_t(width)]).margin(1e-14));

  const auto ws = dax::device_put(w, {n * most, width}, NamedSharding(mesh, P("i")));
  const auto g = dax::grad([&](const DistArray<double>& a) { return dax::sum(f(a) * ws); })(xs).to_host();
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(g[i] == Approx(w[i] * factor[i / size_t(width)]).margin(1e-14));
}

TEST_CASE("all_to_allv's counts are checked on every member", "[collectives][all_to_allv]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"i"});
  const auto xs = dax::zeros<double>({2 * n, 1}, NamedSharding(mesh, P("i")));
  auto wrong_total = dax::shard_map(
      [&](const DistArray<double>& xb) {
        std::vector<int64_t> c(size_t(n), 0);
        c[0] = 3;  // 3 rows of a block of 2
        return dax::all_to_allv(xb, "i", c, std::vector<int64_t>(size_t(n), 0));
      },
      mesh, {P("i")}, P("i"));
  CHECK_THROWS_WITH(wrong_total(xs), Catch::Contains("the send counts add up to 3 rows, but x has 2"));
  auto wrong_size = dax::shard_map(
      [&](const DistArray<double>& xb) { return dax::all_to_allv(xb, "i", {2, 0, 0, 0, 0, 0, 0, 0, 0}); }, mesh,
      {P("i")}, P("i"));
  CHECK_THROWS_WITH(wrong_size(xs), Catch::Contains("expected " + std::to_string(n) + " send counts"));
}
