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
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <dax/array/explicit_sharding.hpp>
#include <dax/array/profile_hook.hpp>
#include <dax/backend/memory_stats.hpp>
#include <dax/backend/meta/memory.hpp>
#include <dax/comm/comm_stats.hpp>
#include <dax/ops/cost.hpp>
#include <dax/runtime/runtime.hpp>
#include <dax/sharding/mesh.hpp>

namespace dax {

struct SimulatedCollective {
  std::string kind;  // "all_gather", "all_reduce", ...
  std::string axes;  // the mesh-axis group, as explain writes it: "('data',)"
  int64_t calls = 0;
  int64_t bytes = 0;  // received by the simulated device, over all calls
  std::string site;   // in `sites`: the call site (dax::NamedScope or explicit move), "" outside them
  friend bool operator==(const SimulatedCollective&, const SimulatedCollective&) = default;
};

/// Moves that ops made of their inputs on their own (what dax::ExplicitSharding would refuse), by
/// op, array and layouts.
struct SimulatedImplicitReshard {
  std::string op;     // "matmul", "add", ...
  std::string array;  // dtype and shape: "float32[8, 8]"
  std::string from, to;  // the partition specs
  int64_t count = 0;
  int64_t bytes = 0;  // received per device (the most any device receives), over all of them
  friend bool operator==(const SimulatedImplicitReshard&, const SimulatedImplicitReshard&) = default;
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
  std::vector<SimulatedImplicitReshard> implicit_reshards;  // in the order first seen
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
    if (implicit_reshards.empty()) {
      out << "  implicit reshards: none (every move is one the step wrote)\n";
    } else {
      int64_t moves = 0, moved = 0;
      for (const auto& r : implicit_reshards) moves += r.count, moved += r.bytes;
      out << "  implicit reshards (an op moved an input on its own; dax::ExplicitSharding refuses them): " << moves
          << ", " << moved << " bytes\n";
      for (const auto& r : implicit_reshards) {
        std::snprintf(line, sizeof line, "    %-12s %-24s %s -> %s: %lld, %lld bytes\n", r.op.c_str(), r.array.c_str(),
                      r.from.c_str(), r.to.c_str(), static_cast<long long>(r.count), static_cast<long long>(r.bytes));
        out << line;
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
    out << "], \"implicit_reshards\": [";
    for (size_t i = 0; i < implicit_reshards.size(); ++i) {
      const auto& r = implicit_reshards[i];
      out << (i ? ", " : "") << "{\"op\": " << detail::json_string(r.op) << ", \"array\": " << detail::json_string(r.array)
          << ", \"from\": " << detail::json_string(r.from) << ", \"to\": " << detail::json_string(r.to)
          << ", \"count\": " << r.count << ", \"bytes\": " << r.bytes << "}";
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

namespace detail {

/// One simulation (dax::simulate's body); `seen`, when given, gets the largest mesh the step used.
template <class Step>
SimulationReport simulate_one(MetaDevices devices, Step& step, const std::optional<CostModel>& model,
                              std::optional<Mesh>* seen) {
  const CommStats saved_stats = comm_stats();
  const std::optional<CostModel> saved_model = cost_model_override();
  struct Restore {
    const CommStats& stats;
    const std::optional<CostModel>& model;
    ~Restore() {
      comm_stats() = stats;
      cost_model_override() = model;
    }
  } restore{saved_stats, saved_model};
  if (model) cost_model_override() = *model;
  comm_stats().reset();
  Runtime meta(devices);
  // The implicit moves are listed, not refused (a scope of the step's own still decides inside it).
  ExplicitSharding implicit(ExplicitSharding::Action::record);
  auto report = [&] {
    if constexpr (std::is_void_v<std::invoke_result_t<Step&>>) {
      step();
      return simulation_report(meta);
    } else {
      const auto kept = step();  // counted in final_bytes, then let go before the meta runtime
      return simulation_report(meta);
    }
  }();
  for (const ImplicitReshard& r : implicit.seen()) {
    SimulatedImplicitReshard row{r.op, to_string(r.dtype) + to_string(r.shape), to_string(r.from.spec()),
                                 to_string(r.to.spec()), 1, r.bytes};
    auto same = std::find_if(report.implicit_reshards.begin(), report.implicit_reshards.end(), [&](const auto& x) {
      return x.op == row.op && x.array == row.array && x.from == row.from && x.to == row.to;
    });
    if (same == report.implicit_reshards.end()) report.implicit_reshards.push_back(std::move(row));
    else ++same->count, same->bytes += row.bytes;
  }
  if (seen && meta.largest_mesh_seen()) *seen = *meta.largest_mesh_seen();
  return report;
}

/// Whether two devices' reports say the same, all but which device each is.
inline bool same_view(const SimulationReport& a, const SimulationReport& b) {
  return a.peak_bytes == b.peak_bytes && a.final_bytes == b.final_bytes && a.parts == b.parts &&
         a.collectives == b.collectives && a.sites == b.sites && a.implicit_reshards == b.implicit_reshards &&
         a.gemm_flops == b.gemm_flops && a.kernels == b.kernels;
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
  return detail::simulate_one(devices, step, model, nullptr);
}

/// Devices whose reports are the same: which of the mesh's devices they are and one report for
/// them all (dax::simulate_classes).
struct DeviceClass {
  int64_t count = 0;          // devices of the mesh it stands for (of those enumerated: see `exact`)
  std::string members;        // which, by mesh coordinates: "stage=0 (any 'data', 'model')"
  std::vector<int> simulated; // the devices simulated that gave this report (report.device first)
  SimulationReport report;
};

struct SimulationClasses {
  int devices = 1;
  std::string mesh;                        // the largest mesh the step used
  std::vector<std::string> varying_axes;   // the axes along which the reports differ
  bool exact = true;  // every coordinate of the varying axes simulated (else a sample of the
                      // larger ones: the counts cover the sampled coordinates only)
  int simulations = 0;
  std::vector<DeviceClass> classes;        // the largest first

  std::string table() const {
    std::ostringstream out;
    out << classes.size() << (classes.size() == 1 ? " class" : " classes") << " of devices among " << devices
        << " simulated devices on " << mesh << ", from " << simulations << " simulations; the reports differ along "
        << (varying_axes.empty() ? std::string("no axis") : join_axes(varying_axes))
        << (exact ? "" : " (larger axes sampled: counts cover the sampled coordinates)") << "\n";
    for (size_t i = 0; i < classes.size(); ++i) {
      const DeviceClass& c = classes[i];
      out << "class " << i + 1 << ": " << c.count << " device" << (c.count == 1 ? "" : "s") << ", " << c.members << "\n";
      std::istringstream lines(c.report.table());
      for (std::string line; std::getline(lines, line);) out << "  " << line << "\n";
    }
    return out.str();
  }

  std::string json() const {
    std::ostringstream out;
    out << "{\"devices\": " << devices << ", \"mesh\": " << detail::json_string(mesh) << ", \"varying_axes\": [";
    for (size_t i = 0; i < varying_axes.size(); ++i) out << (i ? ", " : "") << detail::json_string(varying_axes[i]);
    out << "], \"exact\": " << (exact ? "true" : "false") << ", \"simulations\": " << simulations << ", \"classes\": [";
    for (size_t i = 0; i < classes.size(); ++i) {
      const DeviceClass& c = classes[i];
      out << (i ? ", " : "") << "{\"count\": " << c.count << ", \"members\": " << detail::json_string(c.members)
          << ", \"simulated\": [";
      for (size_t k = 0; k < c.simulated.size(); ++k) out << (k ? ", " : "") << c.simulated[k];
      out << "], \"report\": " << c.report.json() << "}";
    }
    out << "]}";
    return out.str();
  }

 private:
  static std::string join_axes(const std::vector<std::string>& axes) {
    std::string text;
    for (size_t i = 0; i < axes.size(); ++i) text += (i ? ", '" : "'") + axes[i] + "'";
    return text;
  }
};

/// One report per class of devices that would hold and move the same: runs `step` on
/// `devices.count` simulated devices as device 0, then as the device one step and the last step
/// along each axis of the largest mesh the step used, and, along the axes where any of those
/// differed from device 0 (a pipeline's 'stage', an axis that splits a dimension unevenly),
/// as every combination of their coordinates (at most 64 coordinates an axis; a larger one is
/// sampled: 0, 1, 2, the middle and the last two). Devices differing only along the other axes
/// are taken to be alike: the assumption is that a device's view changes along an axis only if
/// it changes between the first, second and last coordinates of that axis; the tests check it
/// against simulating every device at small sizes. `devices.device` is ignored.
template <class Step>
SimulationClasses simulate_classes(MetaDevices devices, Step&& step, std::optional<CostModel> model = std::nullopt) {
  std::map<int, SimulationReport> done;
  std::optional<Mesh> mesh;
  const auto run = [&](int device) -> const SimulationReport& {
    auto it = done.find(device);
    if (it == done.end())
      it = done.emplace(device, detail::simulate_one({devices.count, device}, step, model, mesh ? nullptr : &mesh)).first;
    return it->second;
  };
  SimulationClasses out;
  out.devices = devices.count;
  const SimulationReport& first = run(0);  // learns the mesh
  if (!mesh) {  // no mesh: every device runs the same program on nothing split
    out.mesh = "no mesh";
    out.simulations = 1;
    out.classes.push_back({devices.count, "every device", {0}, first});
    return out;
  }
  out.mesh = to_string(*mesh);
  const int axes = mesh->num_axes();
  const std::vector<int64_t> origin = mesh->coords(mesh->devices().front());
  const auto device_with = [&](int axis, int64_t coordinate) {
    std::vector<int64_t> c = origin;
    c[static_cast<size_t>(axis)] = coordinate;
    return mesh->device_at(c);
  };
  const SimulationReport& origin_report = run(mesh->devices().front());
  // The axes along which the view changes, and the coordinates to simulate along each.
  std::vector<int> varying;
  std::vector<std::vector<int64_t>> coordinates;
  for (int a = 0; a < axes; ++a) {
    const int64_t n = mesh->axis_size(a);
    bool differs = false;
    for (int64_t c : {int64_t{1}, n - 1})
      if (c > 0 && c < n && !detail::same_view(run(device_with(a, c)), origin_report)) differs = true;
    if (!differs) continue;
    varying.push_back(a);
    out.varying_axes.push_back(mesh->axis_names()[static_cast<size_t>(a)]);
    std::vector<int64_t> along;
    if (n <= 64) {
      for (int64_t c = 0; c < n; ++c) along.push_back(c);
    } else {
      along = {0, 1, 2, n / 2, n - 2, n - 1};
      out.exact = false;
    }
    coordinates.push_back(along);
  }
  int64_t alike = 1;  // devices per combination: the non-varying axes' sizes
  std::string any;
  for (int a = 0; a < axes; ++a)
    if (std::find(varying.begin(), varying.end(), a) == varying.end() && mesh->axis_size(a) > 1) {
      alike *= mesh->axis_size(a);
      any += (any.empty() ? "'" : ", '") + mesh->axis_names()[static_cast<size_t>(a)] + "'";
    }
  // Every combination of the varying axes' coordinates, grouped by report.
  struct Group {
    std::vector<std::string> combinations;
    DeviceClass cls;
  };
  std::vector<Group> groups;
  std::vector<size_t> at(varying.size(), 0);
  while (true) {
    std::vector<int64_t> c = origin;
    std::string name;
    for (size_t v = 0; v < varying.size(); ++v) {
      c[static_cast<size_t>(varying[v])] = coordinates[v][at[v]];
      name += (v ? ", " : "") + mesh->axis_names()[static_cast<size_t>(varying[v])] + "=" +
              std::to_string(coordinates[v][at[v]]);
    }
    const int device = mesh->device_at(c);
    const SimulationReport& r = run(device);
    auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) { return detail::same_view(x.cls.report, r); });
    if (g == groups.end()) {
      groups.push_back({});
      g = groups.end() - 1;
      g->cls.report = r;
    }
    g->combinations.push_back(name);
    g->cls.simulated.push_back(device);
    g->cls.count += alike;
    size_t v = 0;  // the next combination, the last axis fastest
    for (; v < varying.size(); ++v) {
      const size_t k = varying.size() - 1 - v;
      if (++at[k] < coordinates[k].size()) break;
      at[k] = 0;
    }
    if (v == varying.size()) break;
  }
  for (Group& g : groups) {
    std::string members;
    const size_t shown = std::min<size_t>(g.combinations.size(), 8);
    for (size_t i = 0; i < shown; ++i) members += (i ? "; " : "") + g.combinations[i];
    if (g.combinations.size() > shown) members += "; ... (" + std::to_string(g.combinations.size()) + " in all)";
    if (members.empty()) members = "every device";
    if (!any.empty() && !varying.empty()) members += " (any " + any + ")";
    g.cls.members = members;
    out.classes.push_back(std::move(g.cls));
  }
  std::stable_sort(out.classes.begin(), out.classes.end(),
                   [](const DeviceClass& a, const DeviceClass& b) { return a.count > b.count; });
  out.simulations = static_cast<int>(done.size());
  return out;
}

}  // namespace dax
