// The symbolic planner against the brute-force one it replaced (tests/common/oracle_planner.hpp):
// on every mesh of 1-8 devices and on random meshes of up to 64, for every pair of specs (random
// pairs on the large meshes), uneven and empty shapes included, both give the same steps (kind,
// group, target, elements), the same total, lower bound and general-exchange bytes, and the plan
// gives every simulated device its exact target piece.
#include <catch2/catch.hpp>

#include <random>

#include <dax/reshard/explain.hpp>
#include <dax/reshard/planner.hpp>
#include "../common/meshes.hpp"
#include "../common/oracle_planner.hpp"
#include "../common/plan_compare.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;

namespace {

using dax::test::describe;
using dax::test::plan_is_right;
using dax::test::same_plan;

// When the planner says a step's regions are all contiguous, every device's are.
bool contiguity_is_safe(const dax::ReshardPlan& p) {
  for (const auto& step : p.steps) {
    if (step.kind == dax::StepKind::make_unreduced) continue;
    if (!dax::detail::regions_contiguous(p.shape, step.from, step.to)) continue;
    for (int d : step.from.mesh().devices()) {
      const auto ex = dax::detail::exchange_for(p.shape, step.from, step.to, step.axes, step.reduce_axes, d);
      for (size_t j = 0; j < ex.members.size(); ++j)
        if (!dax::is_contiguous_in(ex.from_block, ex.send[j]) || !dax::is_contiguous_in(ex.to_block, ex.recv[j]))
          return false;
    }
  }
  return true;
}

Mesh random_mesh(std::mt19937& rng) {
  static const std::vector<std::string> names{"a", "b", "c", "d"};
  std::uniform_int_distribution<int> axes_count(1, 4), size(1, 8);
  while (true) {
    Shape shape(axes_count(rng));
    int64_t devices = 1;
    for (auto& s : shape) devices *= (s = size(rng));
    if (devices > 64 || devices < 2) continue;
    std::vector<int> ids(devices);
    for (int i = 0; i < devices; ++i) ids[i] = i;
    if (rng() % 3 == 0) std::shuffle(ids.begin(), ids.end(), rng);
    return Mesh(shape, std::vector<std::string>(names.begin(), names.begin() + shape.size()), ids);
  }
}

NamedSharding random_sharding(const Mesh& mesh, size_t ndim, std::mt19937& rng) {
  std::vector<std::vector<int>> dims(ndim);
  std::vector<int> unreduced;
  for (int a = 0; a < mesh.num_axes(); ++a) {
    const int place = static_cast<int>(rng() % (ndim + 2));
    if (place < static_cast<int>(ndim)) dims[place].push_back(a);
    else if (place == static_cast<int>(ndim) + 1) unreduced.push_back(a);
  }
  for (auto& d : dims) std::shuffle(d.begin(), d.end(), rng);
  return dax::detail::make_sharding(mesh, dims, unreduced);
}

}  // namespace

TEST_CASE("symbolic plans equal the brute-force oracle on every small mesh", "[reshard][oracle][exhaustive]") {
  std::mt19937 rng(17);
  int64_t plans = 0;
  for (const Mesh& mesh : dax::test::all_meshes()) {
    for (const Shape& shape : std::vector<Shape>{{}, {6}, {5}, {0}, {1}, {4, 6}, {3, 5}, {7, 2}, {2, 3, 5}}) {
      const auto shardings = dax::test::all_shardings(mesh, shape.size(), true);
      for (const NamedSharding& src : shardings)
        for (const NamedSharding& dst : shardings) {
          const auto got = dax::detail::plan_reshard(shape, src, dst);
          const auto want = dax::oracle::plan_reshard(shape, src, dst);
          INFO("new:\n" << describe(got) << "oracle:\n" << describe(want));
          REQUIRE(same_plan(got, want));
          REQUIRE(contiguity_is_safe(got));
          ++plans;
        }
    }
  }
  INFO(plans << " plans compared");
  CHECK(plans > 50000);
}

TEST_CASE("symbolic plans equal the oracle on random meshes of up to 64 devices", "[reshard][oracle][exhaustive]") {
  std::mt19937 rng(64);
  std::uniform_int_distribution<int> rank(0, 3), extent(0, 13);
  for (int trial = 0; trial < 4000; ++trial) {
    const Mesh mesh = random_mesh(rng);
    Shape shape(rank(rng));
    for (auto& n : shape) n = extent(rng);
    const NamedSharding src = random_sharding(mesh, shape.size(), rng), dst = random_sharding(mesh, shape.size(), rng);
    const auto got = dax::detail::plan_reshard(shape, src, dst);
    const auto want = dax::oracle::plan_reshard(shape, src, dst);
    INFO(to_string(mesh) << "\nnew:\n" << describe(got) << "oracle:\n" << describe(want));
    REQUIRE(same_plan(got, want));
    if (trial % 8 == 0) {
      REQUIRE(plan_is_right(got, rng));
      REQUIRE(contiguity_is_safe(got));
    }
  }
}

TEST_CASE("uneven splits whose chunks drift are planned exactly", "[reshard][oracle][exhaustive]") {
  // 10 rows split 4 ways (chunks of 3) then 8 ways (chunks of 2): the finer chunks do not nest.
  const Mesh mesh({4, 2}, {"x", "y"});
  auto s = [&](P spec) { return NamedSharding(mesh, spec); };
  for (const Shape& shape : std::vector<Shape>{{10, 3}, {13, 5}, {3, 10}}) {
    for (const auto& [a, b] : std::vector<std::pair<P, P>>{{P("x"), P(dax::axes("x", "y"))},
                                                          {P(dax::axes("x", "y")), P("x")},
                                                          {P("x"), P("y")},
                                                          {P(dax::axes("y", "x")), P(dax::axes("x", "y"))},
                                                          {P("x").with_unreduced("y"), P(dax::axes("x", "y"))}}) {
      const auto got = dax::detail::plan_reshard(shape, s(a), s(b));
      const auto want = dax::oracle::plan_reshard(shape, s(a), s(b));
      INFO("new:\n" << describe(got) << "oracle:\n" << describe(want));
      CHECK(same_plan(got, want));
    }
  }
}

TEST_CASE("moves between unrelated axes equal the oracle on meshes of up to 400 devices",
          "[reshard][oracle][exhaustive]") {
  // One dimension split by one axis going to another (P('x') -> P('y')), alone or with the axis
  // it leaves moving to another dimension (P('x') -> P('y', 'x')), on 2-d and 3-d meshes with
  // axes of up to 20 devices and uneven, short and empty extents: the planner samples these by
  // their piece sizes and boundaries, not by every coordinate, so the axes must be long enough
  // that the samples are a small part of the devices.
  std::mt19937 rng(400);
  std::uniform_int_distribution<int> axis(2, 20), extent(0, 70);
  int64_t compared = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const bool three = trial % 3 == 2;
    Shape mesh_shape{axis(rng), axis(rng)};
    if (three) mesh_shape = {axis(rng) / 3 + 1, axis(rng) / 3 + 1, axis(rng) / 2 + 1};
    int64_t devices = 1;
    for (int64_t s : mesh_shape) devices *= s;
    if (devices > 400) continue;
    const Mesh mesh = three ? Mesh(mesh_shape, {"x", "y", "z"}) : Mesh(mesh_shape, {"x", "y"});
    auto s = [&](P spec) { return NamedSharding(mesh, spec); };
    const Shape shape{extent(rng), extent(rng) / 5};
    std::vector<std::pair<P, P>> pairs{{P("x"), P("y")},
                                       {P("y"), P("x")},
                                       {P("x"), P("y", "x")},
                                       {P(dax::none, "y"), P("y", "x")},
                                       {P("x").with_unreduced("y"), P("y")},
                                       {P("x", "y"), P("y", "x")}};
    if (three) {
      pairs.push_back({P(dax::axes("x", "y")), P("z")});
      pairs.push_back({P("z"), P(dax::axes("y", "x"), "z")});
    }
    for (const auto& [a, b] : pairs) {
      const auto got = dax::detail::plan_reshard(shape, s(a), s(b));
      const auto want = dax::oracle::plan_reshard(shape, s(a), s(b));
      INFO(to_string(mesh) << " " << dax::to_string(shape) << "\nnew:\n" << describe(got) << "oracle:\n" << describe(want));
      REQUIRE(same_plan(got, want));
      if (trial % 10 == 0) REQUIRE(plan_is_right(got, rng));
      ++compared;
    }
  }
  INFO(compared << " plans compared");
  CHECK(compared > 500);
}
