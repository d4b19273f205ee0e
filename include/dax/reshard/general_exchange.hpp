// The general exchange, always correct: every device sends each peer the intersection of its
// piece with the peer's target piece, and the receiver adds partial sums where it reduces.
// Every fast path is checked against it. Planned in closed form; each device computes only its
// own sends and receives when it runs (exchange_for).
#pragma once

#include <optional>

#include <dax/reshard/exchange.hpp>
#include <dax/reshard/reduction_axes.hpp>

namespace dax::detail {

inline std::optional<ReshardStep> plan_general_exchange(const Shape& shape, const NamedSharding& from,
                                                        const NamedSharding& to) {
  for (int a : to.unreduced_axes())
    if (!from.is_unreduced_over(a)) return std::nullopt;
  const auto reduce = reduced_axes(from, to);
  const auto axes = involved_axes(shape, from, to, reduce);
  return ReshardStep{StepKind::general_exchange, from, to, axes, reduce,
                     max_received(shape, from, to, reduce)};
}

}  // namespace dax::detail
