// dax::reshard (also dax::device_put(x, sharding)): moves an array to any other sharding on the
// same mesh by running its cached plan: each step one collective on the group's communicator,
// pieces in place where contiguous, packed in one pass where not, buffers from the caching
// allocator. Also gather_to_host, which to_host() uses.
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include <dax/array/dist_array.hpp>
#include <dax/array/explicit_sharding.hpp>
#include <dax/array/reshard_program.hpp>
#include <dax/array/profile_hook.hpp>
#include <dax/array/trace.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/comm/collective_checks.hpp>
#include <dax/comm/comm_stats.hpp>
#include <dax/core/call_site.hpp>
#include <dax/sharding/build.hpp>

namespace dax {
namespace detail {

/// Checks every rank can make (the same on all ranks: metadata only) before any rank moves data.
inline void check_reshard(const Shape& shape, const NamedSharding& from, const NamedSharding& to) {
  DAX_CHECK(from.mesh() == to.mesh(), "reshard: source and target must be on the same mesh, got ",
            to_string(from.mesh()), " and ", to_string(to.mesh()));
  to.check_rank(shape);
  Runtime::current().check_mesh(to.mesh());
}

/// `s` with its last two dimensions' splits exchanged (of an array of rank `ndim` >= 2).
inline NamedSharding swap_last_two(const NamedSharding& s, size_t ndim) {
  auto dims = dims_of(s, ndim);
  std::swap(dims[ndim - 1], dims[ndim - 2]);
  return make_sharding(s.mesh(), dims, s.unreduced_axes());
}

/// The array as `x` stores it: with x's last two dimensions swapped when x is a lazy transpose.
template <class T>
DistArray<T> stored_array(const DistArray<T>& x) {
  if (!x.stores_swapped()) return x;
  Shape shape = x.shape();
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  return DistArray<T>(std::move(shape), swap_last_two(x.sharding(), x.ndim()), x.stored_buffer());
}

template <class T>
T* data_of(const std::shared_ptr<Buffer>& b) {
  return static_cast<T*>(b->data());
}

/// One step of this rank's program under way: the piece it reads, the new piece, the staging, and
/// the collective when one was started without waiting (reshard_async).
struct StepInFlight {
  std::shared_ptr<Buffer> in, out, send_stage, recv_stage;
  std::unique_ptr<PendingCollective> pending;
  bool communicated = false;  // a collective ran or runs (counted in comm_stats when it ends)
  int64_t started = 0;
};

/// Starts one step of this rank's program on its piece `in`: everything up to and including its
/// collective, which `async` starts without waiting. finish_step completes it.
template <class T>
StepInFlight start_step(const StepProgram& p, const std::shared_ptr<Buffer>& in, bool async) {
  StepInFlight f;
  f.in = in;
  if (p.share) {
    f.out = in;
    return f;
  }
  const Exchange& ex = p.ex;
  if (p.view) {
    f.out = make_view(in, p.view_offset * sizeof(T), numel(ex.to_block) * sizeof(T));
    return f;
  }
  const int64_t out_count = p.zero ? static_cast<int64_t>(in->bytes() / sizeof(T)) : numel(ex.to_block);
  // A strided exchange's senders may write their parts straight into the new piece (on one node).
  const bool for_peers = p.prepared && p.prepared->receives_from_peer_writes();
  f.out = for_peers ? dev::allocate_for_peers(out_count * sizeof(T)) : dev::allocate(out_count * sizeof(T));
  T* dst = data_of<T>(f.out);
  const T* src = data_of<T>(in);
  if (p.zero) {
    dev::fill(dst, out_count, T(0));
    return f;
  }
  if (p.starts_zeroed) dev::fill(dst, out_count, T(0));
  if (!p.comm) {
    dev::copy_region(src, ex.from_block, dst, ex.to_block, ex.keep);
    return f;
  }
  const DType type = dtype_v<T>;
  const size_t n = ex.members.size();
  f.communicated = true;
  f.started = collective_start();
  if (p.send_staging) f.send_stage = dev::allocate(p.send_staging * sizeof(T));
  if (p.recv_staging) f.recv_stage = dev::allocate(p.recv_staging * sizeof(T));
  // The step's collective, blocking or started.
  auto run = [&](auto&& blocking, auto&& start) {
    if (async)
      f.pending = start();
    else
      blocking();
  };
  switch (p.kind) {
    case StepKind::all_gather: {
      if (!p.prepared || !p.prepared->copies_own_part())
        dev::copy_region(src, ex.from_block, dst, ex.to_block, ex.keep);
      if (p.recv_direct)  // own part first, then every other part lands in place
        run([&] { p.comm->all_gatherv(nullptr, dst, p.recv_counts, p.recv_displs, type); },
            [&] { return p.comm->start_all_gatherv(nullptr, dst, p.recv_counts, p.recv_displs, type); });
      else
        run([&] { p.comm->exchange(*p.prepared, src, dst); },
            [&] { return p.comm->start_exchange(*p.prepared, src, dst); });
      break;
    }
    case StepKind::all_to_all:
    case StepKind::general_exchange: {
      if (p.prepared) {
        if (!p.prepared->copies_own_part()) dev::copy_region(src, ex.from_block, dst, ex.to_block, ex.keep);
        run([&] { p.comm->exchange(*p.prepared, src, dst); },
            [&] { return p.comm->start_exchange(*p.prepared, src, dst); });
        break;
      }
      const T* send = src;
      if (!p.send_direct) {
        T* stage = data_of<T>(f.send_stage);
        for (size_t j = 0; j < n; ++j)
          dev::copy_region(src, ex.from_block, stage + p.send_displs[j], ex.send[j], ex.send[j]);
        send = stage;
      }
      T* recv = p.recv_direct ? dst : (f.recv_stage ? data_of<T>(f.recv_stage) : dst);
      if (ex.reduce) dev::fill(dst, numel(ex.to_block), T(0));
      dev::copy_region(src, ex.from_block, dst, ex.to_block, ex.keep,
                       ex.reduce ? CopyMode::add : CopyMode::assign);
      run([&] { p.comm->all_to_allv(send, p.send_counts, p.send_displs, recv, p.recv_counts, p.recv_displs, type); },
          [&] {
            return p.comm->start_all_to_allv(send, p.send_counts, p.send_displs, recv, p.recv_counts, p.recv_displs,
                                             type);
          });
      break;
    }
    case StepKind::reduce_scatter: {
      const T* send = src + p.send_offset;
      if (!p.send_direct) {
        T* stage = data_of<T>(f.send_stage);
        for (size_t j = 0; j < n; ++j) {
          const Box& part = static_cast<int>(j) == ex.self ? ex.keep : ex.send[j];
          dev::copy_region(src, ex.from_block, stage + p.send_displs[j], part, part);
        }
        send = stage;
      }
      run([&] { p.comm->reduce_scatter(send, dst, p.send_counts, type, ReduceOp::sum); },
          [&] { return p.comm->start_reduce_scatter(send, dst, p.send_counts, type, ReduceOp::sum); });
      break;
    }
    case StepKind::all_reduce:
      run([&] { p.comm->all_reduce(src, dst, numel(ex.from_block), type, ReduceOp::sum); },
          [&] { return p.comm->start_all_reduce(src, dst, numel(ex.from_block), type, ReduceOp::sum); });
      break;
    default:
      fail("reshard: step ", to_string(p.kind), " cannot run as a collective");
  }
  return f;
}

/// Completes a started step: waits for its collective, moves staged parts into place; returns the
/// new piece.
template <class T>
std::shared_ptr<Buffer> finish_step(const StepProgram& p, StepInFlight& f) {
  if (f.pending) f.pending->wait();
  f.pending.reset();
  if (!f.communicated) return std::move(f.out);
  const Exchange& ex = p.ex;
  const bool staged_receive = (p.kind == StepKind::all_to_all || p.kind == StepKind::general_exchange) &&
                              !p.prepared && !p.recv_direct;
  if (staged_receive) {
    const T* recv = f.recv_stage ? data_of<T>(f.recv_stage) : data_of<T>(f.out);
    T* dst = data_of<T>(f.out);
    for (size_t j = 0; j < ex.members.size(); ++j)
      dev::copy_region(recv + p.recv_displs[j], ex.recv[j], dst, ex.to_block, ex.recv[j],
                       ex.reduce ? CopyMode::add : CopyMode::assign);
  }
  count_collective(to_string(p.kind), p.axes_text, p.received * static_cast<int64_t>(sizeof(T)), f.started,
                   p.comm != nullptr ? p.comm->size() : 1);
  return std::move(f.out);
}

/// Runs one step of this rank's program on its piece `in`; returns the new piece.
template <class T>
std::shared_ptr<Buffer> run_step(const StepProgram& p, const std::shared_ptr<Buffer>& in) {
  StepInFlight f = start_step<T>(p, in, false);
  return finish_step<T>(p, f);
}

}  // namespace detail

namespace detail {
template <class T>
DistArray<T> reshard_untraced(const DistArray<T>& x, const NamedSharding& target);

/// After recording a move of x to `out`: its pullback moves the cotangent back to `from` (x's
/// layout), reducing kept partial sums there; a product making that cotangent prices it so.
template <class T>
void note_moved_from(const DistArray<T>& out, const NamedSharding& from) {
  if (active_tracer() != nullptr && needs_gradient(out))
    active_tracer()->set_cotangent_destination(out.trace_id(), std::make_shared<const NamedSharding>(from));
}
}  // namespace detail

/// `x` laid out by `target` (same mesh): the fewest bytes moved, by the planner's steps. Its
/// cotangent goes back by the reverse reshard, which reduces a partial-sum cotangent (DESIGN §6:
/// an all-gathered FSDP weight's gradient becomes one reduce-scatter).
template <class T>
DistArray<T> reshard(const DistArray<T>& x, const NamedSharding& target,
                     SourceLine at = SourceLine::current()) {
  const detail::SiteScope site("reshard", at);
  DistArray<T> out = detail::reshard_untraced(x, target);
  detail::record("reshard", out, [&](auto) {
    return [from = x.sharding()](const DistArray<T>& g) {
      return detail::Cotangents{detail::AnyArray(detail::reshard_untraced(g, from))};
    };
  }, x);
  detail::note_moved_from(out, x.sharding());
  return out;
}

/// reshard without recording (the op itself, and its own backward).
template <class T>
DistArray<T> detail::reshard_untraced(const DistArray<T>& x, const NamedSharding& target) {
  detail::check_reshard(x.shape(), x.sharding(), target);
  if (!x.is_addressable()) return DistArray<T>(x.shape(), target, nullptr);
  const detail::ProfiledOp profiled("reshard", x);
  if (x.stores_swapped()) {  // move the stored (transposed) piece; the result stays a lazy transpose
    const DistArray<T> stored = reshard_untraced(detail::stored_array(x), detail::swap_last_two(target, x.ndim()));
    return DistArray<T>::swapped_view(x.shape(), target, stored.buffer());
  }
  Runtime& rt = Runtime::current();
  const detail::OpLabel label([&] {
    return detail::cat("reshard ", to_string(x.shape()), " ", to_string(dtype_v<T>), " ", to_string(x.sharding().spec()),
                       " -> ", to_string(target.spec()));
  });
  const auto& entry = detail::reshard_programs().get(
      x.shape(), x.sharding(), target, sizeof(T),
      [&](const ReshardPlan& plan) { return detail::build_program(plan, rt.rank(), sizeof(T), rt); });
  std::shared_ptr<detail::Buffer> piece = x.buffer();
  for (const auto& step : entry.extra.steps) piece = detail::run_step<T>(step, piece);
  return DistArray<T>(x.shape(), target, std::move(piece));
}

/// `x` laid out by `sharding` (jax.lax.with_sharding_constraint): eagerly the same reshard as
/// reshard(x, sharding). The difference is in the backward: the cotangent is constrained to the
/// same `sharding` (resharded to it, so a partial-sum cotangent is reduced there), where reshard
/// sends it back to x's own sharding. Pin an intermediate's layout, forward and backward, with it.
template <class T>
DistArray<T> with_sharding_constraint(const DistArray<T>& x, const NamedSharding& sharding) {
  DistArray<T> out = detail::reshard_untraced(x, sharding);
  detail::record("with_sharding_constraint", out, [&](auto) {
    return [sharding](const DistArray<T>& g) {
      return detail::Cotangents{detail::AnyArray(detail::reshard_untraced(g, sharding))};
    };
  }, x);
  return out;
}

/// Same as reshard: JAX's device_put of an array onto a new sharding.
template <class T>
DistArray<T> device_put(const DistArray<T>& x, const NamedSharding& target) {
  return reshard(x, target);
}

namespace detail {

/// `x` under sharding `s`: itself when it already is, else resharded.
template <class T>
DistArray<T> moved_to(const DistArray<T>& x, const NamedSharding& s) {
  return x.sharding() == s ? x : reshard_untraced(x, s);  // part of the op that moves it: not recorded
}

/// Before `op` moves its input `x` to `s` on its own: raised or recorded inside an
/// ExplicitSharding scope (array/explicit_sharding.hpp); nothing otherwise.
template <class T>
void check_operand_layout(const DistArray<T>& x, const NamedSharding& s, const char* op) {
  if (ExplicitSharding::innermost() != nullptr && !(x.sharding() == s))
    implicit_reshard(op, x.shape(), dtype_v<T>, sizeof(T), x.sharding(), s);
}

/// moved_to for an op's input (not its result, nor a cotangent): checked by check_operand_layout.
template <class T>
DistArray<T> operand_to(const DistArray<T>& x, const NamedSharding& s, const char* op) {
  check_operand_layout(x, s, op);
  return moved_to(x, s);
}

template <class T>
std::vector<T> gather_to_host(const DistArray<T>& x) {
  DAX_CHECK(x.is_addressable(), "to_host: rank ", Runtime::current().rank(), " is not a device of ",
            to_string(x.sharding().mesh()), " and holds no piece of the array");
  const DistArray<T> whole = reshard_untraced(x, NamedSharding(x.sharding().mesh(), P()));
  return whole.local_to_host();
}

}  // namespace detail
}  // namespace dax
