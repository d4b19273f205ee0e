// dax::shard_map: manual SPMD. The mapped function runs once per device on local blocks (arrays on
// a one-device view of the mesh, so every op inside is local) and communicates only through the
// named-axis collectives; the blocks it returns assemble into global arrays by out_specs.
#pragma once

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <dax/array/reshard.hpp>
#include <dax/array/trace.hpp>
#include <dax/core/hash.hpp>
#include <dax/manual/collectives.hpp>
#include <dax/manual/context.hpp>

namespace dax {
namespace detail {

/// How many OnlyMeshRanks scopes this thread is in.
inline int& only_mesh_ranks_depth() {
  thread_local int depth = 0;
  return depth;
}


template <class R>
struct is_tuple : std::false_type {};
template <class... Ts>
struct is_tuple<std::tuple<Ts...>> : std::true_type {};

/// What the mapped function receives for an argument: a local block for arrays, the value itself
/// (by reference) for anything else.
template <class A>
using mapped_arg_t = std::conditional_t<is_dist_array<std::decay_t<A>>::value, std::decay_t<A>, const A&>;

/// Blocks returned must be checked on every device alike: each device contributes one fixed-size
/// record per output (rank, first dims, a hash of its bytes) and all devices read all records.
constexpr int kMaxRecordedRank = 16;
constexpr int kRecordSize = kMaxRecordedRank + 2;

/// DAX_CHECK_REP=1 (read at each call: a getenv is cheap next to the gather that follows).
inline bool check_rep_enabled() {
  const char* v = std::getenv("DAX_CHECK_REP");
  return v && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

template <class T>
void append_record(std::vector<int64_t>& rec, const DistArray<T>& block, bool with_hash) {
  rec.push_back(block.ndim());
  for (int i = 0; i < kMaxRecordedRank; ++i) rec.push_back(i < block.ndim() ? block.shape()[i] : -1);
  size_t h = 0x626c6f63;
  if (with_hash) {
    dev::read_on_host(block.local_data().data(), block.local_size(), [&](const T* data) {
      const auto* bytes = reinterpret_cast<const unsigned char*>(data);
      for (size_t i = 0; i < block.local_data().size_bytes(); ++i) hash_into(h, bytes[i]);
    });
  }
  rec.push_back(static_cast<int64_t>(h));
}

inline Shape recorded_shape(const int64_t* rec) {
  Shape s;
  for (int i = 0; i < rec[0] && i < kMaxRecordedRank; ++i) s.push_back(rec[1 + i]);
  return s;
}

/// The message every device throws when the blocks of output `k` do not assemble (the same text
/// on every device: it reads only the gathered records), or "" when they do.
inline std::string check_output_records(const Mesh& mesh, const std::vector<int64_t>& all, size_t outputs, size_t k,
                                        const PartitionSpec& spec, bool check_rep) {
  auto rec = [&](int position) { return all.data() + (position * outputs + k) * kRecordSize; };
  const Shape first = recorded_shape(rec(0));
  for (int p = 0; p < mesh.size(); ++p) {
    if (rec(p)[0] > kMaxRecordedRank)
      return cat("shard_map: output ", k, " has rank ", rec(p)[0], "; at most ", kMaxRecordedRank, " is supported");
    if (recorded_shape(rec(p)) != first)
      return cat("shard_map: output ", k, "'s local blocks differ in shape: device ", mesh.devices()[0], " returned ",
                 to_string(first), ", device ", mesh.devices()[p], " returned ", to_string(recorded_shape(rec(p))));
  }
  if (!check_rep) return "";
  // Claimed replicated over every mesh axis the spec neither splits on nor leaves unreduced.
  std::vector<bool> used(mesh.num_axes(), false);
  for (const auto& e : spec.entries())
    for (const auto& name : e.axes()) used[mesh.axis_index(name)] = true;
  for (const auto& name : spec.unreduced()) used[mesh.axis_index(name)] = true;
  for (int p = 0; p < mesh.size(); ++p) {
    auto coords = mesh.coords(mesh.devices()[p]);
    for (int a = 0; a < mesh.num_axes(); ++a) {
      if (used[a] || coords[a] == 0) continue;
      auto origin = coords;
      origin[a] = 0;
      const int q = mesh.position(mesh.device_at(origin));
      if (rec(p)[kRecordSize - 1] != rec(q)[kRecordSize - 1])
        return cat("shard_map: out_specs[", k, "] = ", to_string(spec), " says output ", k,
                   " is replicated over mesh axis '", mesh.axis_names()[a], "', but device ", mesh.devices()[q],
                   " and device ", mesh.devices()[p], " returned different blocks (DAX_CHECK_REP=1)");
    }
  }
  return "";
}

/// The global array that the local block `block` (shape `local`) is this rank's piece of.
template <class T>
DistArray<T> assemble(const Mesh& mesh, const PartitionSpec& spec, const Shape& local,
                      std::shared_ptr<Buffer> buffer) {
  DAX_CHECK(spec.size() <= local.size(), "shard_map: out spec ", to_string(spec), " has ", spec.size(),
            " entries for an output of rank ", local.size());
  Shape global = local;
  for (size_t d = 0; d < spec.size(); ++d)
    for (const auto& name : spec[d].axes()) global[d] *= mesh.axis_size(name);
  return DistArray<T>(global, NamedSharding(mesh, spec), std::move(buffer));
}

}  // namespace detail

/// Within this scope a shard_map is called by the ranks of its mesh alone (the others run other
/// code, as the stages of a pipeline do, or a reference on one device does): nothing about its
/// outputs is sent to the ranks outside, and a gradient may go through a shard_map on part of the
/// world. dax::pipeline runs each stage's passes in one. Outside such a scope, every rank calls every
/// shard_map (those outside its mesh get arrays that hold no piece).
class OnlyMeshRanks {
 public:
  OnlyMeshRanks() { ++detail::only_mesh_ranks_depth(); }
  ~OnlyMeshRanks() { --detail::only_mesh_ranks_depth(); }
  OnlyMeshRanks(const OnlyMeshRanks&) = delete;
  OnlyMeshRanks& operator=(const OnlyMeshRanks&) = delete;
};

template <class F>
class ShardMapped {
 public:
  ShardMapped(F f, Mesh mesh, std::vector<PartitionSpec> in_specs, std::vector<PartitionSpec> out_specs)
      : f_(std::move(f)), mesh_(std::move(mesh)), in_specs_(std::move(in_specs)), out_specs_(std::move(out_specs)) {
    for (const auto& spec : in_specs_) {
      NamedSharding(mesh_, spec);  // checks the axis names
      DAX_CHECK(spec.unreduced().empty(), "shard_map: in_specs must not be unreduced, got ", to_string(spec));
    }
    for (const auto& spec : out_specs_) NamedSharding(mesh_, spec);
  }

  /// Runs the mapped function on every device of the mesh. Array arguments are resharded to their
  /// in_specs first; other arguments pass through unchanged and take no spec.
  template <class... Args>
  auto operator()(const Args&... args) const {
    using Result = std::invoke_result_t<const F&, detail::mapped_arg_t<Args>&...>;
    constexpr size_t arrays = (size_t{0} + ... + size_t{detail::is_dist_array<Args>::value});
    DAX_CHECK(arrays == in_specs_.size(), "shard_map: ", in_specs_.size(), " in_specs for ", arrays,
              " array argument", arrays == 1 ? "" : "s");
    Runtime& rt = Runtime::current();
    rt.check_mesh(mesh_);
    const bool member = mesh_.contains(rt.rank());
    const bool traced = detail::active_tracer() != nullptr && (on_tape(args) || ...);
    if (traced) check_differentiable();
    auto ctx = std::make_shared<const detail::ManualContext>(
        detail::ManualContext{mesh_, detail::local_view(mesh_, member ? rt.rank() : mesh_.devices()[0])});
    size_t next = 0;
    // Braced initialization runs left to right: arguments take their specs in order.
    const std::tuple<detail::mapped_arg_t<Args>...> placed{place(args, next)...};
    if (!member) return outside<Result>();
    detail::ManualScope scope(ctx);
    next = 0;
    auto mapped = std::apply(
        [&](const auto&... p) { return std::tuple<detail::mapped_arg_t<Args>...>{enter(p, next, *ctx, traced)...}; },
        placed);
    Result result = std::apply(f_, mapped);
    return leave(*ctx, std::move(result), traced);
  }

 private:
  template <class A>
  static bool on_tape(const A& arg) {
    if constexpr (detail::is_dist_array<A>::value) return arg.trace_id() != 0;
    else return false;
  }

  /// Gradients through shard_map: the body's replication typing is tracked (docs/autodiff.md).
  void check_differentiable() const {
    DAX_CHECK(mesh_.size() == Runtime::current().size() || detail::only_mesh_ranks_depth() > 0,
              "shard_map: a gradient through a shard_map needs its mesh to hold every rank, or the call to be "
              "made by the mesh's ranks alone (dax::OnlyMeshRanks); ", to_string(mesh_), " holds ", mesh_.size(), " of ",
              Runtime::current().size());
    DAX_CHECK(mesh_.num_axes() < 64, "shard_map: a gradient through a shard_map supports meshes of up to 63 axes, got ",
              mesh_.num_axes());
  }

  static uint64_t spec_axes(const Mesh& mesh, const PartitionSpec& spec) {
    uint64_t mask = 0;
    for (const auto& e : spec.entries())
      for (const auto& name : e.axes()) mask |= uint64_t{1} << mesh.axis_index(name);
    for (const auto& name : spec.unreduced()) mask |= uint64_t{1} << mesh.axis_index(name);
    return mask;
  }

  /// An array argument resharded to its in_spec (a global op, recorded like any reshard).
  template <class A>
  detail::mapped_arg_t<A> place(const A& arg, size_t& next) const {
    if constexpr (detail::is_dist_array<A>::value) {
      const size_t i = next++;
      const PartitionSpec& spec = in_specs_[i];
      DAX_CHECK(arg.sharding().mesh() == mesh_, "shard_map: argument ", i, " is on ", to_string(arg.sharding().mesh()),
                " but the shard_map's mesh is ", to_string(mesh_));
      const NamedSharding target(mesh_, spec);
      target.check_rank(arg.shape());
      for (size_t d = 0; d < spec.size(); ++d) {
        int64_t parts = 1;
        for (const auto& name : spec[d].axes()) parts *= mesh_.axis_size(name);
        DAX_CHECK(arg.shape()[d] % parts == 0, "shard_map: in_specs[", i, "] = ", to_string(spec), " splits dimension ",
                  d, " of size ", arg.shape()[d], " over ", parts, " devices, which does not divide it evenly (argument ",
                  i, " has shape ", to_string(arg.shape()), ")");
      }
      return reshard(arg, target);
    } else {
      return arg;
    }
  }

  /// This device's block of a placed argument. Under a gradient every block goes on the tape,
  /// varying over the axes its in_spec splits (replication typing); its cotangent, invariant over
  /// the other axes by that typing, is the block of the argument's cotangent.
  template <class A>
  detail::mapped_arg_t<A> enter(const A& placed, size_t& next, const detail::ManualContext& ctx, bool traced) const {
    if constexpr (detail::is_dist_array<A>::value) {
      const size_t i = next++;
      if (!placed.is_addressable()) return A(Shape(placed.ndim(), 0), ctx.local, nullptr);
      A block(placed.local_shape(), ctx.local, placed.buffer());
      if (!traced) return block;
      using T = typename A::value_type;
      detail::Pullback pullback;
      if constexpr (detail::is_differentiable_v<T>) {
        if (detail::needs_gradient(placed))
          pullback = [shape = placed.shape(), sharding = placed.sharding()](const detail::AnyArray& ct) {
            return detail::Cotangents{detail::AnyArray(DistArray<T>(shape, sharding, ct.as<T>().buffer()))};
          };
      }
      block.set_trace_id(detail::active_tracer()->record("shard_map", {placed.trace_id()}, std::move(pullback),
                                                         detail::Varying{spec_axes(mesh_, in_specs_[i]), 0, true}));
      return block;
    } else {
      return placed;
    }
  }

  /// The function's blocks as a tuple of arrays.
  template <class R>
  static auto as_tuple(R&& r) {
    if constexpr (detail::is_tuple<std::decay_t<R>>::value) return std::forward<R>(r);
    else return std::make_tuple(std::forward<R>(r));
  }

  template <class Result>
  Result leave(const detail::ManualContext& ctx, Result result, bool traced) const {
    auto blocks = as_tuple(std::move(result));
    constexpr size_t outputs = std::tuple_size_v<decltype(blocks)>;
    check_out_specs(outputs);
    const bool check_rep = detail::check_rep_enabled();
    std::vector<int64_t> mine;
    [&]<size_t... K>(std::index_sequence<K...>) {
      (check_block(ctx, std::get<K>(blocks), K), ...);
      if (traced) (check_typing(std::get<K>(blocks), K), ...);
      (detail::append_record(mine, std::get<K>(blocks), check_rep), ...);
    }(std::make_index_sequence<outputs>{});
    Runtime& rt = Runtime::current();
    const detail::OpLabel label([&] { return output_check_label(); });
    const std::vector<int64_t> all = rt.mesh_group(mesh_).all_gather_host(mine);
    std::string error;
    for (size_t k = 0; k < outputs && error.empty(); ++k)
      error = detail::check_output_records(mesh_, all, outputs, k, out_specs_[spec_of(k)], check_rep);
    share_with_outside(all, error);
    if (!error.empty()) detail::fail(error);
    using Blocks = decltype(blocks);
    Blocks assembled = [&]<size_t... K>(std::index_sequence<K...>) {
      return Blocks{detail::assemble<typename std::tuple_element_t<K, Blocks>::value_type>(
          mesh_, out_specs_[spec_of(K)], std::get<K>(blocks).shape(), std::get<K>(blocks).buffer())...};
    }(std::make_index_sequence<outputs>{});
    if (traced) {
      [&]<size_t... K>(std::index_sequence<K...>) {
        (record_output(ctx, std::get<K>(blocks), std::get<K>(assembled), K), ...);
      }(std::make_index_sequence<outputs>{});
    }
    if constexpr (detail::is_tuple<Result>::value) return assembled;
    else return std::get<0>(std::move(assembled));
  }

  /// Replication typing at the exit: an output may vary only over the axes its out_spec splits or
  /// leaves unreduced (JAX's check): elsewhere the global array would claim copies that differ.
  template <class T>
  void check_typing(const DistArray<T>& block, size_t k) const {
    if (block.trace_id() == 0) return;
    const PartitionSpec& spec = out_specs_[spec_of(k)];
    const uint64_t extra = detail::active_tracer()->varying_axes(block.trace_id()) & ~spec_axes(mesh_, spec);
    if (extra == 0) return;
    const auto names = detail::axes_of_mask(mesh_, extra).names();
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
    detail::fail("shard_map: output ", k, " varies over mesh axis ", list, " but out_specs[", k, "] = ", to_string(spec),
                 " says it is replicated there (replication typing, under a gradient); reduce it with psum, gather "
                 "it with all_gather, or name the axis in the out spec");
  }

  /// The global output on the tape: its cotangent's block is this device's; where the block was
  /// invariant over an axis the out spec splits or leaves unreduced, the global value holds it
  /// several times and the blocks' cotangents are summed over that axis.
  template <class T>
  void record_output(const detail::ManualContext& ctx, const DistArray<T>& block, DistArray<T>& global,
                     size_t k) const {
    if constexpr (detail::is_differentiable_v<T>) {
      if (!detail::needs_gradient(block)) return;
      const PartitionSpec& spec = out_specs_[spec_of(k)];
      const uint64_t sum_over = spec_axes(mesh_, spec) & ~detail::active_tracer()->varying_axes(block.trace_id());
      const NamedSharding reduced = detail::with_unreduced_axes(global.sharding(), global.ndim(), {});
      detail::Pullback pullback = [reduced, local = ctx.local, shape = block.shape(), sum_over,
                                   mesh = mesh_](const detail::AnyArray& g) {
        const DistArray<T> piece = detail::reshard_untraced(g.as<T>(), reduced);
        DistArray<T> ct(shape, local, piece.buffer());
        if (sum_over != 0) ct = psum(ct, detail::axes_of_mask(mesh, sum_over));
        return detail::Cotangents{detail::AnyArray(ct)};
      };
      global.set_trace_id(detail::active_tracer()->record("shard_map", {block.trace_id()}, std::move(pullback), {}));
    }
  }

  std::string output_check_label() const { return "shard_map's output check on " + to_string(mesh_); }

  /// Ranks outside the mesh run nothing; they learn the outputs' shapes from the mesh's first device.
  template <class Result>
  Result outside() const {
    constexpr size_t outputs = std::tuple_size_v<decltype(as_tuple(std::declval<Result>()))>;
    check_out_specs(outputs);
    std::vector<int64_t> records(outputs * detail::kRecordSize + 1);
    const detail::OpLabel label([&] { return output_check_label(); });
    std::string error = receive_from_mesh(records);
    if (!error.empty()) detail::fail(error);
    using Blocks = decltype(as_tuple(std::declval<Result>()));
    auto make = [&]<size_t... K>(std::index_sequence<K...>) {
      return Blocks{detail::assemble<typename std::tuple_element_t<K, Blocks>::value_type>(
          mesh_, out_specs_[spec_of(K)], detail::recorded_shape(records.data() + K * detail::kRecordSize), nullptr)...};
    };
    auto blocks = make(std::make_index_sequence<outputs>{});
    if constexpr (detail::is_tuple<Result>::value) return blocks;
    else return std::get<0>(std::move(blocks));
  }

  /// When the mesh is smaller than the world, its first device sends the records and the verdict
  /// to every other rank (the one step of a shard_map that involves ranks outside its mesh).
  void share_with_outside(const std::vector<int64_t>& all, const std::string& error) const {
    Runtime& rt = Runtime::current();
    if (mesh_.size() == rt.size() || detail::only_mesh_ranks_depth() > 0) return;
    const size_t outputs = all.size() / (detail::kRecordSize * mesh_.size());
    std::vector<int64_t> records(all.begin(), all.begin() + outputs * detail::kRecordSize);
    records.push_back(error.empty() ? 0 : 1);
    rt.world().broadcast(records.data(), static_cast<int64_t>(records.size()), DType::int64, mesh_.devices()[0]);
  }

  std::string receive_from_mesh(std::vector<int64_t>& records) const {
    Runtime::current().world().broadcast(records.data(), static_cast<int64_t>(records.size()), DType::int64,
                                         mesh_.devices()[0]);
    return records.back() ? "shard_map: the mapped function's outputs do not assemble (the devices of " +
                                to_string(mesh_) + " report why)"
                          : "";
  }

  template <class T>
  void check_block(const detail::ManualContext& ctx, const DistArray<T>& block, size_t k) const {
    DAX_CHECK(block.sharding().mesh() == ctx.local.mesh(), "shard_map: output ", k,
              " must be a local block (an array on this device's view of the mesh), got an array on ",
              to_string(block.sharding().mesh()));
  }
  template <class B>
  void check_block(const detail::ManualContext&, const B&, size_t) const {
    static_assert(detail::is_dist_array<B>::value, "dax::shard_map: the mapped function must return dax::DistArray "
                  "blocks (or a std::tuple of them)");
  }

  void check_out_specs(size_t outputs) const {
    DAX_CHECK(out_specs_.size() == outputs || out_specs_.size() == 1, "shard_map: ", out_specs_.size(),
              " out_specs for ", outputs, " outputs");
  }
  /// One spec for several outputs applies to each.
  size_t spec_of(size_t k) const { return out_specs_.size() == 1 ? 0 : k; }

  F f_;
  Mesh mesh_;
  std::vector<PartitionSpec> in_specs_, out_specs_;
};

/// shard_map(f, mesh, in_specs, out_spec): `f` runs once per device of `mesh` on local blocks (one
/// in_spec per array argument, each dividing its dimensions evenly) and returns its block of the
/// result, which `out_spec` assembles into a global array.
template <class F>
ShardMapped<F> shard_map(F f, Mesh mesh, std::vector<PartitionSpec> in_specs, PartitionSpec out_spec) {
  return ShardMapped<F>(std::move(f), std::move(mesh), std::move(in_specs), {std::move(out_spec)});
}

/// The same for a function returning a std::tuple of blocks: one out spec per output.
template <class F>
ShardMapped<F> shard_map(F f, Mesh mesh, std::vector<PartitionSpec> in_specs, std::vector<PartitionSpec> out_specs) {
  return ShardMapped<F>(std::move(f), std::move(mesh), std::move(in_specs), std::move(out_specs));
}

}  // namespace dax
