// copy_region against an element-by-element loop over global indices.
#include <catch2/catch.hpp>

#include <random>

#include <dax/backend/cpu/copy.hpp>
#include "../common/simulate.hpp"

using dax::test::for_each_index;
using dax::test::offset;

TEST_CASE("copy_region copies and adds any region between any two pieces", "[backend][cpu]") {
  std::mt19937 rng(7);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 400; ++trial) {
    const size_t ndim = pick(0, 4);
    dax::Box src_block(ndim), dst_block(ndim), region(ndim);
    for (size_t i = 0; i < ndim; ++i) {
      const int64_t lo = pick(0, 3), hi = lo + pick(0, 4);
      region[i] = {lo, hi};
      src_block[i] = {lo - pick(0, 2), hi + pick(0, 2)};
      dst_block[i] = {lo - pick(0, 2), hi + pick(0, 2)};
    }
    std::vector<double> src(dax::numel(src_block)), dst(dax::numel(dst_block));
    for (auto& v : src) v = double(pick(1, 1000));
    for (auto& v : dst) v = double(pick(1, 1000));
    for (auto mode : {dax::detail::CopyMode::assign, dax::detail::CopyMode::add}) {
      std::vector<double> got = dst, want = dst;
      dax::detail::cpu::copy_region(src.data(), src_block, got.data(), dst_block, region, mode);
      for_each_index(region, [&](const std::vector<int64_t>& idx) {
        const double v = src[offset(src_block, idx)];
        double& w = want[offset(dst_block, idx)];
        w = mode == dax::detail::CopyMode::add ? w + v : v;
      });
      REQUIRE(got == want);
    }
  }
}
