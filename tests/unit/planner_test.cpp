// The planner against the general exchange, by simulating every device in one process.
#include <catch2/catch.hpp>

#include <dax/reshard/explain.hpp>
#include <dax/reshard/planner.hpp>
#include "../common/meshes.hpp"
#include "../common/simulate.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::StepKind;

namespace {

dax::ReshardPlan plan(const Shape& shape, const NamedSharding& a, const NamedSharding& b) {
  return dax::detail::plan_reshard(shape, a, b);
}

std::vector<StepKind> kinds(const dax::ReshardPlan& p) {
  std::vector<StepKind> out;
  for (const auto& s : p.steps) out.push_back(s.kind);
  return out;
}

// Runs `p` on simulated devices holding random partials of its source; true when every device
// ends with exactly its expected target piece.
bool plan_is_right(const dax::ReshardPlan& p, std::mt19937& rng) {
  const auto partials = dax::test::random_partials(p.shape, p.src, rng);
  auto buffers = dax::test::pieces_of_partials(p.shape, partials, p.src);
  for (const auto& step : p.steps)
    if (!dax::test::simulate_step(p.shape, step, buffers)) return false;
  return buffers == dax::test::expected_pieces(p.shape, partials, p.dst);
}

}  // namespace

TEST_CASE("textbook reshards take the textbook step", "[reshard]") {
  const Mesh mesh({4}, {"x"});
  auto s = [&](P spec) { return NamedSharding(mesh, spec); };
  const auto gather = plan({16, 8}, s(P("x")), s(P()));
  CHECK(kinds(gather) == std::vector{StepKind::all_gather});
  CHECK(gather.elements == 96);  // 3 of 4 row blocks of 4x8
  CHECK(gather.lower_bound == 96);
  CHECK(kinds(plan({16, 8}, s(P("x")), s(P(dax::none, "x")))) == std::vector{StepKind::all_to_all});
  CHECK(plan({16, 8}, s(P("x")), s(P(dax::none, "x"))).elements == 24);
  CHECK(kinds(plan({16, 8}, s(P()), s(P(dax::none, "x")))) == std::vector{StepKind::local_slice});
  CHECK(plan({16, 8}, s(P()), s(P(dax::none, "x"))).elements == 0);
  CHECK(kinds(plan({16, 8}, s(P("x")), s(P("x", dax::none)))).empty());
  const auto ar = plan({16, 8}, s(P().with_unreduced("x")), s(P()));
  CHECK(kinds(ar) == std::vector{StepKind::all_reduce});
  CHECK(ar.elements == 2 * 3 * 128 / 4);
  const auto rs = plan({16, 8}, s(P().with_unreduced("x")), s(P("x")));
  CHECK(kinds(rs) == std::vector{StepKind::reduce_scatter});
  CHECK(rs.elements == 3 * 32);
  CHECK(kinds(plan({16, 8}, s(P()), s(P().with_unreduced("x")))) == std::vector{StepKind::make_unreduced});

  const Mesh grid({2, 2}, {"x", "y"});
  auto g = [&](P spec) { return NamedSharding(grid, spec); };
  // Gathering only over the axis that splits: 'y' groups stay apart.
  const auto cols = plan({8, 8}, g(P("x", "y")), g(P("x")));
  CHECK(kinds(cols) == std::vector{StepKind::all_gather});
  CHECK(cols.steps[0].axes == std::vector{1});
  // The quickstart's reshard: both axes take part in one all-to-all.
  const auto qs = plan({10, 7}, g(P("x", "y")), g(P(dax::none, dax::axes("x", "y"))));
  CHECK(kinds(qs) == std::vector{StepKind::all_to_all});
  CHECK(qs.steps[0].axes == std::vector{0, 1});
  CHECK(qs.elements == qs.lower_bound);
  // Unreduced over 'y', target split over 'y' and 'x': reduce-scatter, then move.
  const auto rs2 = plan({8, 8}, g(P("x").with_unreduced("y")), g(P("x", "y")));
  CHECK(kinds(rs2) == std::vector{StepKind::reduce_scatter});
  CHECK(rs2.steps[0].axes == std::vector{1});
}

TEST_CASE("explain prints steps, bytes and the bound", "[reshard]") {
  const Mesh mesh({2, 2}, {"data", "model"});
  const auto p = plan({8, 4}, NamedSharding(mesh, P("data")), NamedSharding(mesh, P()));
  CHECK(dax::detail::explain_plan(p, 4) ==
        "reshard (8, 4) P('data') -> P() on Mesh('data': 2, 'model': 2)\n"
        "  1. all_gather over ('data',) -> P(None, None): 64 bytes/device\n"
        "  total 64 bytes/device, lower bound 64, general exchange 64\n");
}

TEST_CASE("reshards between different meshes are refused", "[reshard]") {
  const NamedSharding a(Mesh({2}, {"x"}), P("x"));
  const NamedSharding b(Mesh({2}, {"y"}), P("y"));
  CHECK_THROWS_WITH(plan({4}, a, b), "reshard: source and target must be on the same mesh, got "
                                     "Mesh('x': 2) and Mesh('y': 2)");
}

// The exhaustive check: every mesh of 1-8 devices with 1-3 axes, shapes of rank 0-3 (uneven and
// empty among them), every pair of shardings (unreduced included): the plan gives every device
// its exact target piece, the general exchange alone does too, the plan never receives more than
// the general exchange, and plans without reduction sit at the lower bound.
TEST_CASE("every plan agrees with the general exchange", "[reshard][exhaustive]") {
  std::mt19937 rng(2026);
  int64_t plans = 0;
  for (const Mesh& mesh : dax::test::all_meshes()) {
    std::vector<Shape> shapes{{}, {6}, {5}, {0}, {4, 6}, {3, 5}};
    shapes.push_back({2, 3, 5});
    for (const Shape& shape : shapes) {
      const auto shardings = dax::test::all_shardings(mesh, shape.size(), true);
      for (const NamedSharding& src : shardings) {
        for (const NamedSharding& dst : shardings) {
          const auto p = plan(shape, src, dst);
          INFO(dax::detail::explain_plan(p, 1));
          REQUIRE(plan_is_right(p, rng));
          REQUIRE(p.elements <= p.general_exchange_elements);
          REQUIRE(p.lower_bound <= p.elements);
          if (!src.is_unreduced()) REQUIRE(p.elements == p.lower_bound);
          ++plans;
        }
      }
    }
  }
  INFO(plans << " plans checked");
  CHECK(plans > 50000);
}

TEST_CASE("the general exchange alone is always right", "[reshard][exhaustive]") {
  std::mt19937 rng(11);
  for (const Mesh& mesh : dax::test::all_meshes()) {
    if (mesh.size() > 6) continue;
    for (const Shape& shape : std::vector<Shape>{{5}, {3, 4}}) {
      const auto shardings = dax::test::all_shardings(mesh, shape.size(), true);
      for (const NamedSharding& src : shardings) {
        for (const NamedSharding& dst : shardings) {
          std::vector<int> kept;
          for (int a : src.unreduced_axes())
            if (dst.is_unreduced_over(a)) kept.push_back(a);
          const auto mid = dax::detail::with_unreduced_axes(dst, shape.size(), kept);
          dax::ReshardPlan p{shape, src, dst, {*dax::detail::plan_general_exchange(shape, src, mid)}, 0, 0, 0};
          if (!(mid == dst)) p.steps.push_back(*dax::detail::plan_make_unreduced(shape, mid, dst));
          REQUIRE(plan_is_right(p, rng));
        }
      }
    }
  }
}
