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

TEST_CASE("stream_copy copies every byte at every alignment and length", "[backend][cpu]") {
  std::mt19937 rng(11);
  std::vector<unsigned char> src(4096 + 64), dst(src.size());
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  for (size_t from = 0; from < 32; ++from)
    for (size_t to = 0; to < 32; ++to)
      for (size_t bytes : {size_t(0), size_t(1), size_t(15), size_t(63), size_t(64), size_t(65), size_t(200), size_t(4000)}) {
        std::fill(dst.begin(), dst.end(), 0xA5);
        dax::detail::stream_copy(dst.data() + to, src.data() + from, bytes);
        dax::detail::stream_fence();
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= to && i < to + bytes;
          if (dst[i] != (inside ? src[from + i - to] : 0xA5)) FAIL("byte " << i << " from " << from << " to " << to);
        }
      }
}

TEST_CASE("stream_copy_side_by_side copies every run at mixed alignments and lengths", "[backend][cpu]") {
  // Runs whose destinations start at different offsets within a cache line in one group (so their
  // heads and the group's common block count differ), for every count up to two groups and more.
  std::mt19937 rng(13);
  constexpr int most = 2 * dax::detail::kRunsSideBySide + 3;
  const size_t slot = 4096 + 128;
  std::vector<unsigned char> src(most * slot), dst(src.size());
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  for (int count = 1; count <= most; ++count)
    for (size_t bytes : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(79), size_t(130), size_t(4000)})
      for (int trial = 0; trial < 8; ++trial) {
        char* to[most];
        const char* from[most];
        size_t to_off[most], from_off[most];
        for (int k = 0; k < count; ++k) {
          to_off[k] = k * slot + rng() % 64;
          from_off[k] = k * slot + rng() % 64;
          to[k] = reinterpret_cast<char*>(dst.data() + to_off[k]);
          from[k] = reinterpret_cast<const char*>(src.data() + from_off[k]);
        }
        std::fill(dst.begin(), dst.end(), 0xA5);
        dax::detail::stream_copy_side_by_side(to, from, count, bytes);
        dax::detail::stream_fence();
        std::vector<unsigned char> want(dst.size(), 0xA5);
        for (int k = 0; k < count; ++k)
          std::copy_n(src.begin() + from_off[k], bytes, want.begin() + to_off[k]);
        size_t wrong = 0;
        for (size_t i = 0; i < dst.size(); ++i) wrong += dst[i] != want[i];
        INFO("count " << count << " bytes " << bytes << " trial " << trial);
        REQUIRE(wrong == 0);
      }
}

TEST_CASE("large copies (streaming stores) land exactly, strided and contiguous, at odd offsets",
          "[backend][cpu]") {
  // Past kStreamingCopyFrom every case streams. From a contiguous source, run after run: whole
  // rows of 1,001 floats into rows of 1,003 (4,012 bytes, so the runs start at 16 offsets within
  // a cache line in turn), and a block of columns held alone into wider rows. From a strided
  // source, kRunsSideBySide runs side by side: 1,499 rows (not a whole number of groups, so the
  // last group is short) whose 3,916-byte runs stream 60 or 61 whole lines, depending on their
  // start. Last, runs that follow on in the source (one run per middle index) without the region
  // being contiguous there: run after run again.
  std::mt19937 rng(5);
  const int64_t rows = 1499, cols = 1001;
  REQUIRE(rows % dax::detail::kRunsSideBySide != 0);
  struct Case {
    dax::Box src_block, dst_block, region;
    bool contiguous_source;
  };
  const std::vector<Case> cases{
      {{{0, rows}, {0, cols}}, {{0, rows + 1}, {0, cols + 2}}, {{3, rows - 2}, {0, cols}}, true},
      {{{0, rows}, {17, cols - 5}}, {{0, rows + 1}, {0, cols + 2}}, {{0, rows}, {17, cols - 5}}, true},
      {{{0, rows}, {0, cols}}, {{0, rows + 1}, {0, cols + 2}}, {{0, rows}, {17, cols - 5}}, false},
      {{{0, 4}, {0, 400}, {0, cols}}, {{0, 4}, {0, 400}, {0, cols + 2}}, {{0, 4}, {10, 390}, {0, cols}}, false},
  };
  for (const Case& c : cases) {
    std::vector<float> src(static_cast<size_t>(dax::numel(c.src_block)));
    for (auto& v : src) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    REQUIRE(dax::numel(c.region) * int64_t(sizeof(float)) >= dax::detail::kStreamingCopyFrom);
    REQUIRE(dax::is_contiguous_in(c.src_block, c.region) == c.contiguous_source);
    std::vector<float> got(static_cast<size_t>(dax::numel(c.dst_block)), -7.f), want = got;
    dax::detail::cpu::copy_region(src.data(), c.src_block, got.data(), c.dst_block, c.region);
    for_each_index(c.region, [&](const std::vector<int64_t>& idx) {
      want[offset(c.dst_block, idx)] = src[offset(c.src_block, idx)];
    });
    size_t wrong = 0;  // not REQUIRE(got == want): a report would print millions of floats
    for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
    REQUIRE(wrong == 0);
  }
}
