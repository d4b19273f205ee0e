// Pipeline schedules (the first part of parallel/): which pass of which microbatch each stage of a
// pipeline runs, in what order, for GPipe, 1F1B, interleaved 1F1B and zero-bubble (ZB-H1); and a
// simulator that plays the orders against the passes' dependencies to give the step's length, each
// stage's idle time (the bubble) and the activations each stage holds at its peak. Pure: no MPI,
// no arrays; the runtime that executes a schedule over a 'stage' mesh axis is built on it.
//
// The model is cut into `stages * virtual_stages` chunks; chunk c runs on stage c % stages (so
// with v virtual stages a stage holds chunks d, d + p, ..., as Megatron-LM interleaves them). A
// microbatch's forward goes through the chunks in order, its backward in reverse. Counterparts:
// torch.distributed.pipelining's ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B and
// ScheduleInterleavedZeroBubble / ZBV; JAX has none built in (docs/training.md).
#pragma once

#include <dax/core/compiled_mode.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <dax/core/error.hpp>

namespace dax::pipeline {

enum class ScheduleKind {
  gpipe,             // every forward, then every backward: m microbatches' activations held
  one_f_one_b,       // 1F1B: a stage holds at most (stages - its index) microbatches' activations
  interleaved_1f1b,  // 1F1B over v chunks per stage: the bubble divided by v
  zero_bubble_h1,    // ZB-H1: backward split into input and weight passes, the weight passes
                     // filling 1F1B's bubble at 1F1B's memory
};

/// The schedule's name as torch.distributed.pipelining spells it ("GPipe", "1F1B",
/// "Interleaved1F1B", "ZBH1").
inline const char* to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe: return "GPipe";
    case ScheduleKind::one_f_one_b: return "1F1B";
    case ScheduleKind::interleaved_1f1b: return "Interleaved1F1B";
    case ScheduleKind::zero_bubble_h1: return "ZBH1";
  }
  return "?";
}

/// The schedule a name means: to_string's names, in any case ("1f1b", "zbh1"); nullopt for
/// anything else (a command line reports it with the names it expected).
inline std::optional<ScheduleKind> schedule_kind(std::string_view name) {
  const auto lower = [](std::string_view text) {
    std::string out(text);
    for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return out;
  };
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved_1f1b,
                         ScheduleKind::zero_bubble_h1})
    if (lower(to_string(k)) == lower(name)) return k;
  return std::nullopt;
}

enum class Pass : uint8_t {
  forward,
  backward,         // the whole backward of a chunk (every schedule but ZB-H1)
  backward_input,   // ZB-H1's B: the gradient of the chunk's input, what the previous stage waits for
  backward_weight,  // ZB-H1's W: the gradient of the chunk's weights, which nothing downstream needs
};

/// One pass of one microbatch through one chunk.
struct Action {
  Pass pass;
  int microbatch;
  int chunk;
  friend bool operator==(const Action&, const Action&) = default;
};

/// Each stage's passes, in the order it runs them.
struct Schedule {
  ScheduleKind kind;
  int stages;
  int microbatches;
  int virtual_stages;
  std::vector<std::vector<Action>> actions;  // [stage]

  int chunks() const { return stages * virtual_stages; }
  int stage_of(int chunk) const { return chunk % stages; }
};

/// What each pass costs, in any unit (the simulator's times are in it). A whole backward costs
/// backward_input + backward_weight.
struct PassCosts {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
};

/// A schedule played out: when it ends, how busy each stage was, and the activations each stage
/// held at most (one per microbatch and chunk whose forward ran and whose backward, or ZB-H1's
/// input-gradient pass, had not; a pending weight pass keeps only its layers' inputs, less, as the
/// zero-bubble paper counts it).
struct ScheduleTimes {
  double makespan = 0;
  std::vector<double> busy;            // [stage]
  double bubble = 0;                   // 1 - sum(busy) / (stages * makespan)
  std::vector<int> peak_activations;   // [stage]
};

/// The schedule of `kind` for `stages` stages and `microbatches` microbatches (virtual_stages
/// chunks per stage: more than 1 only for interleaved 1F1B, which also needs microbatches to be a
/// multiple of stages, as Megatron-LM's does). Throws dax::Error naming what it needs otherwise.
DAX_OUTLINE Schedule make_schedule(ScheduleKind kind, int stages, int microbatches, int virtual_stages = 1)
#if DAX_HEADER_DEFINITIONS
{
  DAX_CHECK(stages >= 1 && microbatches >= 1 && virtual_stages >= 1, "pipeline schedule ", to_string(kind),
            ": needs stages, microbatches and virtual stages >= 1, got ", stages, ", ", microbatches, " and ",
            virtual_stages);
  DAX_CHECK(virtual_stages == 1 || kind == ScheduleKind::interleaved_1f1b, "pipeline schedule ", to_string(kind),
            ": runs one chunk per stage (virtual_stages 1), got ", virtual_stages,
            "; interleaved 1F1B is the schedule with several");
  DAX_CHECK(kind != ScheduleKind::interleaved_1f1b || microbatches % stages == 0, "pipeline schedule ",
            to_string(kind), ": needs the microbatches to be a multiple of the stages, got ", microbatches,
            " microbatches over ", stages, " stages");
  Schedule s{kind, stages, microbatches, virtual_stages, std::vector<std::vector<Action>>(stages)};
  const int p = stages, m = microbatches, v = virtual_stages;
  switch (kind) {
    case ScheduleKind::gpipe:
      for (int d = 0; d < p; ++d) {
        for (int i = 0; i < m; ++i) s.actions[d].push_back({Pass::forward, i, d});
        for (int i = 0; i < m; ++i) s.actions[d].push_back({Pass::backward, i, d});
      }
      break;
    case ScheduleKind::one_f_one_b:
      for (int d = 0; d < p; ++d) {
        // Warm up with the forwards the later stages need before the first backward comes back,
        // then one forward and one backward in turn, then the remaining backwards.
        const int warmup = std::min(p - d - 1, m);
        int f = 0, b = 0;
        for (; f < warmup; ++f) s.actions[d].push_back({Pass::forward, f, d});
        for (; f < m; ++f, ++b) {
          s.actions[d].push_back({Pass::forward, f, d});
          s.actions[d].push_back({Pass::backward, b, d});
        }
        for (; b < m; ++b) s.actions[d].push_back({Pass::backward, b, d});
      }
      break;
    case ScheduleKind::interleaved_1f1b:
      for (int d = 0; d < p; ++d) {
        // Megatron-LM's order: microbatches in groups of p; within a group every chunk in turn
        // (forward: this stage's first chunk first; backward: its last first).
        const int total = m * v;
        const auto microbatch_of = [&](int k) { return (k / (p * v)) * p + k % p; };
        const auto forward_chunk = [&](int k) { return ((k % (p * v)) / p) * p + d; };
        const auto backward_chunk = [&](int k) { return (v - 1 - (k % (p * v)) / p) * p + d; };
        const int warmup = m == p ? total : std::min((p - d - 1) * 2 + (v - 1) * p, total);
        int f = 0, b = 0;
        for (; f < warmup; ++f) s.actions[d].push_back({Pass::forward, microbatch_of(f), forward_chunk(f)});
        for (; f < total; ++f, ++b) {
          s.actions[d].push_back({Pass::forward, microbatch_of(f), forward_chunk(f)});
          s.actions[d].push_back({Pass::backward, microbatch_of(b), backward_chunk(b)});
        }
        for (; b < total; ++b) s.actions[d].push_back({Pass::backward, microbatch_of(b), backward_chunk(b)});
      }
      break;
    case ScheduleKind::zero_bubble_h1: {
      // Built by playing it out with unit costs: a free stage runs a ready B (input gradient)
      // first, then the next forward while fewer than 1F1B's (stages - index) microbatches wait
      // for their B, and only then a pending W (weight gradient), which nothing waits for: the W
      // passes fill what would be 1F1B's bubble. Each pass kind runs in microbatch order on a
      // stage (a B needs the next stage's B of the same microbatch, in order by induction from the
      // last stage), so three counts say which pass of each kind comes next.
      std::vector<int> forwards(p, 0), inputs(p, 0), weights(p, 0);
      std::vector<std::vector<double>> f_end(p, std::vector<double>(m, -1)), b_end = f_end;
      std::vector<double> free_at(p, 0);
      int remaining = 3 * p * m;
      double now = 0;
      const auto done_by_now = [&](double end) { return end >= 0 && end <= now; };
      while (remaining > 0) {
        for (int d = 0; d < p; ++d) {
          if (free_at[d] > now) continue;
          const int f = forwards[d], b = inputs[d];
          if (b < f && done_by_now(f_end[d][b]) && (d == p - 1 || done_by_now(b_end[d + 1][b]))) {
            s.actions[d].push_back({Pass::backward_input, b, d});
            b_end[d][b] = now + 1;
            ++inputs[d];
          } else if (f < m && f - b < std::min(p - d, m) && (d == 0 || done_by_now(f_end[d - 1][f]))) {
            s.actions[d].push_back({Pass::forward, f, d});
            f_end[d][f] = now + 1;
            ++forwards[d];
          } else if (weights[d] < b) {
            s.actions[d].push_back({Pass::backward_weight, weights[d]++, d});
          } else {
            continue;
          }
          free_at[d] = now + 1;
          --remaining;
        }
        now += 1;
        DAX_CHECK(now <= 3.0 * p * m + p, "pipeline schedule ZBH1: no stage can go on at time ", now);
      }
      break;
    }
  }
  return s;
}
#else
;
#endif

/// Plays `schedule` out: each stage runs its passes in its order, each as soon as the stage is free
/// and what it needs has finished (a chunk's forward needs the previous chunk's forward of the same
/// microbatch; a backward needs the next chunk's backward, or ZB-H1's B, and its own forward; a W
/// needs its own B). Sends take no time here. Throws dax::Error if the orders wait on each other.
DAX_OUTLINE ScheduleTimes simulate(const Schedule& schedule, const PassCosts& costs = {})
#if DAX_HEADER_DEFINITIONS
{
  const int p = schedule.stages, m = schedule.microbatches, c = schedule.chunks();
  // End times by pass kind, [chunk][microbatch]; -1 while not run. backward_input doubles as the
  // whole backward's end for the schedules that do not split it.
  std::vector<std::vector<double>> f_end(c, std::vector<double>(m, -1)), b_end = f_end, w_end = f_end;
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  ScheduleTimes times;
  times.busy.assign(p, 0);
  times.peak_activations.assign(p, 0);
  std::vector<int> held(p, 0);
  size_t left = 0;
  for (const auto& list : schedule.actions) left += list.size();
  while (left > 0) {
    bool progress = false;
    for (int d = 0; d < p; ++d) {
      while (next[d] < schedule.actions[d].size()) {
        const Action a = schedule.actions[d][next[d]];
        DAX_CHECK(a.chunk >= 0 && a.chunk < c && schedule.stage_of(a.chunk) == d && a.microbatch >= 0 &&
                      a.microbatch < m,
                  "pipeline schedule: stage ", d, " lists microbatch ", a.microbatch, " of chunk ", a.chunk,
                  ", expected a microbatch below ", m, " of a chunk of this stage");
        double ready = free_at[d], cost = 0;
        const int i = a.microbatch, k = a.chunk;
        if (a.pass == Pass::forward) {
          if (k > 0 && f_end[k - 1][i] < 0) break;
          if (k > 0) ready = std::max(ready, f_end[k - 1][i]);
          cost = costs.forward;
        } else if (a.pass == Pass::backward_weight) {
          if (b_end[k][i] < 0) break;
          ready = std::max(ready, b_end[k][i]);
          cost = costs.backward_weight;
        } else {
          if (f_end[k][i] < 0 || (k + 1 < c && b_end[k + 1][i] < 0)) break;
          ready = std::max(ready, f_end[k][i]);
          if (k + 1 < c) ready = std::max(ready, b_end[k + 1][i]);
          cost = a.pass == Pass::backward ? costs.backward_input + costs.backward_weight : costs.backward_input;
        }
        const double end = ready + cost;
        auto& slot = a.pass == Pass::forward ? f_end[k][i] : a.pass == Pass::backward_weight ? w_end[k][i] : b_end[k][i];
        DAX_CHECK(slot < 0, "pipeline schedule: stage ", d, " runs the same pass of microbatch ", i, " on chunk ", k,
                  " twice");
        slot = end;
        free_at[d] = end;
        times.busy[d] += cost;
        // Activations live from the forward to the pass that last reads them.
        if (a.pass == Pass::forward) times.peak_activations[d] = std::max(times.peak_activations[d], ++held[d]);
        if (a.pass == Pass::backward || a.pass == Pass::backward_input) --held[d];
        times.makespan = std::max(times.makespan, end);
        ++next[d];
        --left;
        progress = true;
      }
    }
    DAX_CHECK(progress, "pipeline schedule ", to_string(schedule.kind), ": the stages' orders wait on each other (",
              left, " passes never become ready)");
  }
  double total = 0;
  for (double b : times.busy) total += b;
  times.bubble = times.makespan > 0 ? 1.0 - total / (p * times.makespan) : 0.0;
  return times;
}
#else
;
#endif

/// The bubble fraction the literature gives, with equal forward, input-gradient and weight-gradient
/// costs: (p - 1) / (m + p - 1) for GPipe and 1F1B, (p - 1) / (v m + p - 1) for interleaved 1F1B
/// (the bubble divided by v), and (p - 1) / (3 m + p - 1) for ZB-H1 (a third of 1F1B's bubble time:
/// only the forward's share of it remains).
inline double bubble_formula(ScheduleKind kind, int stages, int microbatches, int virtual_stages = 1) {
  const double p = stages, m = microbatches, v = virtual_stages;
  switch (kind) {
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b: return (p - 1) / (m + p - 1);
    case ScheduleKind::interleaved_1f1b: return (p - 1) / (v * m + p - 1);
    case ScheduleKind::zero_bubble_h1: return (p - 1) / (3 * m + p - 1);
  }
  return 0;
}

}  // namespace dax::pipeline
