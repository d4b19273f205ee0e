// The geometry of the cross-memory-attach exchange (comm/cma_exchange.hpp): a region's runs list
// exactly its elements' offsets in row-major order, and paired runs copy every element of the
// sender's region to its place in the receiver's. Checked against plain loops over random boxes.
#include <catch2/catch.hpp>

#include <dax/comm/cma_exchange.hpp>

#include <random>
#include <vector>

namespace {

using dax::Box;

/// Offsets in `block` of the elements of `region`, row-major (the plain loop).
std::vector<int64_t> offsets(const Box& block, const Box& region) {
  std::vector<int64_t> out;
  if (dax::numel(region) == 0) return out;
  std::vector<int64_t> at(region.size());
  for (size_t i = 0; i < region.size(); ++i) at[i] = region[i].start;
  while (true) {
    int64_t offset = 0;
    for (size_t i = 0; i < region.size(); ++i) offset = offset * block[i].size() + (at[i] - block[i].start);
    out.push_back(offset);
    size_t d = region.size();
    while (d-- > 0) {
      if (++at[d] < region[d].stop) break;
      at[d] = region[d].start;
    }
    if (d == static_cast<size_t>(-1)) return out;
  }
}

/// The offsets the runs visit, element by element.
std::vector<int64_t> visited(const dax::detail::RegionRuns& r) {
  std::vector<int64_t> out;
  for (int64_t run = 0; run < r.runs(); ++run)
    for (int64_t e = 0; e < r.length; ++e) out.push_back(r.run_offset(run) + e);
  return out;
}

Box random_block(std::mt19937& rng, int dims) {
  Box b;
  for (int i = 0; i < dims; ++i) {
    const int64_t start = std::uniform_int_distribution<int64_t>(0, 5)(rng);
    b.push_back({start, start + std::uniform_int_distribution<int64_t>(1, 7)(rng)});
  }
  return b;
}

Box random_region(std::mt19937& rng, const Box& block) {
  Box r;
  for (const auto& s : block) {
    const int64_t a = std::uniform_int_distribution<int64_t>(s.start, s.stop - 1)(rng);
    const int64_t b = std::uniform_int_distribution<int64_t>(a + 1, s.stop)(rng);
    r.push_back({a, b});
  }
  return r;
}

}  // namespace

TEST_CASE("a region's runs visit its elements in row-major order", "[cma]") {
  std::mt19937 rng(20261125);
  for (int trial = 0; trial < 2000; ++trial) {
    const int dims = 1 + trial % 4;
    const Box block = random_block(rng, dims), region = random_region(rng, block);
    const dax::detail::RegionRuns runs(block, region);
    INFO(dax::to_string(block) << " " << dax::to_string(region));
    REQUIRE(runs.elements == dax::numel(region));
    REQUIRE(visited(runs) == offsets(block, region));
    // A region that is one stretch of its block is one run; otherwise its runs are as long as they can be.
    REQUIRE((runs.runs() == 1) == dax::is_contiguous_in(block, region));
    // Through the record another member reads, unchanged.
    std::vector<int64_t> record(dax::detail::RegionRuns::record_size);
    runs.write(record.data());
    REQUIRE(dax::detail::RegionRuns::describable(record.data()));
    REQUIRE(visited(dax::detail::RegionRuns::read(record.data())) == visited(runs));
  }
}

TEST_CASE("paired runs copy every element of one region to its place in another", "[cma]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int dims = 1 + trial % 4;
    // The same global box seen from two blocks that both contain it (a sender's and a receiver's).
    const Box global = random_block(rng, dims);
    Box from_block, to_block;
    for (const auto& s : global) {
      from_block.push_back({s.start - std::uniform_int_distribution<int64_t>(0, 3)(rng),
                            s.stop + std::uniform_int_distribution<int64_t>(0, 3)(rng)});
      to_block.push_back({s.start - std::uniform_int_distribution<int64_t>(0, 3)(rng),
                          s.stop + std::uniform_int_distribution<int64_t>(0, 3)(rng)});
    }
    const int64_t item = trial % 2 ? 8 : 4;
    const int64_t most = trial % 3 ? int64_t(1) << 30 : 3 * item;  // also with segments cut short
    const auto segments = dax::detail::pair_runs(dax::detail::RegionRuns(from_block, global),
                                                 dax::detail::RegionRuns(to_block, global), item, most);
    std::vector<std::pair<int64_t, int64_t>> pairs;  // (sender byte, receiver byte) per element
    for (const auto& g : segments) {
      REQUIRE(g.bytes > 0);
      REQUIRE(g.bytes % item == 0);
      REQUIRE(g.bytes <= most);
      for (int64_t b = 0; b < g.bytes; b += item) pairs.emplace_back(g.from + b, g.to + b);
    }
    const auto a = offsets(from_block, global), b = offsets(to_block, global);
    REQUIRE(pairs.size() == a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      REQUIRE(pairs[i].first == a[i] * item);
      REQUIRE(pairs[i].second == b[i] * item);
    }
  }
}

TEST_CASE("regions of different sizes pair nothing", "[cma]") {
  const Box block{{0, 8}, {0, 8}};
  const dax::detail::RegionRuns a(block, Box{{0, 4}, {0, 3}}), b(block, Box{{0, 4}, {0, 2}});
  REQUIRE(dax::detail::pair_runs(a, b, 4).empty());
  REQUIRE(dax::detail::pair_runs(a, dax::detail::RegionRuns(), 4).empty());
  REQUIRE(dax::detail::pair_runs(a, a, 4).size() == 4);  // four rows of 3 elements
}

TEST_CASE("a region deeper than a record can describe says so", "[cma]") {
  Box block, region;
  for (int i = 0; i < 11; ++i) block.push_back({0, 3}), region.push_back({0, 2});
  const dax::detail::RegionRuns runs(block, region);
  REQUIRE(runs.counts.size() > static_cast<size_t>(dax::detail::RegionRuns::kMaxOuter));
  std::vector<int64_t> record(dax::detail::RegionRuns::record_size);
  runs.write(record.data());
  REQUIRE_FALSE(dax::detail::RegionRuns::describable(record.data()));
}

TEST_CASE("copied in the order of their sources, several destinations get exactly their parts", "[cma]") {
  // A sender's block split among its own piece and peers' pieces (as an exchange that copies its
  // own part with the parts it writes into mapped peer pieces): all segments in source order, then
  // copy_runs, small (plain copies) and past the streaming threshold (streamed one after another:
  // in source order each run's source follows on from the one before).
  std::mt19937 rng(11);
  for (const int64_t rows : {int64_t(37), int64_t(1500)}) {
    const int64_t cols = 1024, item = 4;  // rows of 4 KiB: the large case is 6 MiB
    const Box from_block{{0, rows}, {0, cols}};
    const int parts = 3;
    // Column split of the sender's rows: part d gets columns [bound[d], bound[d + 1]).
    const int64_t bound[parts + 1] = {0, 300, 700, cols};
    std::vector<std::vector<dax::detail::CopySegment>> lists(parts);
    std::vector<Box> to_blocks;
    for (int d = 0; d < parts; ++d) {
      const Box region{{0, rows}, {bound[d], bound[d + 1]}};
      to_blocks.push_back(region);
      lists[d] = dax::detail::pair_runs(dax::detail::RegionRuns(from_block, region),
                                        dax::detail::RegionRuns(region, region), item);
    }
    std::vector<const std::vector<dax::detail::CopySegment>*> pointers;
    for (const auto& l : lists) pointers.push_back(&l);
    const auto order = dax::detail::in_source_order(pointers);
    size_t total = 0;
    for (const auto& l : lists) total += l.size();
    REQUIRE(order.size() == total);
    for (size_t k = 1; k < order.size(); ++k)
      REQUIRE(lists[order[k - 1].first][order[k - 1].second].from <= lists[order[k].first][order[k].second].from);
    std::vector<float> source(static_cast<size_t>(rows * cols));
    std::uniform_real_distribution<float> value(-1, 1);
    for (float& v : source) v = value(rng);
    std::vector<std::vector<float>> pieces(parts);
    std::vector<dax::detail::CopyRun> runs;
    for (int d = 0; d < parts; ++d) pieces[d].assign(static_cast<size_t>(rows * (bound[d + 1] - bound[d])), -7.f);
    for (const auto& [d, k] : order) {
      const auto& g = lists[d][k];
      runs.push_back({reinterpret_cast<char*>(pieces[d].data()) + g.to,
                      reinterpret_cast<const char*>(source.data()) + g.from, static_cast<size_t>(g.bytes)});
    }
    dax::detail::copy_runs(runs);
    dax::detail::stream_fence();
    for (int d = 0; d < parts; ++d) {
      const int64_t w = bound[d + 1] - bound[d];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < w; ++c)
          REQUIRE(pieces[d][r * w + c] == source[r * cols + bound[d] + c]);
    }
  }
}

TEST_CASE("copy_runs streams runs read twice (two destinations of one source)", "[cma]") {
  // An all-gather's own part and a peer's part come from the same source runs: equal sources are
  // copied one after the other, never paired side by side.
  const size_t n = size_t(3) << 20;  // 12 MiB of floats in all: past the streaming threshold
  std::vector<float> source(n / 2), a(n / 2, 0.f), b(n / 2, 0.f);
  for (size_t i = 0; i < source.size(); ++i) source[i] = float(i % 9973) + 0.5f;
  std::vector<dax::detail::CopyRun> runs;
  const size_t run = 1000;  // floats per run, 4,000 B: heads and tails off cache lines
  for (size_t at = 0; at < source.size(); at += run) {
    const size_t bytes = std::min(run, source.size() - at) * sizeof(float);
    runs.push_back({reinterpret_cast<char*>(a.data() + at), reinterpret_cast<const char*>(source.data() + at), bytes});
    runs.push_back({reinterpret_cast<char*>(b.data() + at), reinterpret_cast<const char*>(source.data() + at), bytes});
  }
  dax::detail::copy_runs(runs);
  dax::detail::stream_fence();
  REQUIRE(a == source);
  REQUIRE(b == source);
}

TEST_CASE("copy_runs streams runs spread over memory two side by side", "[cma]") {
  // A column block of a row-major source (equal runs with gaps between them), past the streaming
  // threshold: pairs of runs go side by side; an odd count leaves one run alone at the end. Every
  // byte lands, the gaps of the destination stay untouched.
  for (const int64_t rows : {int64_t(2601), int64_t(2600)}) {
    const int64_t cols = 1024, first = 100, width = 509;  // 2,036-byte runs, off cache-line boundaries
    std::vector<float> source(static_cast<size_t>(rows * cols)), to(source.size(), -3.f);
    for (size_t i = 0; i < source.size(); ++i) source[i] = float(i % 65521) * 0.25f;
    std::vector<dax::detail::CopyRun> runs;
    for (int64_t r = 0; r < rows; ++r)
      runs.push_back({reinterpret_cast<char*>(to.data() + r * cols + first),
                      reinterpret_cast<const char*>(source.data() + r * cols + first), width * sizeof(float)});
    REQUIRE(rows * width * int64_t(sizeof(float)) >= dax::detail::kStreamingCopyFrom);
    dax::detail::copy_runs(runs);
    dax::detail::stream_fence();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const bool inside = c >= first && c < first + width;
        REQUIRE(to[r * cols + c] == (inside ? source[r * cols + c] : -3.f));
      }
  }
}
