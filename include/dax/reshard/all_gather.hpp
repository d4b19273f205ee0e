// All-gather: the members of each group end with the same piece, assembled from the pieces each
// of them holds (sharded -> replicated over some axes). Each member sends one region to all.
// Decided from the specs; the bytes in closed form.
#pragma once

#include <optional>

#include <dax/reshard/exchange.hpp>

namespace dax::detail {

inline std::optional<ReshardStep> plan_all_gather(const Shape& shape, const NamedSharding& from,
                                                  const NamedSharding& to) {
  if (from.unreduced_axes() != to.unreduced_axes()) return std::nullopt;
  const auto axes = involved_axes(shape, from, to, {});
  if (axes.empty()) return std::nullopt;
  // Everyone in a group wants the same piece: no group axis splits a non-empty dimension of the
  // target (two different pieces of one are different boxes). Each member then sends every peer
  // the part of that piece it holds (group axes split only the source, so all are sources).
  for (size_t d = 0; d < shape.size(); ++d)
    for (int a : axes)
      if (shape[d] > 0 && has_axis(to.dim_axes(d), a)) return std::nullopt;
  return ReshardStep{StepKind::all_gather, from, to, axes, {}, max_received(shape, from, to, {})};
}

}  // namespace dax::detail
