// All-gather: the members of each group end with the same piece, assembled from the pieces each
// of them holds (sharded -> replicated over some axes). Each member sends one region to all.
#pragma once

#include <optional>

#include <dax/reshard/exchange.hpp>

namespace dax::detail {

inline std::optional<ReshardStep> plan_all_gather(const Shape& shape, const NamedSharding& from,
                                                  const NamedSharding& to) {
  if (from.unreduced_axes() != to.unreduced_axes()) return std::nullopt;
  const auto axes = involved_axes(shape, from, to, {});
  if (axes.empty()) return std::nullopt;
  int64_t most = 0;
  for (int d : from.mesh().devices()) {
    const Exchange ex = exchange_for(shape, from, to, axes, {}, d);
    for (size_t j = 0; j < ex.members.size(); ++j) {
      if (static_cast<int>(j) == ex.self) continue;
      const auto pc = from.mesh().coords(ex.members[j]);
      // Everyone in the group wants the same piece, and each sends all peers what it has of it.
      if (to.box_at(pc, shape) != ex.to_block) return std::nullopt;
      if (!same_region(ex.send[j], ex.keep)) return std::nullopt;
    }
    most = std::max(most, received_elements(ex));
  }
  return ReshardStep{StepKind::all_gather, from, to, axes, {}, most};
}

}  // namespace dax::detail
