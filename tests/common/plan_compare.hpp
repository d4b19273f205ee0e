// Comparing a planned reshard with the oracle's, and checking it on simulated devices: shared by
// the oracle tests.
#pragma once

#include <random>
#include <string>

#include <dax/reshard/explain.hpp>
#include <dax/reshard/planner.hpp>
#include "simulate.hpp"

namespace dax::test {

inline std::string describe(const ReshardPlan& p) { return detail::explain_plan(p, 1); }

/// The same steps (kind, group, source, target, elements), total, lower bound and general-exchange
/// elements.
inline bool same_plan(const ReshardPlan& a, const ReshardPlan& b) {
  if (a.elements != b.elements || a.lower_bound != b.lower_bound ||
      a.general_exchange_elements != b.general_exchange_elements || a.steps.size() != b.steps.size())
    return false;
  for (size_t i = 0; i < a.steps.size(); ++i) {
    const auto &x = a.steps[i], &y = b.steps[i];
    if (x.kind != y.kind || x.axes != y.axes || x.reduce_axes != y.reduce_axes || x.elements != y.elements ||
        !(x.to == y.to) || !(x.from == y.from))
      return false;
  }
  return true;
}

/// Running the plan on simulated devices gives each its exact target piece of random partials.
inline bool plan_is_right(const ReshardPlan& p, std::mt19937& rng) {
  const auto partials = random_partials(p.shape, p.src, rng);
  auto buffers = pieces_of_partials(p.shape, partials, p.src);
  for (const auto& step : p.steps)
    if (!simulate_step(p.shape, step, buffers)) return false;
  return buffers == expected_pieces(p.shape, partials, p.dst);
}

}  // namespace dax::test
