// Explain for ops: what an elementwise op or a sum would move before computing, from the same
// cached rules the ops run (explain_matmul and explain_reshape live beside their ops).
#pragma once

#include <sstream>
#include <string>

#include <dax/ops/elementwise.hpp>
#include <dax/ops/reduction.hpp>
#include <dax/reshard/explain.hpp>

namespace dax {

/// The elementwise rule for these operands (+, *, where, ...): the result's sharding and, per
/// operand, the sharding it is moved to and the bytes that costs (as for ops that reduce unreduced
/// operands first, like maximum or where; + and * may keep partial sums instead).
template <class... T>
std::string explain_elementwise(const DistArray<T>&... xs) {
  const auto rule = detail::elementwise_rule({xs.shape()...}, {xs.sharding()...}, detail::Linearity::none);
  std::ostringstream out;
  out << "elementwise -> " << to_string(rule.out_shape) << " " << to_string(rule.output.spec()) << "\n";
  size_t i = 0;
  const int64_t bytes[] = {static_cast<int64_t>(sizeof(T))...};
  (void)std::initializer_list<int>{(
      out << "  operand " << i << " " << to_string(xs.shape()) << " " << to_string(xs.sharding().spec()) << " -> "
          << to_string(rule.inputs[i].spec()) << ": "
          << detail::reshard_cost(xs.shape(), xs.sharding(), rule.inputs[i]) * bytes[i] << " bytes/device\n",
      ++i, 0)...};
  out << "  total " << [&] {
    int64_t t = 0;
    size_t k = 0;
    (void)std::initializer_list<int>{(t += detail::reshard_cost(xs.shape(), xs.sharding(), rule.inputs[k]) * bytes[k], ++k, 0)...};
    return t;
  }() << " bytes/device, ~" << detail::time_text(rule.time) << " estimated\n";
  return out.str();
}

/// What sum(x, dims, keepdims, out) communicates: the local partial results' sharding and the
/// reshard that brings them to the result's.
template <class T>
std::string explain_sum(const DistArray<T>& x, const std::vector<int>& dims = {}, bool keepdims = false,
                        const std::optional<NamedSharding>& out = std::nullopt) {
  const auto flags = detail::reduced_dims(x.shape(), dims, "sum");
  const auto rule = detail::reduction_rule(x.shape(), x.sharding(), flags, keepdims, true);
  const NamedSharding target =
      out ? *out : detail::with_unreduced_axes(rule.partial, rule.out_shape.size(), {});
  return "sum: local partial sums " + to_string(rule.partial.spec()) + "\n" +
         detail::explain_plan(detail::plan_reshard(rule.out_shape, rule.partial, target), sizeof(T));
}

}  // namespace dax
