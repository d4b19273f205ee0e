// The stages of a distributed FFT (fft/fft_rule.hpp), exhaustively: every mesh of 1-8 devices,
// every sharding of 1-3 dimensions (partial sums too), every set of axes, each kind. Each axis is
// transformed exactly once, whole in its stage's layout; the halved axis first for r2c and last for
// c2r; at most two layouts; the result in the input's layout unless the transposed one is kept.
#include <catch2/catch.hpp>

#include <algorithm>

#include <dax/fft/fft_rule.hpp>

#include <dax/linalg/block_cyclic.hpp>

#include "../common/meshes.hpp"

using dax::NamedSharding;
using dax::Shape;
using dax::detail::FftKind;

TEST_CASE("fft_rule: every axis once, whole where it is transformed, halved axis where FFTW needs it",
          "[fft][rule]") {
  int64_t cases = 0;
  for (const auto& mesh : dax::test::all_meshes()) {
    for (size_t ndim = 1; ndim <= 3; ++ndim) {
      const Shape full{7, 4, 9};
      const Shape shape(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(ndim));
      for (const auto& s : dax::test::all_shardings(mesh, ndim, true)) {
        for (unsigned mask = 1; mask < (1u << ndim); ++mask) {
          std::vector<int> ascending;
          for (size_t d = 0; d < ndim; ++d)
            if (mask & (1u << d)) ascending.push_back(static_cast<int>(d));
          for (bool reversed : {false, true})  // the halved axis is the last named, in any order
          for (FftKind kind : {FftKind::c2c, FftKind::r2c, FftKind::c2r}) {
            for (bool transposed : {false, true}) {
              std::vector<int> axes = ascending;
              if (reversed) std::reverse(axes.begin(), axes.end());
              ++cases;
              INFO(dax::to_string(s) << " mask " << mask << " kind " << int(kind) << " transposed " << transposed);
              const auto rule = dax::detail::fft_rule(shape, s, axes, kind, transposed);
              REQUIRE(!rule.stages.empty());
              REQUIRE(rule.stages.size() <= 2);
              std::vector<int> seen;
              int halving_stage = -1;
              for (size_t i = 0; i < rule.stages.size(); ++i) {
                const auto& st = rule.stages[i];
                CHECK(!st.layout.is_unreduced());
                for (int a : st.axes) {
                  CHECK(st.layout.dim_axes(a).empty());  // whole on every device
                  seen.push_back(a);
                }
                if (st.halves) {
                  CHECK(halving_stage == -1);
                  halving_stage = static_cast<int>(i);
                  CHECK(std::find(st.axes.begin(), st.axes.end(), axes.back()) != st.axes.end());
                }
              }
              std::sort(seen.begin(), seen.end());
              CHECK(seen == ascending);
              if (kind == FftKind::c2c) CHECK(halving_stage == -1);
              if (kind == FftKind::r2c) CHECK(halving_stage == 0);
              if (kind == FftKind::c2r) CHECK(halving_stage == int(rule.stages.size()) - 1);
              const NamedSharding reduced = dax::detail::with_unreduced_axes(s, ndim, {});
              // The first stage that needs no move is in the input's own layout; a second layout only
              // when some axis is split.
              bool any_split = false;
              for (int a : axes) any_split = any_split || !reduced.dim_axes(a).empty();
              if (!any_split) CHECK((rule.stages.size() == 1 && rule.stages[0].layout == reduced));
              CHECK(rule.output == (transposed ? rule.stages.back().layout : reduced));
              // Mesh axes are only moved between dimensions, never dropped (gathered) when the
              // array has two dimensions or more (a 1-D array has nowhere else to put them).
              for (const auto& st : rule.stages) {
                for (size_t d = 0; d < ndim; ++d)
                  for (int m : st.layout.dim_axes(d)) CHECK(reduced.splits(m));
                if (ndim >= 2)
                  for (int m = 0; m < mesh.num_axes(); ++m)
                    if (reduced.splits(m)) CHECK(st.layout.splits(m));
              }
            }
          }
        }
      }
    }
  }
  CHECK(cases > 10000);
}

TEST_CASE("fft_rule: a slab moves its mesh axis to the largest other dimension, a pencil both", "[fft][rule]") {
  const dax::Mesh line(Shape{4}, {"x"});
  const auto slab = dax::detail::fft_rule({16, 8, 32}, NamedSharding(line, dax::P("x")), {0, 1, 2}, FftKind::c2c, false);
  REQUIRE(slab.stages.size() == 2);
  CHECK(slab.stages[0].axes == std::vector<int>{1, 2});
  CHECK(slab.stages[1].layout == NamedSharding(line, dax::P(dax::none, dax::none, "x")));
  const dax::Mesh grid(Shape{2, 2}, {"x", "y"});
  const auto pencil =
      dax::detail::fft_rule({16, 16, 16}, NamedSharding(grid, dax::P("x", "y")), {0, 1, 2}, FftKind::c2c, true);
  REQUIRE(pencil.stages.size() == 2);
  CHECK(pencil.stages[1].layout == NamedSharding(grid, dax::P(dax::none, dax::none, dax::axes("x", "y"))));
  CHECK(pencil.output == pencil.stages[1].layout);
  // A 2-D array split over both dimensions, both transformed: the larger takes both mesh axes
  // while the other is transformed, then gives them to it (one all-to-all, nothing gathered).
  const auto both = dax::detail::fft_rule({8, 32}, NamedSharding(grid, dax::P("x", "y")), {0, 1}, FftKind::c2c, false);
  REQUIRE(both.stages.size() == 2);
  CHECK(both.stages[0].axes == std::vector<int>{0});
  CHECK(both.stages[0].layout == NamedSharding(grid, dax::P(dax::none, dax::axes("y", "x"))));
  CHECK(both.stages[1].axes == std::vector<int>{1});
  CHECK(both.stages[1].layout == NamedSharding(grid, dax::P(dax::axes("y", "x"), dax::none)));
  // A 1-D array split over its only axis has nowhere to put the mesh axis: the rule gathers it
  // (dax::fft::fft runs such a c2c transform as four steps instead: fft.hpp).
  const auto line1 = dax::detail::fft_rule({10}, NamedSharding(line, dax::P("x")), {0}, FftKind::c2c, false);
  CHECK(line1.stages.back().layout == NamedSharding(line, dax::P()));
}

TEST_CASE("block-cyclic index math: every row once, where numroc says", "[linalg][rule]") {
  for (int64_t n : {0, 1, 5, 63, 64, 65, 130, 200})
    for (int64_t nb : {1, 2, 16, 64})
      for (int p = 1; p <= 8; ++p) {
        INFO("n " << n << " nb " << nb << " p " << p);
        std::vector<int64_t> count(p, 0), next(p, 0);
        for (int64_t i = 0; i < n; ++i) {
          const int owner = dax::detail::block_owner(i, nb, p);
          CHECK(dax::detail::block_local(i, nb, p) == next[owner]++);  // local rows fill in order
          ++count[owner];
        }
        int64_t total = 0;
        for (int q = 0; q < p; ++q) {
          CHECK(dax::detail::block_count(n, nb, q, p) == count[q]);
          total += count[q];
        }
        CHECK(total == n);
      }
  for (int devices = 1; devices <= 16; ++devices) {
    const auto g = dax::detail::process_grid(devices);
    CHECK(g.rows * g.cols == devices);
    CHECK(g.rows <= g.cols);
  }
  CHECK(dax::detail::process_grid(12).rows == 3);
  CHECK(dax::detail::block_size(8192, {1, 2}) == 64);
  CHECK(dax::detail::block_size(19, {1, 1}) == 16);
}
