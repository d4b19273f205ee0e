// The strided copies that move a box between two pieces laid out alike (backend/box_copy_plan.hpp,
// which the staged MPI transport of the CUDA backend runs as cudaMemcpy2D calls), checked on the
// CPU: run as plain memcpy's, they copy exactly the box's elements, for every rank 0-4, random
// blocks and boxes, uneven and empty ones included.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <dax/backend/box_copy_plan.hpp>

using dax::Box;
using dax::Slice;
using dax::detail::box_copy_plan;
using dax::detail::StridedCopy;

namespace {

/// Runs the plan on byte buffers the way the GPU side does (row r at offset + r * pitch).
void run(const std::vector<StridedCopy>& plan, std::vector<int32_t>& dst, const std::vector<int32_t>& src) {
  auto* out = reinterpret_cast<char*>(dst.data());
  const auto* in = reinterpret_cast<const char*>(src.data());
  for (const StridedCopy& c : plan) {
    REQUIRE(c.run <= c.pitch);
    for (int64_t r = 0; r < c.rows; ++r) {
      REQUIRE(c.offset + r * c.pitch + c.run <= static_cast<int64_t>(dst.size() * sizeof(int32_t)));
      std::memcpy(out + c.offset + r * c.pitch, in + c.offset + r * c.pitch, static_cast<size_t>(c.run));
    }
  }
}

bool inside(const Box& box, const std::vector<int64_t>& at) {
  for (size_t d = 0; d < box.size(); ++d)
    if (at[d] < box[d].start || at[d] >= box[d].stop) return false;
  return true;
}

}  // namespace

TEST_CASE("box_copy_plan copies exactly the box's elements", "[unit][box_copy]") {
  std::mt19937_64 rng(20261124);
  for (int trial = 0; trial < 3000; ++trial) {
    const int rank = static_cast<int>(rng() % 5);
    Box block, box;
    for (int d = 0; d < rank; ++d) {
      const int64_t start = static_cast<int64_t>(rng() % 5), size = static_cast<int64_t>(rng() % 6);
      block.push_back({start, start + size});
      const int64_t a = size ? start + static_cast<int64_t>(rng() % (size + 1)) : start;
      const int64_t b = size ? start + static_cast<int64_t>(rng() % (size + 1)) : start;
      // Often the whole extent, so that dimensions merge.
      box.push_back(rng() % 3 == 0 ? Slice{start, start + size} : Slice{std::min(a, b), std::max(a, b)});
    }
    const int64_t n = dax::numel(dax::box_shape(block));
    std::vector<int32_t> src(n), dst(n, -1);
    for (int64_t i = 0; i < n; ++i) src[i] = static_cast<int32_t>(i);
    const auto plan = box_copy_plan(block, box, sizeof(int32_t));
    run(plan, dst, src);
    INFO("block " << dax::to_string(block) << ", box " << dax::to_string(box));
    std::vector<int64_t> at(rank);
    for (int64_t i = 0; i < n; ++i) {
      int64_t rest = i;
      for (int d = rank - 1; d >= 0; --d) {
        at[d] = block[d].start + rest % block[d].size();
        rest /= block[d].size();
      }
      REQUIRE(dst[i] == (inside(box, at) ? src[i] : -1));
    }
  }
}

TEST_CASE("box_copy_plan merges what is contiguous", "[unit][box_copy]") {
  // Rows to columns on 2 members: the rows a member receives span the whole block: one run.
  CHECK(box_copy_plan({{0, 8}, {4, 7}}, {{0, 4}, {4, 7}}, 4) == std::vector<StridedCopy>{{0, 48, 48, 1}});
  // What it sends: a column band of its rows, one 2-d copy of 4 rows of 3 elements.
  CHECK(box_copy_plan({{0, 4}, {0, 7}}, {{0, 4}, {4, 7}}, 4) == std::vector<StridedCopy>{{16, 28, 12, 4}});
  // A 3-d band: one 2-d copy per index of the outermost dimension.
  CHECK(box_copy_plan({{0, 2}, {0, 3}, {0, 4}}, {{0, 2}, {1, 3}, {1, 2}}, 1) ==
        std::vector<StridedCopy>{{5, 4, 1, 2}, {17, 4, 1, 2}});
  CHECK(box_copy_plan({{0, 2}, {0, 3}}, {{1, 1}, {0, 3}}, 8).empty());
  CHECK(box_copy_plan({}, {}, 8) == std::vector<StridedCopy>{{0, 8, 8, 1}});
}
