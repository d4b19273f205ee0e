// The GPU kernels' launch shapes (backend/launch_shape.hpp), checked on the CPU: within CUDA's grid
// limits for any size, nothing launched for empty sizes, and the grid-stride loops the kernels run
// over a shape visit every item exactly once, simulated here with the kernels' own 64-bit steps.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <dax/backend/launch_shape.hpp>

using dax::detail::block_grid;
using dax::detail::GridShape;
using dax::detail::loop_grid;

namespace {

constexpr int64_t two_to(int e) { return int64_t{1} << e; }

/// How often each of [0, items) is visited by `for (i = block * per_block + t; i < items; i +=
/// blocks * per_block)` over every block and thread: the loop of the 1-d kernels.
std::vector<int> visits_of_loop(int64_t items, int64_t blocks, int64_t per_block) {
  std::vector<int> seen(static_cast<size_t>(items), 0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t t = 0; t < per_block; ++t)
      for (int64_t i = b * per_block + t; i < items; i += blocks * per_block) ++seen[static_cast<size_t>(i)];
  return seen;
}

/// How often each of [0, n) is visited by `for (i = block; i < n; i += grid)`: one dimension of the
/// 3-d kernels (the tiled transpose), over every block index of that dimension.
std::vector<int> visits_of_dimension(int64_t n, int64_t grid) {
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (int64_t b = 0; b < grid; ++b)
    for (int64_t i = b; i < n; i += grid) ++seen[static_cast<size_t>(i)];
  return seen;
}

bool all_once(const std::vector<int>& seen) {
  for (int v : seen)
    if (v != 1) return false;
  return true;
}

bool within_limits(const GridShape& g) {
  return g.x >= 1 && g.x <= dax::detail::max_grid_x && g.y >= 1 && g.y <= dax::detail::max_grid_yz && g.z >= 1 &&
         g.z <= dax::detail::max_grid_yz;
}

}  // namespace

TEST_CASE("launch shapes: CUDA's limits are the documented ones", "[backend][launch]") {
  STATIC_REQUIRE(dax::detail::max_grid_x == 2147483647);
  STATIC_REQUIRE(dax::detail::max_grid_yz == 65535);
  STATIC_REQUIRE(dax::detail::block_threads <= 1024);
  STATIC_REQUIRE(dax::detail::max_loop_blocks <= dax::detail::max_grid_x);
}

TEST_CASE("launch shapes: empty sizes launch nothing", "[backend][launch]") {
  CHECK(loop_grid(0).empty());
  CHECK(loop_grid(-3).empty());
  CHECK(loop_grid(0, 1).empty());
  CHECK(loop_grid(0) == GridShape{});
  CHECK(block_grid(0).empty());
  CHECK(block_grid(5, 0, 7).empty());
  CHECK(block_grid(5, 7, 0).empty());
  CHECK(block_grid(70000, 70000, 0) == GridShape{0, 0, 0});
  CHECK(block_grid(0, 1, 1).blocks() == 0);
}

TEST_CASE("launch shapes: small grid-stride loops get one block per block of items", "[backend][launch]") {
  CHECK(loop_grid(1) == GridShape{1, 1, 1});
  CHECK(loop_grid(256) == GridShape{1, 1, 1});
  CHECK(loop_grid(257) == GridShape{2, 1, 1});
  CHECK(loop_grid(1000, 1) == GridShape{1000, 1, 1});
  CHECK(loop_grid(dax::detail::max_loop_blocks * 256) == GridShape{dax::detail::max_loop_blocks, 1, 1});
  CHECK(loop_grid(dax::detail::max_loop_blocks * 256 + 1).x == dax::detail::max_loop_blocks);
  CHECK(loop_grid(5, 0).x == 5);  // a nonsensical 0 items per block is taken as 1, never a division by 0
}

TEST_CASE("launch shapes: sizes past 2^31 and 2^32 elements stay within the grid limits", "[backend][launch]") {
  for (int64_t items : {two_to(31) - 1, two_to(31), two_to(31) + 1, two_to(32) - 1, two_to(32), two_to(32) + 7,
                        two_to(40) + 3, two_to(62)}) {
    for (int64_t per_block : {int64_t{1}, int64_t{dax::detail::block_threads}, int64_t{1024}}) {
      INFO(items << " items, " << per_block << " per block");
      const GridShape g = loop_grid(items, per_block);
      REQUIRE(within_limits(g));
      CHECK(g.x == dax::detail::max_loop_blocks);
      // The kernels step in int64_t: the last step from any item below `items` must not wrap.
      const int64_t step = g.x * per_block;
      CHECK(items - 1 <= std::numeric_limits<int64_t>::max() - step);
    }
  }
  CHECK(within_limits(loop_grid(std::numeric_limits<int64_t>::max())));
}

TEST_CASE("launch shapes: 3-d grids past 65535 in y and z are clamped, the kernels loop", "[backend][launch]") {
  CHECK(block_grid(1, 1, 1) == GridShape{1, 1, 1});
  CHECK(block_grid(3, 65535, 65535) == GridShape{3, 65535, 65535});
  CHECK(block_grid(3, 65536, 65536) == GridShape{3, 65535, 65535});
  CHECK(block_grid(70000, 70000, 70000) == GridShape{70000, 65535, 65535});
  CHECK(block_grid(two_to(31) - 1, 2, 3) == GridShape{two_to(31) - 1, 2, 3});
  CHECK(block_grid(two_to(31), 2, 3) == GridShape{two_to(31) - 1, 2, 3});
  CHECK(block_grid(two_to(40), two_to(40), two_to(40)) ==
        GridShape{dax::detail::max_grid_x, dax::detail::max_grid_yz, dax::detail::max_grid_yz});

  // The tiled transpose of a (2^22 + 5, 1000) half array (more than 2^32 elements): 131073 tile rows.
  const int64_t rows = two_to(22) + 5, cols = 1000, tile = 32;
  const GridShape g = block_grid(dax::detail::ceil_div(cols, tile), dax::detail::ceil_div(rows, tile), 1);
  CHECK(g == GridShape{32, 65535, 1});
  // Each dimension's loop visits every tile exactly once, clamped or not.
  CHECK(all_once(visits_of_dimension(dax::detail::ceil_div(rows, tile), g.y)));
  CHECK(all_once(visits_of_dimension(dax::detail::ceil_div(cols, tile), g.x)));
  for (int64_t n : {int64_t{1}, int64_t{65535}, int64_t{65536}, int64_t{65535 * 2 + 3}, int64_t{200001}}) {
    INFO(n << " blocks wanted in z");
    const GridShape b = block_grid(1, 1, n);
    REQUIRE(within_limits(b));
    CHECK(all_once(visits_of_dimension(n, b.z)));
  }
}

TEST_CASE("launch shapes: grid-stride loops visit every item exactly once", "[backend][launch]") {
  // Capped grids included: with one item per block, 65536 blocks and more items than that.
  for (int64_t items : {int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{100003},
                        dax::detail::max_loop_blocks, dax::detail::max_loop_blocks + 1,
                        3 * dax::detail::max_loop_blocks + 7}) {
    for (int64_t per_block : {int64_t{1}, int64_t{3}, int64_t{256}}) {
      INFO(items << " items, " << per_block << " per block");
      const GridShape g = loop_grid(items, per_block);
      REQUIRE(within_limits(g));
      CHECK(all_once(visits_of_loop(items, g.x, per_block)));
    }
  }
}

TEST_CASE("launch shapes: random sizes always give valid grids", "[backend][launch]") {
  std::mt19937_64 rng(14);
  auto log_uniform = [&] {
    const int bits = std::uniform_int_distribution<int>(0, 62)(rng);
    return std::uniform_int_distribution<int64_t>(0, two_to(bits))(rng);
  };
  for (int trial = 0; trial < 20000; ++trial) {
    const int64_t nx = log_uniform(), ny = log_uniform(), nz = log_uniform();
    INFO(nx << " x " << ny << " x " << nz);
    const GridShape g = block_grid(nx, ny, nz);
    if (nx == 0 || ny == 0 || nz == 0) {
      CHECK(g.empty());
      continue;
    }
    REQUIRE(within_limits(g));
    // Clamped only where needed: a dimension within its limit is launched as asked.
    CHECK(g.x == std::min(nx, dax::detail::max_grid_x));
    CHECK(g.y == std::min(ny, dax::detail::max_grid_yz));
    CHECK(g.z == std::min(nz, dax::detail::max_grid_yz));
    const GridShape l = loop_grid(nx);
    REQUIRE(within_limits(l));
    CHECK(l.x == std::min(dax::detail::ceil_div(nx, dax::detail::block_threads), dax::detail::max_loop_blocks));
  }
}

TEST_CASE("launch shapes: 32-bit indexing only where every index fits", "[backend][launch]") {
  CHECK(dax::detail::fits_uint32(0));
  CHECK(dax::detail::fits_uint32(two_to(31)));
  CHECK(dax::detail::fits_uint32(two_to(32) - 1));
  CHECK_FALSE(dax::detail::fits_uint32(two_to(32)));
  CHECK_FALSE(dax::detail::fits_uint32(two_to(40)));
  CHECK_FALSE(dax::detail::fits_uint32(-1));
  // ceil_div never forms a + b - 1, which would wrap near the top of int64_t.
  CHECK(dax::detail::ceil_div(std::numeric_limits<int64_t>::max(), 2) == two_to(62));
  CHECK(dax::detail::ceil_div(7, 7) == 1);
  CHECK(dax::detail::ceil_div(8, 7) == 2);
  CHECK(dax::detail::ceil_div(0, 7) == 0);
}
