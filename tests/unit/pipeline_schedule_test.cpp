// Pipeline schedules (parallel/schedule.hpp), exhaustively over 1-8 stages and 1-16 microbatches:
// every pass exactly once on the stage that owns its chunk, orders that play out, and the bubble
// and peak activations against the formulas.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include <dax/parallel/schedule.hpp>

namespace {

using dax::pipeline::Action;
using dax::pipeline::Pass;
using dax::pipeline::Schedule;
using dax::pipeline::ScheduleKind;

// Each (pass, microbatch, chunk) the schedule must hold, exactly once, on the chunk's stage.
void check_complete(const Schedule& s) {
  std::map<std::tuple<int, int, int>, int> seen;
  for (int d = 0; d < s.stages; ++d)
    for (const Action& a : s.actions[d]) {
      REQUIRE(s.stage_of(a.chunk) == d);
      ++seen[{static_cast<int>(a.pass), a.microbatch, a.chunk}];
    }
  const bool split = s.kind == ScheduleKind::zero_bubble_h1;
  const std::vector<Pass> passes = split ? std::vector<Pass>{Pass::forward, Pass::backward_input, Pass::backward_weight}
                                         : std::vector<Pass>{Pass::forward, Pass::backward};
  REQUIRE(seen.size() == passes.size() * s.microbatches * s.chunks());
  for (const auto& [key, count] : seen) REQUIRE(count == 1);
  for (Pass pass : passes)
    for (int i = 0; i < s.microbatches; ++i)
      for (int k = 0; k < s.chunks(); ++k) REQUIRE(seen.count({static_cast<int>(pass), i, k}) == 1);
}

}  // namespace

TEST_CASE("GPipe and 1F1B: every pass once, the bubble (p-1)/(m+p-1), activations m and p-d", "[pipeline]") {
  for (auto kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 16; ++m) {
        CAPTURE(dax::pipeline::to_string(kind), p, m);
        const Schedule s = dax::pipeline::make_schedule(kind, p, m);
        check_complete(s);
        // The bubble does not depend on the forward : backward ratio.
        for (const auto costs : {dax::pipeline::PassCosts{1, 1, 1}, dax::pipeline::PassCosts{1, 0.5, 1.5}}) {
          const auto t = dax::pipeline::simulate(s, costs);
          const double step = costs.forward + costs.backward_input + costs.backward_weight;
          CHECK(t.makespan == Approx((m + p - 1) * step).epsilon(1e-12));
          CHECK(t.bubble == Approx(dax::pipeline::bubble_formula(kind, p, m)).margin(1e-12));
          for (int d = 0; d < p; ++d) {
            CHECK(t.busy[d] == Approx(m * step));
            CHECK(t.peak_activations[d] == (kind == ScheduleKind::gpipe ? m : std::min(p - d, m)));
          }
        }
      }
}

TEST_CASE("interleaved 1F1B: every pass once, the bubble divided by v", "[pipeline]") {
  for (int p = 1; p <= 8; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 16; m += p) {
        CAPTURE(p, v, m);
        const Schedule s = dax::pipeline::make_schedule(ScheduleKind::interleaved_1f1b, p, m, v);
        check_complete(s);
        const auto t = dax::pipeline::simulate(s);
        CHECK(t.bubble == Approx(dax::pipeline::bubble_formula(ScheduleKind::interleaved_1f1b, p, m, v)).margin(1e-12));
        // Megatron-LM's warm-up: 2 (p - d - 1) + (v - 1) p chunk forwards before the first backward
        // (all of them when m == p), plus the one in flight.
        for (int d = 0; d < p; ++d) {
          const int warmup = m == p ? m * v : std::min(2 * (p - d - 1) + (v - 1) * p, m * v);
          CHECK(t.peak_activations[d] == std::min(warmup + 1, m * v));
        }
      }
}

TEST_CASE("ZB-H1: every pass once, a third of 1F1B's bubble at 1F1B's memory", "[pipeline]") {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      CAPTURE(p, m);
      const Schedule s = dax::pipeline::make_schedule(ScheduleKind::zero_bubble_h1, p, m);
      check_complete(s);
      const auto t = dax::pipeline::simulate(s);
      const auto one_f_one_b = dax::pipeline::simulate(dax::pipeline::make_schedule(ScheduleKind::one_f_one_b, p, m));
      CHECK(t.bubble <= one_f_one_b.bubble + 1e-12);
      if (m >= p) CHECK(t.bubble == Approx(dax::pipeline::bubble_formula(ScheduleKind::zero_bubble_h1, p, m)).margin(1e-12));
      for (int d = 0; d < p; ++d) CHECK(t.peak_activations[d] <= std::min(p - d, m));
    }
}

TEST_CASE("pipeline schedules refuse what they cannot run, naming it", "[pipeline]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(dax::pipeline::make_schedule(ScheduleKind::one_f_one_b, 0, 4),
                    Contains("needs stages, microbatches and virtual stages >= 1, got 0, 4 and 1"));
  CHECK_THROWS_WITH(dax::pipeline::make_schedule(ScheduleKind::gpipe, 2, 4, 2),
                    Contains("GPipe: runs one chunk per stage (virtual_stages 1), got 2"));
  CHECK_THROWS_WITH(dax::pipeline::make_schedule(ScheduleKind::interleaved_1f1b, 4, 6, 2),
                    Contains("needs the microbatches to be a multiple of the stages, got 6 microbatches over 4 stages"));
  // A stage that lists a backward before the forward it needs: the orders wait on each other.
  Schedule s = dax::pipeline::make_schedule(ScheduleKind::one_f_one_b, 2, 2);
  std::swap(s.actions[1][0], s.actions[1][1]);
  CHECK_THROWS_WITH(dax::pipeline::simulate(s), Contains("the stages' orders wait on each other"));
  // A pass listed on a stage that does not hold its chunk.
  s = dax::pipeline::make_schedule(ScheduleKind::gpipe, 2, 2);
  s.actions[0][0].chunk = 1;
  CHECK_THROWS_WITH(dax::pipeline::simulate(s), Contains("expected a microbatch below 2 of a chunk of this stage"));
}
