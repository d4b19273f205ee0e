// Explain for ops: what an elementwise op, a sum or a slice would move, from the same rules the ops
// run (explain_matmul and explain_reshape live beside their ops).
#pragma once

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include <dax/ops/elementwise.hpp>
#include <dax/ops/join.hpp>
#include <dax/ops/reduction.hpp>
#include <dax/reshard/explain.hpp>
#include <dax/reshard/slice_exchange.hpp>

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

/// What slice(x, start, stop, step) moves: nothing, or one all-to-all in which each device receives
/// the kept elements of its new piece it lacks (its lower bound). Pure: every device's exchange is
/// worked out here, none runs.
template <class T>
std::string explain_slice(const DistArray<T>& x, const std::vector<int64_t>& start, const std::vector<int64_t>& stop,
                          std::vector<int64_t> step = {}) {
  const detail::Window w = detail::slice_window(x.shape(), start, stop, std::move(step));
  const NamedSharding& s = x.sharding();
  std::ostringstream out;
  out << "slice " << to_string(x.shape()) << " " << to_string(s.spec()) << " [";
  for (size_t d = 0; d < w.lo.size(); ++d) {
    const int64_t end = w.shape[d] ? w.lo[d] + w.step[d] * (w.shape[d] - 1) + 1 : w.lo[d];
    out << (d ? ", " : "") << w.lo[d] << ":" << end;
    if (w.step[d] != 1) out << ":" << w.step[d];
  }
  out << "] -> " << to_string(w.shape) << " " << to_string(s.spec()) << ": ";
  const std::vector<int> axes = detail::window_moving_axes(w, s);
  if (axes.empty()) return out.str() + "no communication (each device holds its new piece)\n";
  int64_t most = 0;
  for (int device : s.mesh().devices())
    most = std::max(most, detail::received_elements(detail::window_exchange_for(w, s, axes, device, true)));
  out << "all_to_all over " << detail::axes_text(s.mesh(), axes) << ": " << most * int64_t(sizeof(T))
      << " bytes/device (the most one device receives: its lower bound)\n";
  return out.str();
}

}  // namespace dax
