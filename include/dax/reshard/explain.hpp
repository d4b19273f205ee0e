// A plan as text: one line per step (kind, mesh axes, the sharding it reaches, bytes received per
// device) and the totals against the lower bound and the general exchange.
#pragma once

#include <dax/core/compiled_mode.hpp>
#include <sstream>
#include <string>

#include <dax/core/dtype.hpp>
#include <dax/reshard/step.hpp>

namespace dax::detail {

DAX_OUTLINE std::string axes_text(const Mesh& mesh, const std::vector<int>& axes)
#if DAX_HEADER_DEFINITIONS
{
  std::string s = "(";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", '" : "'") + mesh.axis_names()[axes[i]] + "'";
  return s + (axes.size() == 1 ? ",)" : ")");
}
#else
;
#endif

inline std::string explain_plan(const ReshardPlan& plan, int64_t item_bytes) {
  std::ostringstream out;
  out << "reshard " << to_string(plan.shape) << " " << to_string(plan.src.spec()) << " -> "
      << to_string(plan.dst.spec()) << " on " << to_string(plan.src.mesh()) << "\n";
  if (plan.steps.empty()) out << "  (no steps: every device already holds its target piece)\n";
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const ReshardStep& s = plan.steps[i];
    out << "  " << i + 1 << ". " << to_string(s.kind);
    if (!s.axes.empty()) out << " over " << axes_text(plan.src.mesh(), s.axes);
    out << " -> " << to_string(s.to.spec()) << ": " << s.elements * item_bytes << " bytes/device\n";
  }
  out << "  total " << plan.elements * item_bytes << " bytes/device, lower bound "
      << plan.lower_bound * item_bytes << ", general exchange " << plan.general_exchange_elements * item_bytes
      << "\n";
  return out.str();
}

}  // namespace dax::detail
