// Make unreduced: a value becomes a partial sum over new mesh axes by keeping it on the devices
// at coordinate 0 of those axes and zeros elsewhere (DTensor's Replicate -> Partial). Local.
#pragma once

#include <optional>

#include <dax/reshard/exchange.hpp>

namespace dax::detail {

inline std::optional<ReshardStep> plan_make_unreduced(const Shape& shape, const NamedSharding& from,
                                                      const NamedSharding& to) {
  for (size_t d = 0; d < shape.size(); ++d)
    if (from.dim_axes(d) != to.dim_axes(d)) return std::nullopt;
  std::vector<int> added;
  for (int a : from.unreduced_axes())
    if (!to.is_unreduced_over(a)) return std::nullopt;
  for (int a : to.unreduced_axes())
    if (!from.is_unreduced_over(a)) added.push_back(a);
  if (added.empty()) return std::nullopt;
  return ReshardStep{StepKind::make_unreduced, from, to, added, {}, 0};
}

/// Whether a device keeps its value in a make_unreduced step (else it holds zeros).
inline bool keeps_value(const ReshardStep& step, const std::vector<int64_t>& coords) {
  return at_origin_of(coords, step.axes);
}

}  // namespace dax::detail
