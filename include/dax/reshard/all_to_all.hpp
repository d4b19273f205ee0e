// All-to-all: each member of a group sends every other member the part of its piece that member
// needs (an alltoallv). It covers any reshard without reduction, at the lower bound of bytes.
#pragma once

#include <optional>

#include <dax/reshard/exchange.hpp>

namespace dax::detail {

inline std::optional<ReshardStep> plan_all_to_all(const Shape& shape, const NamedSharding& from,
                                                   const NamedSharding& to) {
  if (from.unreduced_axes() != to.unreduced_axes()) return std::nullopt;
  const auto axes = involved_axes(shape, from, to, {});
  if (axes.empty()) return std::nullopt;
  return ReshardStep{StepKind::all_to_all, from, to, axes, {}, max_received(shape, from, to, {})};
}

}  // namespace dax::detail
