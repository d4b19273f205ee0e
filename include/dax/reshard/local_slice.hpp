// Local slice: every device's target piece lies inside the piece it holds (replicated -> sharded,
// a finer split of the same axes); no communication. Checked on representative devices.
#pragma once

#include <optional>

#include <dax/reshard/piece_math.hpp>
#include <dax/reshard/step.hpp>

namespace dax::detail {

inline std::optional<ReshardStep> plan_local_slice(const Shape& shape, const NamedSharding& from,
                                                   const NamedSharding& to) {
  if (from.unreduced_axes() != to.unreduced_axes()) return std::nullopt;
  if (!target_inside_source(*step_geometry(shape, from, to))) return std::nullopt;
  return ReshardStep{StepKind::local_slice, from, to, {}, {}, 0};
}

}  // namespace dax::detail
