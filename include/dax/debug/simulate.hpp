// dax::simulate: runs a step on simulated devices (the meta backend, runtime/runtime.hpp's
// MetaDevices) and reports what one of them would hold and move: its peak memory, every
// collective kind per mesh-axis group with its calls and received bytes (the same counters a real
// run fills, so the same numbers), the products' FLOPs, and a step time estimated from the cost
// model. PyTorch's counterparts are FakeTensorMode + CommDebugMode; JAX's, a compiled step's
// memory_analysis() and cost_analysis(), which need the devices.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <dax/array/profile_hook.hpp>
#include <dax/backend/memory_stats.hpp>
#include <dax/backend/meta/memory.hpp>
#include <dax/comm/comm_stats.hpp>
#include <dax/ops/cost.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax {

struct SimulatedCollective {
  std::string kind;  // "all_gather", "all_reduce", ...
  std::string axes;  // the mesh-axis group, as explain writes it: "('data',)"
  int64_t calls = 0;
  int64_t bytes = 0;  // received by the simulated device, over all calls
  std::string site;   // in `sites`: the call site (dax::NamedScope or explicit move), "" outside them
};

struct SimulationReport {
  int devices = 1;
  int device = 0;
  int64_t peak_bytes = 0;   // the most the device's buffers held at once (dax::memory_stats' peak)
  int64_t final_bytes = 0;  // what they held when the step returned: what its return value keeps
                            // (return the parameters and optimizer state to count them)
  std::vector<MemoryPartBytes> parts;  // both by part (dax::MemoryPart; bytes_in_use: at the end)
  std::vector<SimulatedCollective> collectives;
  std::vector<SimulatedCollective> sites;  // the same per call site (comm_stats().by_site())
  double gemm_flops = 0;    // the products' 2mnk, summed
  int64_t kernels = 0;      // local kernels the device would have run
  CostModel model;          // what the estimate below assumes (and what the rules chose plans by)

  int64_t bytes_received() const {
    int64_t n = 0;
    for (const auto& c : collectives) n += c.bytes;
    return n;
  }
  int64_t collective_calls() const {
    int64_t n = 0;
    for (const auto& c : collectives) n += c.calls;
    return n;
  }
  /// Received bytes over the link's bandwidth plus each collective's fixed cost.
  double communication_s() const {
    return static_cast<double>(bytes_received()) / model.link_bytes_per_s +
           static_cast<double>(collective_calls()) * model.collective_s;
  }
  /// The products' FLOPs at the device's rate (elementwise kernels, bound by memory, are left out).
  double compute_s() const { return gemm_flops / model.flops_per_s; }
  /// The step with nothing overlapped: an upper bound under the model.
  double step_s() const { return communication_s() + compute_s(); }

  /// One table for people: memory, then every collective, then the estimate.
  std::string table() const {
    std::ostringstream out;
    char line[256];
    std::snprintf(line, sizeof line, "simulated device %d of %d: peak memory %.4g GB, at the end %.4g GB\n", device,
                  devices, peak_bytes / 1e9, final_bytes / 1e9);
    out << line;
    out << "  at the peak:";
    for (const auto& p : parts)
      if (p.at_peak != 0) {
        std::snprintf(line, sizeof line, " %s %.4g GB;", p.name.c_str(), p.at_peak / 1e9);
        out << line;
      }
    out << "\n";
    std::snprintf(line, sizeof line, "  %-16s %-28s %10s %16s\n", "collective", "mesh axes", "calls", "bytes received");
    out << line;
    for (const auto& c : collectives) {
      std::snprintf(line, sizeof line, "  %-16s %-28s %10lld %16lld\n", c.kind.c_str(), c.axes.c_str(),
                    static_cast<long long>(c.calls), static_cast<long long>(c.bytes));
      out << line;
    }
    // By call site, where the program named any (dax::NamedScope, or an explicit move's line).
    const bool named = std::any_of(sites.begin(), sites.end(), [](const auto& c) { return !c.site.empty(); });
    if (named) {
      std::snprintf(line, sizeof line, "  by call site:\n");
      out << line;
      for (const auto& c : sites) {
        std::snprintf(line, sizeof line, "    %-16s %-26s %10lld %16lld  ", c.kind.c_str(), c.axes.c_str(),
                      static_cast<long long>(c.calls), static_cast<long long>(c.bytes));
        out << line << (c.site.empty() ? "(outside every scope)" : c.site) << "\n";
      }
    }
    std::snprintf(line, sizeof line,
                  "  estimated step %.4g s: communication %.4g s, compute %.4g s (%.4g GFLOP at %.4g TFLOP/s, "
                  "links at %.4g GB/s)\n",
                  step_s(), communication_s(), compute_s(), gemm_flops / 1e9, model.flops_per_s / 1e12,
                  model.link_bytes_per_s / 1e9);
    out << line;
    return out.str();
  }

  /// The same as JSON (one object).
  std::string json() const {
    std::ostringstream out;
    out.precision(17);
    out << "{\"devices\": " << devices << ", \"device\": " << device << ", \"peak_bytes\": " << peak_bytes
        << ", \"final_bytes\": " << final_bytes << ", \"gemm_flops\": " << gemm_flops << ", \"kernels\": " << kernels
        << ", \"bytes_received\": " << bytes_received() << ", \"communication_s\": " << communication_s()
        << ", \"compute_s\": " << compute_s() << ", \"step_s\": " << step_s() << ", \"parts\": [";
    for (size_t i = 0; i < parts.size(); ++i)
      out << (i ? ", " : "") << "{\"name\": \"" << parts[i].name << "\", \"at_peak\": " << parts[i].at_peak
          << ", \"at_end\": " << parts[i].bytes_in_use << "}";
    out << "], \"collectives\": [";
    for (size_t i = 0; i < collectives.size(); ++i) {
      const auto& c = collectives[i];
      out << (i ? ", " : "") << "{\"kind\": \"" << c.kind << "\", \"axes\": \"" << c.axes << "\", \"calls\": " << c.calls
          << ", \"bytes\": " << c.bytes << "}";
    }
    out << "], \"sites\": [";
    for (size_t i = 0; i < sites.size(); ++i) {
      const auto& c = sites[i];
      out << (i ? ", " : "") << "{\"kind\": \"" << c.kind << "\", \"axes\": \"" << c.axes << "\", \"site\": "
          << detail::json_string(c.site) << ", \"calls\": " << c.calls << ", \"bytes\": " << c.bytes << "}";
    }
    out << "]}";
    return out.str();
  }
};

namespace detail {

/// The report of the meta runtime alive now, from the counters its step filled.
inline SimulationReport simulation_report(const Runtime& rt) {
  DAX_CHECK(rt.backend() == Backend::meta, "dax::simulate: the report needs a meta runtime (dax::MetaDevices), "
            "got one on the ", to_string(rt.backend()), " backend");
  SimulationReport r;
  r.devices = rt.size();
  r.device = rt.rank();
  const MemoryStats m = memory_stats();
  r.peak_bytes = m.peak_bytes_in_use;
  r.final_bytes = m.bytes_in_use;
  r.parts = m.parts;
  for (const auto& [key, c] : comm_stats().entries()) r.collectives.push_back({key.first, key.second, c.calls, c.bytes, {}});
  for (const auto& [key, c] : comm_stats().by_site())
    r.sites.push_back({std::get<0>(key), std::get<1>(key), c.calls, c.bytes, std::get<2>(key)});
  r.gemm_flops = meta::kernel_counts().gemm_flops;
  r.kernels = meta::kernel_counts().kernels;
  r.model = cost_model();
  return r;
}

}  // namespace detail

/// Runs `step()` with simulated devices standing in for the real ones (`devices.count` of them,
/// this process playing `devices.device`) and reports what that device held and moved. The step
/// builds what it uses (its model, its optimizer) inside: arrays made before hold real data and
/// belong to the real runtime. What the step returns is kept until the report is taken (its
/// final_bytes). `model`, when given, is the cost model both the rules and the
/// estimate use (dax::cuda_cost_model() plans a GPU run); else the CPU backend's. The process's
/// communication counters are left as they were.
template <class Step>
SimulationReport simulate(MetaDevices devices, Step&& step, std::optional<CostModel> model = std::nullopt) {
  const CommStats saved_stats = comm_stats();
  const std::optional<CostModel> saved_model = detail::cost_model_override();
  struct Restore {
    const CommStats& stats;
    const std::optional<CostModel>& model;
    ~Restore() {
      comm_stats() = stats;
      detail::cost_model_override() = model;
    }
  } restore{saved_stats, saved_model};
  if (model) detail::cost_model_override() = *model;
  comm_stats().reset();
  Runtime meta(devices);
  if constexpr (std::is_void_v<std::invoke_result_t<Step&>>) {
    step();
    return detail::simulation_report(meta);
  } else {
    const auto kept = step();  // counted in final_bytes, then let go before the meta runtime
    return detail::simulation_report(meta);
  }
}

}  // namespace dax
