// The op sharding rules, pure: for every pair of input shardings on 1-d and 2-d meshes of up to 8
// devices, the matmul rule's choice costs no more than any legal candidate, and running it on
// simulated devices (local products, then the planned reshard of the partial sums) gives A @ B.
#include <catch2/catch.hpp>

#include <random>

#include <dax/ops/elementwise_rule.hpp>
#include <dax/ops/matmul_rule.hpp>
#include "../common/meshes.hpp"
#include "../common/simulate.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;

namespace {

std::vector<double> global_matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k,
                                  int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) c[i * n + j] += a[i * k + l] * b[l * n + j];
  return c;
}

// Simulates the chosen candidate on every device and compares with the pieces of A @ B.
bool matmul_rule_is_right(const dax::detail::MatmulRule& rule, const Shape& as, const Shape& bs,
                          const std::vector<double>& a, const std::vector<double>& b) {
  const auto& c = rule.best();
  const int64_t m = as[0], k = as[1], n = bs[1];
  const auto ap = dax::test::pieces_of_value(as, a, c.a), bp = dax::test::pieces_of_value(bs, b, c.b);
  dax::test::Buffers partial;
  for (int d : c.out.mesh().devices()) {
    const auto co = c.out.mesh().coords(d);
    const dax::Box ab = c.a.box_at(co, as), bb = c.b.box_at(co, bs);
    partial[d] = global_matmul(ap.at(d), bp.at(d), ab[0].size(), ab[1].size(), bb[1].size());
  }
  const auto plan = dax::detail::plan_reshard(rule.out_shape, c.out, rule.target);
  for (const auto& step : plan.steps)
    if (!dax::test::simulate_step(rule.out_shape, step, partial)) return false;
  return partial == dax::test::pieces_of_value(rule.out_shape, global_matmul(a, b, m, k, n), rule.target);
}

}  // namespace

TEST_CASE("matmul rule: cheapest legal candidate, right result, every pair of specs", "[ops][matmul]") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> dist(-9, 9);
  const std::vector<Mesh> meshes{Mesh({2}, {"x"}), Mesh({3}, {"x"}), Mesh({4}, {"x"}), Mesh({8}, {"x"}),
                                 Mesh({2, 2}, {"x", "y"}), Mesh({2, 3}, {"x", "y"}), Mesh({4, 2}, {"x", "y"})};
  int checked = 0;
  for (const Mesh& mesh : meshes) {
    for (const auto& [as, bs] : std::vector<std::pair<Shape, Shape>>{{{8, 6}, {6, 4}}, {{5, 7}, {7, 3}}}) {
      std::vector<double> a(dax::numel(as)), b(dax::numel(bs));
      for (auto& v : a) v = dist(rng);
      for (auto& v : b) v = dist(rng);
      const auto specs = dax::test::all_shardings(mesh, 2, false);
      for (const NamedSharding& sa : specs) {
        for (const NamedSharding& sb : specs) {
          const auto rule = dax::detail::matmul_rule(as, sa, bs, sb, std::nullopt, false, false);
          for (const auto& c : rule.candidates) REQUIRE(rule.best().total() <= c.total());
          REQUIRE_FALSE(rule.target.is_unreduced());
          INFO(dax::detail::explain_matmul_rule(rule, as, bs, 8));
          REQUIRE(matmul_rule_is_right(rule, as, bs, a, b));
          ++checked;
        }
      }
    }
  }
  CHECK(checked > 500);
}

TEST_CASE("matmul rule: the textbook choices", "[ops][matmul]") {
  const Mesh mesh({4}, {"x"});
  auto s = [&](P p) { return NamedSharding(mesh, p); };
  // Contraction split on A, B replicated and narrow: B is sliced for free and the product is
  // all-reduced (gathering A would move more).
  const auto k = dax::detail::matmul_rule({64, 256}, s(P(dax::none, "x")), {256, 16}, s(P()), std::nullopt, false, false);
  CHECK(k.best().a_cost == 0);
  CHECK(k.best().b_cost == 0);
  CHECK(k.best().out.unreduced_axes() == std::vector<int>{0});
  CHECK(k.best().out_cost == 2 * 3 * 64 * 16 / 4);  // the all-reduce of the (64, 16) result
  // Both split on their first dimension: the smaller operand is the one gathered.
  const auto b_small = dax::detail::matmul_rule({128, 32}, s(P("x")), {32, 64}, s(P("x")), std::nullopt, false, false);
  CHECK(b_small.best().roles == std::vector<int>{0});  // x -> M: A stays, B (smaller) is gathered
  CHECK(b_small.best().b_cost == 3 * 32 * 64 / 4);
  const auto a_small = dax::detail::matmul_rule({64, 32}, s(P("x")), {32, 128}, s(P("x")), std::nullopt, false, false);
  CHECK(a_small.best().roles == std::vector<int>{1});  // x -> N: A (smaller) is gathered
  CHECK(a_small.best().a_cost == 3 * 64 * 32 / 4);
}

TEST_CASE("elementwise rule: the output follows the operand costliest to move", "[ops][elementwise]") {
  const Mesh mesh({4}, {"x"});
  auto s = [&](P p) { return NamedSharding(mesh, p); };
  using dax::detail::Linearity;
  // A big row-sharded matrix plus a replicated row vector: the vector is sliced, nothing moves.
  const auto r = dax::detail::elementwise_rule({{64, 32}, {32}}, {s(P("x")), s(P())}, Linearity::additive);
  CHECK(r.output == s(P("x")));
  CHECK(r.inputs[1] == s(P()));
  CHECK(r.elements == 0);
  // Column-sharded vector broadcast over rows: it is gathered (the small one moves).
  const auto c = dax::detail::elementwise_rule({{64, 32}, {32}}, {s(P("x")), s(P("x"))}, Linearity::none);
  CHECK(c.output == s(P("x")));
  CHECK(c.elements == 24);
  // Sums of partial sums over the same axes stay unreduced; a product with a plain array too.
  const auto u = dax::detail::elementwise_rule({{8}, {8}}, {s(P().with_unreduced("x")), s(P().with_unreduced("x"))},
                                               Linearity::additive);
  CHECK(u.output == s(P().with_unreduced("x")));
  CHECK(u.elements == 0);
  const auto m = dax::detail::elementwise_rule({{8}, {8}}, {s(P().with_unreduced("x")), s(P())}, Linearity::scaling);
  CHECK(m.output == s(P().with_unreduced("x")));
  const auto n = dax::detail::elementwise_rule({{8}, {8}}, {s(P().with_unreduced("x")), s(P())}, Linearity::additive);
  CHECK_FALSE(n.output.is_unreduced());  // partial + plain is not exact: reduced first
  CHECK(n.elements == 2 * 3 * 8 / 4);
}
