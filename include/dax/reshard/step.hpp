// A reshard plan: a short list of steps, each one collective (or a local copy) over a group of
// mesh axes, taking the array from one sharding to the next, with the elements it moves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <dax/core/shape.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax {

enum class StepKind {
  local_slice,       // each device copies (or keeps) part of what it holds; no communication
  all_gather,        // every member of a group receives every other member's piece
  all_to_all,        // each member sends each other member the part it needs (alltoallv)
  reduce_scatter,    // partial sums reduced, each member keeping its own sub-piece
  all_reduce,        // partial sums reduced, every member keeping the whole piece
  general_exchange,  // the fallback: every device sends each peer block intersections, summed
  make_unreduced,    // devices off coordinate 0 of new unreduced axes hold zeros; no communication
};

inline std::string to_string(StepKind kind) {
  switch (kind) {
    case StepKind::local_slice: return "local_slice";
    case StepKind::all_gather: return "all_gather";
    case StepKind::all_to_all: return "all_to_all";
    case StepKind::reduce_scatter: return "reduce_scatter";
    case StepKind::all_reduce: return "all_reduce";
    case StepKind::general_exchange: return "general_exchange";
    case StepKind::make_unreduced: return "make_unreduced";
  }
  return "?";
}

struct ReshardStep {
  StepKind kind;
  NamedSharding from, to;
  std::vector<int> axes;         // mesh axes of the communicating group (ascending)
  std::vector<int> reduce_axes;  // the subset of `axes` whose partial sums are added
  int64_t elements = 0;          // elements received, max over devices (the collective's algorithm)
};

struct ReshardPlan {
  Shape shape;
  NamedSharding src, dst;
  std::vector<ReshardStep> steps;
  int64_t elements = 0;                   // received per device over all steps (sum of step maxima)
  int64_t lower_bound = 0;                // the fewest elements a device must receive
  int64_t general_exchange_elements = 0;  // what the fallback alone would receive
};

}  // namespace dax
