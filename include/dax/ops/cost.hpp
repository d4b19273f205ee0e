// The one cost model the sharding rules choose by: estimated time = bytes a device receives over
// the link's bandwidth + the FLOPs it computes over its rate. The constants are fixed per backend
// (the same on every rank, so every rank picks the same plan) and may be replaced with
// dax::set_cost_model (ops/set_cost_model.hpp). They are part of every rule cache key, so a
// changed model never reuses a rule chosen under the old one.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>

#include <dax/backend/choice.hpp>
#include <dax/reshard/planner.hpp>

namespace dax {

struct CostModel {
  double link_bytes_per_s = 0;  // what one device receives per second in a collective (busbw)
  double flops_per_s = 0;       // one device's sustained rate on a large local GEMM
  double collective_s = 0;      // what each collective costs whatever its size (launch, handshake)
  friend bool operator==(const CostModel&, const CostModel&) = default;
};

/// CPU: one rank per core, ranks of a node talking through MPI's shared-memory transport. Open
/// MPI's vader/sm BTL moves large messages at 4-10 GB/s between cores (one copy through a shared
/// segment); we take 5 GB/s. One x86 core with two AVX2 FMA units peaks at 32 float FLOPs a cycle
/// (~100 GFLOP/s at 3 GHz); OpenBLAS reaches about half of that in practice on shared machines:
/// 50 GFLOP/s. Each collective costs 5 us whatever its size: a reshard of 8 bytes through dax
/// takes 2.1 us at 2 ranks on one 2-core node (MPI_Allreduce of 4 bytes alone 1.0 us), and across
/// nodes MPI's small-message latency adds 1.5-3 us. Without it three collectives tied with one of a
/// few more bytes, and Megatron's row-parallel products ran as three gathers each (issue 39; the
/// step was no faster that way: docs/planning.md).
inline constexpr CostModel cpu_cost_model() { return {5e9, 50e9, 5e-6}; }

/// CUDA: an H100 SXM. NVLink 4 gives 450 GB/s per direction inside a node (NCCL's busbw ~360 GB/s)
/// but across nodes a GPU has one 400 Gb/s NIC (50 GB/s); a large mesh spans nodes on most axes,
/// so we take 100 GB/s. Dense tensor-core GEMM: 495 TFLOP/s TF32 / 990 BF16 peak; cuBLAS sustains
/// ~400 TFLOP/s on large TF32/BF16 products. Each NCCL collective costs about 10-20 us before its
/// first byte inside a node and more across nodes (nccl-tests' small-message times): 20 us. At
/// these rates compute is nearly free, so without it two small gathers and a replicated product
/// beat one all-reduce of partial sums, and a Megatron block's backward, which sums three such
/// partials before one all-reduce, would run three pairs of gathers instead (found on an H100).
inline constexpr CostModel cuda_cost_model() { return {100e9, 400e12, 20e-6}; }

namespace detail {

inline std::optional<CostModel>& cost_model_override() {
  static std::optional<CostModel> model;
  return model;
}

}  // namespace detail

/// The model the rules use now: the one set with set_cost_model, else the active backend's.
inline CostModel cost_model() {
  if (const auto& m = detail::cost_model_override()) return *m;
  return detail::active_backend() == Backend::cuda ? cuda_cost_model() : cpu_cost_model();
}

namespace detail {

/// Estimated seconds to receive `elements` of `item_bytes` each in `collectives` collectives and
/// compute `flops`.
inline double estimated_time(const CostModel& m, int64_t elements, int64_t item_bytes, double flops,
                             int collectives) {
  return static_cast<double>(elements) * static_cast<double>(item_bytes) / m.link_bytes_per_s +
         flops / m.flops_per_s + collectives * m.collective_s;
}

/// Seconds as text with a unit.
inline std::string time_text(double s) {
  std::ostringstream out;
  out.precision(3);
  if (s < 1e-6) out << s * 1e9 << " ns";
  else if (s < 1e-3) out << s * 1e6 << " us";
  else if (s < 1) out << s * 1e3 << " ms";
  else out << s << " s";
  return out.str();
}

/// The model as exact bits, for cache keys.
inline int64_t bits_of(double x) {
  int64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

inline double bit_cast_double(int64_t b) {
  double x = 0;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

/// A move's cost with the number of collectives it runs (steps that communicate), which breaks
/// exact ties in time: equal bytes in one all-reduce beat three smaller collectives.
struct MoveCost {
  int64_t elements = 0;
  int collectives = 0;
};

inline MoveCost reshard_move_cost(const Shape& shape, const NamedSharding& from, const NamedSharding& to) {
  if (from == to) return {};
  const ReshardPlan plan = plan_reshard(shape, from, to);
  MoveCost c{plan.elements, 0};
  for (const auto& step : plan.steps)
    if (step.kind != StepKind::local_slice && step.kind != StepKind::make_unreduced) ++c.collectives;
  return c;
}

/// Elements a device receives to move an operand between shardings (max over devices), from the
/// reshard planner: closed form, so a rule costs its candidates in time independent of the mesh.
inline int64_t reshard_cost(const Shape& shape, const NamedSharding& from, const NamedSharding& to) {
  return reshard_move_cost(shape, from, to).elements;
}

}  // namespace detail
}  // namespace dax
