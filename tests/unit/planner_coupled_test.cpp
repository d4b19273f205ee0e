// Moves where one mesh axis splits one dimension while another dimension is re-split
// (P('x','y') -> P(('x','y')): y leaves dimension 1 and refines dimension 0; P('x') -> P('y','x'):
// x leaves dimension 0 for dimension 1 while y takes dimension 0). The planner samples such
// groups of dimensions rather than visiting every device (reshard/piece_math.hpp); here it must
// equal the brute-force oracle on every 2-d and 3-d mesh of up to 8 devices, on random ones of up
// to 64 and on long axes of up to 400, uneven, short and empty extents included; and on a
// 16,384-device mesh it must take a bounded number of samples.
#include <catch2/catch.hpp>

#include <random>

#include <dax/reshard/planner.hpp>
#include "../common/meshes.hpp"
#include "../common/oracle_planner.hpp"
#include "../common/plan_compare.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::describe;
using dax::test::same_plan;

namespace {

using Pairs = std::vector<std::pair<P, P>>;

// On meshes with axes x and y: one re-split dimension coupled to another by one axis (sampled),
// and a few where two re-split dimensions share axes (every coordinate), for contrast.
Pairs pairs_2d() {
  using dax::axes;
  using dax::none;
  return {{P("x", "y"), P(axes("x", "y"))},         // finer target drifting off the coarse grid
          {P(axes("x", "y")), P("x", "y")},         // finer source
          {P("y", "x"), P(axes("y", "x"))},         // the same with the axes' roles swapped
          {P("x"), P("y", "x")},                    // unrelated source, x joins dimension 1
          {P("y", "x"), P("x")},                    // and back
          {P(none, "y"), P("y", "x")},              // unrelated target, y leaves dimension 1
          {P("x", "y"), P("y")},                    // unrelated target, y leaves dimension 1
          {P("x", "y"), P("y", "x")},               // two re-split dimensions
          {P(axes("y", "x")), P("x", "y")},         // overlapping axes, neither refines
          {P("x").with_unreduced("y"), P("y", "x")}};  // with a reduction
}

// On meshes with axes x, y and z (rank-3 arrays).
Pairs pairs_3d() {
  using dax::axes;
  using dax::none;
  return {{P("x", "y", "z"), P(axes("x", "y"), none, "z")},
          {P(axes("x", "y"), none, "z"), P("x", "y", "z")},
          {P("x", none, "z"), P("y", "x", "z")},
          {P("z", "x"), P(axes("z", "x", "y"))},  // two added axes: every coordinate
          {P("x", "z"), P(axes("x", "z"), "y")},
          {P("x", "y").with_unreduced("z"), P(axes("x", "y"), "z")},
          {P(axes("x", "y"), "z"), P("z", axes("x", "y"))}};
}

// Compares one pair on `mesh` for `shape`; checks the data on simulated devices when asked.
void compare(const Mesh& mesh, const Shape& shape, const P& a, const P& b, bool check_data, std::mt19937& rng) {
  const NamedSharding src(mesh, a), dst(mesh, b);
  const auto got = dax::detail::plan_reshard(shape, src, dst);
  const auto want = dax::oracle::plan_reshard(shape, src, dst);
  INFO(to_string(mesh) << " " << dax::to_string(shape) << " " << to_string(src.spec()) << " -> "
                       << to_string(dst.spec()) << "\nnew:\n" << describe(got) << "oracle:\n" << describe(want));
  REQUIRE(same_plan(got, want));
  if (check_data) REQUIRE(dax::test::plan_is_right(got, rng));
}

}  // namespace

TEST_CASE("coupled re-splits equal the oracle on every 2-d and 3-d mesh of up to 8 devices",
          "[reshard][oracle][coupled]") {
  std::mt19937 rng(8);
  int64_t compared = 0;
  for (const Mesh& mesh : dax::test::all_meshes()) {
    if (mesh.num_axes() < 2) continue;
    for (const Shape& shape : std::vector<Shape>{{3, 5}, {8, 7}, {13, 3}, {1, 2}, {0, 4}, {5, 0}, {10, 3, 2}})
      for (const auto& [a, b] : pairs_2d()) {
        compare(mesh, shape, a, b, true, rng);
        ++compared;
      }
    if (mesh.num_axes() < 3) continue;
    for (const Shape& shape : std::vector<Shape>{{5, 3, 2}, {7, 1, 4}, {9, 6, 0}, {2, 11, 3}})
      for (const auto& [a, b] : pairs_3d()) {
        compare(mesh, shape, a, b, true, rng);
        ++compared;
      }
  }
  CHECK(compared > 500);
}

TEST_CASE("coupled re-splits equal the oracle on random meshes of up to 64 devices", "[reshard][oracle][coupled][exhaustive]") {
  // Long, short and size-1 axes: 2-d meshes up to 32 x 2 and 2 x 32, 3-d ones up to 64 devices.
  std::mt19937 rng(64);
  std::uniform_int_distribution<int> axis(1, 32), extent(0, 90);
  int64_t compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const bool three = trial % 3 == 2;
    Shape mesh_shape = three ? Shape{axis(rng) / 4 + 1, axis(rng) / 4 + 1, axis(rng) / 8 + 1} : Shape{axis(rng), axis(rng)};
    int64_t devices = 1;
    for (int64_t s : mesh_shape) devices *= s;
    if (devices > 64) continue;
    const Mesh mesh = three ? Mesh(mesh_shape, {"x", "y", "z"}) : Mesh(mesh_shape, {"x", "y"});
    const Shape shape = three ? Shape{extent(rng), extent(rng) / 3, extent(rng) / 9} : Shape{extent(rng), extent(rng) / 3};
    for (const auto& [a, b] : three ? pairs_3d() : pairs_2d()) {
      compare(mesh, shape, a, b, trial % 10 == 0, rng);
      ++compared;
    }
  }
  CHECK(compared > 900);
}

TEST_CASE("coupled re-splits equal the oracle on long axes of up to 400 devices", "[reshard][oracle][coupled][exhaustive]") {
  // Axes long enough that the samples are a small part of the devices: the coarse pieces of a
  // drifting split near its thresholds, the values near the coupled dimension's representatives.
  std::mt19937 rng(400);
  std::uniform_int_distribution<int> axis(8, 40), extent(0, 600);
  int64_t compared = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const bool three = trial % 4 == 3;
    Shape mesh_shape = three ? Shape{axis(rng) / 2, axis(rng) / 2, 2} : Shape{axis(rng), axis(rng)};
    int64_t devices = 1;
    for (int64_t s : mesh_shape) devices *= s;
    if (devices > 400) continue;
    const Mesh mesh = three ? Mesh(mesh_shape, {"x", "y", "z"}) : Mesh(mesh_shape, {"x", "y"});
    // Extents around multiples of the device count make chunks of 1-3 elements drift the most.
    const int64_t n0 = trial % 2 ? extent(rng) : devices * (1 + trial % 3) + trial % 7;
    const Shape shape = three ? Shape{n0, extent(rng) / 20, 3} : Shape{n0, extent(rng) / 10};
    for (const auto& [a, b] : three ? pairs_3d() : pairs_2d()) {
      compare(mesh, shape, a, b, trial % 20 == 0, rng);
      ++compared;
    }
  }
  CHECK(compared > 200);
}

TEST_CASE("drifting splits over a long coarse axis equal the oracle", "[reshard][oracle][coupled][exhaustive]") {
  // A finer split whose uneven chunks drift off the coarse grid: one coarse axis of up to 41
  // pieces, extents around multiples of the device count, where the fine pieces run out well
  // before the coarse ones and the coarse pieces near the fine thresholds decide the bytes.
  std::mt19937 rng(41);
  int64_t compared = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const int64_t pc = 2 + rng() % 40, kx = 2 + rng() % 12;
    if (pc * kx > 500) continue;
    const Mesh mesh({pc, kx}, {"x", "y"});
    const int64_t devices = pc * kx, jitter = static_cast<int64_t>(rng() % (2 * kx + 3)) - kx;
    const int64_t n0 = std::max<int64_t>(0, rng() % 3 == 0 ? rng() % 2000 : devices * static_cast<int64_t>(1 + rng() % 4) + jitter);
    const int64_t n1 = std::max<int64_t>(0, rng() % 2 ? rng() % 40 : kx * static_cast<int64_t>(1 + rng() % 3) + static_cast<int64_t>(rng() % 5) - 2);
    for (const auto& [a, b] : Pairs{{P("x", "y"), P(dax::axes("x", "y"))},
                                    {P("x"), P(dax::axes("x", "y"))},
                                    {P(dax::axes("x", "y")), P("x", "y")},
                                    {P(dax::axes("x", "y")), P("x")}}) {
      compare(mesh, Shape{n0, n1}, a, b, trial % 25 == 0, rng);
      ++compared;
    }
  }
  CHECK(compared > 300);
}

TEST_CASE("coupled re-splits are decided on a bounded number of samples", "[reshard][coupled]") {
  // 128 x 128 devices: every coordinate would be 16,384 samples of the coupled group.
  const Mesh mesh({128, 128}, {"x", "y"});
  const Shape shape{8 * 16384 + 3, 8 * 16384 + 5};
  for (const auto& [a, b] : Pairs{{P("x", "y"), P(dax::axes("x", "y"))}, {P("x"), P("y", "x")}}) {
    const dax::detail::StepGeometry g(shape, NamedSharding(mesh, a), NamedSharding(mesh, b));
    REQUIRE(g.num_groups() == 1);
    CHECK(g.num_samples(0) < 1000);
  }
}
