// The sharding rule of elementwise ops (pure): the output follows the operand whose layout costs
// most to move (each operand's layout, lifted to the output's dimensions, is a candidate; the one
// with the least estimated time wins -- the others' moves over the link plus the local work on the
// largest output piece, ops/cost.hpp -- ties to the earlier operand). Stretched
// (broadcast) dimensions are replicated. Unreduced operands stay unreduced where the op is exact
// on partial sums (a sum of operands unreduced over the same axes; a product or quotient of one
// unreduced operand by others that are not); otherwise every operand is reduced first.
#pragma once

#include <dax/core/compiled_mode.hpp>
#include <optional>
#include <string>
#include <vector>

#include <dax/ops/broadcast.hpp>
#include <dax/ops/cost.hpp>
#include <dax/sharding/build.hpp>

namespace dax::detail {

/// How an op treats partial sums.
enum class Linearity {
  none,      // reduce every unreduced operand first (exp, maximum, adding a scalar...)
  additive,  // exact when every operand is unreduced over the same axes (add, subtract, negate)
  scaling,   // exact when only the first operand is unreduced (multiply, divide by the rest)
};

struct ElementwiseRule {
  Shape out_shape;
  std::vector<NamedSharding> inputs;  // the sharding each operand is resharded to
  NamedSharding output;
  int64_t elements = 0;               // moved per device to get there
  double time = 0;                    // estimated seconds: the moves plus one FLOP per output element
};

/// The unreduced axes the output keeps (empty: reduce everything first).
inline std::vector<int> kept_unreduced(const std::vector<NamedSharding>& in, Linearity linearity) {
  if (linearity == Linearity::additive) {
    for (const auto& s : in)
      if (s.unreduced_axes() != in[0].unreduced_axes()) return {};
    return in[0].unreduced_axes();
  }
  if (linearity == Linearity::scaling) {
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i].is_unreduced()) return {};
    return in[0].unreduced_axes();
  }
  return {};
}

DAX_OUTLINE ElementwiseRule elementwise_rule(const std::vector<Shape>& shapes, const std::vector<NamedSharding>& in,
                                        Linearity linearity, int64_t item_bytes = 4)
#if DAX_HEADER_DEFINITIONS
{
  const CostModel model = cost_model();
  const Mesh& mesh = in[0].mesh();
  for (const auto& s : in)
    DAX_CHECK(s.mesh() == mesh, "elementwise op: operands must be on the same mesh, got ", to_string(mesh),
              " and ", to_string(s.mesh()));
  const Shape out = broadcast_shapes(shapes);
  const std::vector<int> unreduced = kept_unreduced(in, linearity);
  auto uses_unreduced = [&](const std::vector<std::vector<int>>& dims) {
    for (const auto& d : dims)
      for (int a : d)
        if (has_axis(unreduced, a)) return true;
    return false;
  };
  // The sharding operand i must have when the output's dimensions are split by `dims`.
  auto operand_sharding = [&](size_t i, const std::vector<std::vector<int>>& dims) {
    const size_t off = out.size() - shapes[i].size();
    std::vector<std::vector<int>> mine(shapes[i].size());
    for (size_t d = 0; d < shapes[i].size(); ++d)
      if (!is_broadcast_dim(shapes[i], out, d)) mine[d] = dims[off + d];
    const bool keeps = linearity == Linearity::scaling ? (i == 0 && !unreduced.empty()) : !unreduced.empty();
    return make_sharding(mesh, mine, keeps ? unreduced : std::vector<int>{});
  };
  std::optional<ElementwiseRule> best;
  for (size_t c = 0; c < in.size(); ++c) {
    std::vector<std::vector<int>> dims(out.size());
    const size_t off = out.size() - shapes[c].size();
    for (size_t d = 0; d < shapes[c].size(); ++d)
      if (!is_broadcast_dim(shapes[c], out, d)) dims[off + d] = in[c].dim_axes(d);
    if (uses_unreduced(dims)) continue;  // never the unreduced operand itself, so one remains
    ElementwiseRule rule{out, {}, make_sharding(mesh, dims, unreduced), 0};
    int collectives = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      rule.inputs.push_back(operand_sharding(i, dims));
      const MoveCost move = reshard_move_cost(shapes[i], in[i], rule.inputs.back());
      rule.elements += move.elements;
      collectives += move.collectives;
    }
    rule.time = estimated_time(model, rule.elements, item_bytes, static_cast<double>(largest_piece(out, rule.output)),
                               collectives);
    if (!best || rule.time < best->time) best = std::move(rule);
  }
  return *best;
}
#else
;
#endif

}  // namespace dax::detail
