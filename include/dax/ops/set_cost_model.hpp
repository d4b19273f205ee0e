// dax::set_cost_model: replaces the constants the sharding rules choose by (ops/cost.hpp).
// Collective over the world: every rank must pass the same values, or ranks would choose
// different plans and deadlock in mismatched collectives; the call checks it with one small
// all-gather and throws the same dax::Error on every rank when they differ.
#pragma once

#include <cmath>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/ops/cost.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax {

namespace detail {

inline void check_same_cost_model_everywhere(const CostModel& m) {
  Runtime* rt = current_runtime();
  if (rt == nullptr || rt->size() == 1) return;
  const std::vector<int64_t> all =
      rt->world().all_gather_host({bits_of(m.link_bytes_per_s), bits_of(m.flops_per_s), bits_of(m.collective_s)});
  for (size_t r = 0; r + 2 < all.size(); r += 3)
    DAX_CHECK(all[r] == all[0] && all[r + 1] == all[1] && all[r + 2] == all[2],
              "set_cost_model: every rank must pass the same cost model (rules must choose the same plans); "
              "rank 0 passed {link ", bit_cast_double(all[0]), " B/s, ", bit_cast_double(all[1]), " FLOP/s, ",
              bit_cast_double(all[2]), " s a collective} but rank ", r / 3, " passed {link ",
              bit_cast_double(all[r]), " B/s, ", bit_cast_double(all[r + 1]), " FLOP/s, ",
              bit_cast_double(all[r + 2]), " s a collective}");
}

}  // namespace detail

/// Sets the model every sharding rule chooses by from now on (rules cached under another model
/// are not reused). Collective: call it on every rank with the same values.
inline void set_cost_model(CostModel m) {
  m.collective_s += 0.0;  // -0 as 0: the rule caches hash and the ranks compare the bits
  DAX_CHECK(std::isfinite(m.link_bytes_per_s) && m.link_bytes_per_s > 0 && std::isfinite(m.flops_per_s) &&
                m.flops_per_s > 0,
            "set_cost_model: link_bytes_per_s and flops_per_s must be finite and > 0, got ", m.link_bytes_per_s,
            " and ", m.flops_per_s);
  DAX_CHECK(std::isfinite(m.collective_s) && m.collective_s >= 0,
            "set_cost_model: collective_s must be finite and >= 0, got ", m.collective_s);
  detail::check_same_cost_model_everywhere(m);
  detail::cost_model_override() = m;
}

/// Back to the active backend's fixed constants. Collective like set_cost_model.
inline void reset_cost_model() { detail::cost_model_override().reset(); }

}  // namespace dax
