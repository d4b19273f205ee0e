// dax::pipeline::Pipeline: a model cut into chunks over a 'stage' mesh axis and trained a batch of
// microbatches at a time by a schedule (parallel/schedule.hpp). Each stage's chunks keep their
// parameters on that stage's devices (stage_mesh: the mesh with the stage axis narrowed to one
// position, so the other axes, data / model / FSDP, shard them as anywhere else); every rank runs
// only its own stage's passes, in the schedule's order. A forward records its chunk on a tape of
// its own (held until its backward: that is the microbatch's activation memory), sends its output
// to the next chunk's stage and goes on; a backward replays the tape, sends the input's gradient
// back and adds the parameters' cotangents to the step's, unreduced, so a data-parallel gradient
// is still reduced once a step, not once a microbatch. Sends are started and left to finish
// (comm's point-to-point start_send); a pass waits only for the input it needs.
//
// Counterparts: torch.distributed.pipelining's PipelineStage + schedule.step(), Megatron-LM's
// forward_backward_pipelining_*; JAX leaves it to shard_map and ppermute (examples/pipeline.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dax/array/creation.hpp>
#include <dax/array/reshard.hpp>
#include <dax/autodiff/grad.hpp>
#include <dax/autodiff/tape.hpp>
#include <dax/autodiff/tree.hpp>
#include <dax/manual/shard_map.hpp>
#include <dax/optim/clip.hpp>
#include <dax/parallel/schedule.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax::pipeline {

/// The devices of `mesh` at position `stage` of its axis `axis`, as a mesh with the same axis
/// names and that axis of size 1: where stage `stage`'s parameters and activations live. Specs
/// written for the whole mesh (P("data"), P(None, "model")) mean the same on it.
inline Mesh stage_mesh(const Mesh& mesh, const std::string& axis, int stage) {
  const int a = mesh.axis_index(axis);
  DAX_CHECK(stage >= 0 && stage < mesh.axis_size(a), "pipeline: stage ", stage, " is out of range for mesh axis '",
            axis, "' of size ", mesh.axis_size(a));
  Shape shape = mesh.shape();
  shape[a] = 1;
  std::vector<int> devices;
  for (int device : mesh.devices())
    if (mesh.coords(device)[a] == stage) devices.push_back(device);
  return Mesh(shape, mesh.axis_names(), devices);
}

/// One step as it ran. Times are seconds of wall clock on each stage's first device.
struct StepStats {
  std::vector<double> busy;           // [stage]: in its passes (recording, replaying, starting sends)
  std::vector<double> seconds;        // [stage]: its step, from its first pass to its last send's end
  std::vector<int> peak_activations;  // [stage]: microbatch activations (recorded chunks) held at once
  double makespan = 0;                // the longest stage's step
  double bubble = 0;                  // 1 - sum(busy) / (stages * makespan), as simulate() counts it
  int64_t bytes_sent = 0;             // by this rank to other stages (activations and gradients)
};

namespace detail {

using ::dax::detail::AnyArray;

/// What a transfer's first message says about its array: the receiver allocates and shards by it.
/// [dtype, ndim, dims..., then per dimension its number of mesh axes and their indices].
constexpr int kHeaderLength = 48;

inline std::vector<int64_t> transfer_header(DType dtype, const Shape& shape, const NamedSharding& sharding) {
  std::vector<int64_t> h{static_cast<int64_t>(dtype), static_cast<int64_t>(shape.size())};
  for (int64_t n : shape) h.push_back(n);
  for (size_t dim = 0; dim < shape.size(); ++dim) {
    const std::vector<int> none;
    const auto& axes = dim < sharding.spec_rank() ? sharding.dim_axes(dim) : none;
    h.push_back(static_cast<int64_t>(axes.size()));
    for (int a : axes) h.push_back(a);
  }
  DAX_CHECK(h.size() <= size_t(kHeaderLength), "pipeline: an activation of rank ", shape.size(), " sharded as ",
            ::dax::to_string(sharding.spec()), " does not fit a transfer's header of ", kHeaderLength, " numbers");
  h.resize(kHeaderLength, 0);
  return h;
}

inline std::pair<Shape, PartitionSpec> read_header(const std::vector<int64_t>& h, DType expected, const Mesh& mesh) {
  DAX_CHECK(h[0] == static_cast<int64_t>(expected), "pipeline: the previous stage sent ",
            ::dax::to_string(static_cast<DType>(h[0])), " activations, this pipeline's are ", ::dax::to_string(expected));
  const int ndim = static_cast<int>(h[1]);
  size_t at = 2;
  Shape shape(h.begin() + 2, h.begin() + 2 + ndim);
  at += ndim;
  std::vector<PartitionSpec::Entry> entries;
  for (int dim = 0; dim < ndim; ++dim) {
    const int count = static_cast<int>(h[at++]);
    std::vector<std::string> names;
    for (int k = 0; k < count; ++k) names.push_back(mesh.axis_names()[h[at++]]);
    if (names.empty()) entries.emplace_back(nullptr);
    else if (names.size() == 1) entries.emplace_back(names[0]);
    else entries.emplace_back(axes(names));
  }
  return {shape, PartitionSpec(entries)};
}

/// A send in flight, with what it sends kept alive until it ends.
struct Outgoing {
  std::vector<int64_t> header;
  std::shared_ptr<const void> keep;
  std::unique_ptr<::dax::detail::PendingCollective> header_sent, payload_sent;
};

}  // namespace detail

/// A pipeline over `schedule` (make_schedule) on the mesh axis `axis` of `mesh`, whose size is the
/// schedule's stages. `chunk(c, params, x)` runs chunk c (of stages * virtual_stages; c runs on
/// stage c % stages) and returns its activation, a DistArray<T> on that stage's mesh; chunk 0
/// gets the microbatch's input as given (any DistArray: token ids, features), the others the
/// previous chunk's output. `loss(output, target)` gives the last chunk's scalar loss for a
/// microbatch; the step's loss is their mean. Build one with dax::pipeline::make<T>.
template <class T, class Chunk, class Loss>
class Pipeline {
 public:
  Pipeline(Mesh mesh, Schedule schedule, Chunk chunk, Loss loss, std::string axis)
      : mesh_(std::move(mesh)), schedule_(std::move(schedule)), chunk_(std::move(chunk)), loss_(std::move(loss)),
        axis_(std::move(axis)) {
    const int a = mesh_.axis_index(axis_);
    DAX_CHECK(mesh_.axis_size(a) == schedule_.stages, "pipeline: the schedule has ", schedule_.stages,
              " stages but mesh axis '", axis_, "' has ", mesh_.axis_size(a), " devices");
    for (int s = 0; s < schedule_.stages; ++s) stage_meshes_.push_back(dax::pipeline::stage_mesh(mesh_, axis_, s));
    const int rank = Runtime::current().rank();
    if (!mesh_.contains(rank)) return;
    coords_ = mesh_.coords(rank);
    stage_ = static_cast<int>(coords_[a]);
    // The two-device communicators to the stages this one sends to or receives from, made in one
    // order on every rank (by the pair's lower stage, then its higher) so that no two wait on
    // each other: each is collective over its two members only.
    std::vector<std::pair<int, int>> pairs;
    for (int c = 0; c + 1 < schedule_.chunks(); ++c) {
      const int s = schedule_.stage_of(c), t = schedule_.stage_of(c + 1);
      if (s != t && (s == stage_ || t == stage_)) pairs.emplace_back(std::min(s, t), std::max(s, t));
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    for (const auto& [lo, hi] : pairs) {
      std::vector<int64_t> c_lo = coords_, c_hi = coords_;
      c_lo[a] = lo;
      c_hi[a] = hi;
      const Mesh pair({2}, {axis_}, {mesh_.device_at(c_lo), mesh_.device_at(c_hi)});
      links_[lo == stage_ ? hi : lo] = &Runtime::current().group(pair, {0});
    }
  }

  const Schedule& schedule() const { return schedule_; }
  const Mesh& mesh() const { return mesh_; }
  /// The shape and layout (a spec on the receiving stage's mesh) of the activation that enters
  /// chunk `c` (c >= 1) from another stage; its gradient, going back into chunk c - 1, has the
  /// same. Optional in a real run, where each transfer's header says it (given, every header is
  /// checked against it); needed on simulated devices (dax::simulate), which cannot receive the
  /// previous stage's header: torch.distributed.pipelining's PipelineStage(input_args) is the
  /// counterpart.
  using Boundary = std::function<std::pair<Shape, PartitionSpec>(int chunk)>;
  void boundary(Boundary b) { boundary_ = std::move(b); }

  /// This rank's stage (-1 on a rank outside the mesh).
  int stage() const { return stage_; }
  /// Where stage s's parameters and activations live (stage_mesh of this pipeline's mesh).
  const Mesh& stage_mesh(int s) const { return stage_meshes_.at(s); }
  /// Where chunk c's parameters live.
  const Mesh& chunk_mesh(int c) const { return stage_meshes_.at(schedule_.stage_of(c)); }
  /// The last step's times, bubble and peak activations (every rank has every stage's).
  const StepStats& last_stats() const { return stats_; }

  /// The global L2 norm of every chunk's gradients together, the same on every rank of the mesh
  /// (optim::global_norm alone sums only the meshes a rank belongs to: its own stage's). For
  /// optim::clip_by_global_norm(grads, max_norm, norm). Collective over the mesh.
  template <class Params>
  double global_norm(const std::vector<Params>& grads) const {
    if (stage_ < 0) return 0.0;
    const double mine = optim::global_norm(grads);
    double squares = mine * mine;
    if (schedule_.stages > 1) {
      int64_t bits;
      std::memcpy(&bits, &squares, sizeof bits);
      const auto all = Runtime::current().group(mesh_, {mesh_.axis_index(axis_)}).host().all_gather_host({bits});
      squares = 0;
      for (int64_t b : all) {
        double v;
        std::memcpy(&v, &b, sizeof v);
        squares += v;
      }
    }
    return std::sqrt(squares);
  }

  /// One step: every microbatch forward and backward by the schedule. `params[c]` is chunk c's
  /// parameter tree (on chunk_mesh(c)); `inputs` and `targets` hold one entry per microbatch
  /// (inputs on stage 0's mesh, targets on the last chunk's). Returns the mean loss over the
  /// microbatches (a scalar replicated over the whole mesh) and the gradients, one tree per chunk,
  /// each with its parameters' shardings: reduced once, after the last microbatch.
  template <class Params, class In, class Target>
  std::pair<DistArray<T>, std::vector<Params>> value_and_grad(const std::vector<Params>& params,
                                                              const std::vector<In>& inputs,
                                                              const std::vector<Target>& targets) {
    static_assert(is_tree_v<Params>, "dax::pipeline: each chunk's parameters must be a tree of arrays");
    const int chunks = schedule_.chunks(), m = schedule_.microbatches;
    DAX_CHECK(params.size() == size_t(chunks), "pipeline: ", chunks, " chunks' parameters expected, got ",
              params.size());
    DAX_CHECK(inputs.size() == size_t(m) && targets.size() == size_t(m), "pipeline: ", m,
              " microbatches' inputs and targets expected, got ", inputs.size(), " and ", targets.size());
    stats_ = StepStats{};
    std::vector<std::vector<AnyArray>> sums(chunks);  // [chunk][leaf]: the parameters' cotangents so far
    std::vector<Params> traced_of(chunks);             // a recorded copy, for its leaf ids
    std::vector<bool> ran(chunks, false);
    std::vector<double> mine{0, 0, 0};  // busy, seconds, peak
    DistArray<T> loss_sum = zeros<T>({}, NamedSharding(chunk_mesh(chunks - 1), P()));
    if (stage_ >= 0) {
      using Clock = std::chrono::steady_clock;
      const auto start = Clock::now();
      double busy = 0;
      const auto timed = [&](auto&& body) {
        const auto t0 = Clock::now();
        body();
        busy += std::chrono::duration<double>(Clock::now() - t0).count();
      };
      std::map<std::pair<int, int>, Held> held;  // (chunk, microbatch) -> its recorded forward
      // ZB-H1: (chunk, microbatch) -> its tape and what its weight pass has left to do, its leaves.
      std::map<std::pair<int, int>,
               std::pair<std::shared_ptr<::dax::detail::Tape>, std::shared_ptr<::dax::detail::Tape::WeightPass>>>
          weight_passes;
      std::map<std::pair<int, int>, std::vector<uint64_t>> weight_leaves;
      size_t peak = 0;
      link_counts_.clear();
      sent_shapes_.clear();
      const auto& actions = schedule_.actions[stage_];
      OnlyMeshRanks stage_ranks;  // a chunk's shard_maps (ring attention, experts) run on its stage alone
      // The parameters' cotangents add up over the m microbatches, unreduced, and are reduced once:
      // the planner prices each backward's share of that reduction (matmul_rule's `sums`).
      const ::dax::detail::LeafSums leaf_sums(m);
      for (size_t k = 0; k < actions.size(); ++k) {
        const Action& act = actions[k];
        const int c = act.chunk, i = act.microbatch;
        const MemoryPart part(act.pass == Pass::forward ? ::dax::detail::kForwardPart : ::dax::detail::kBackwardPart,
                              true);  // dax::memory_stats().parts, as value_and_grad names them
        // The next pass's input is received while this one computes (once its size is known).
        if (k + 1 < actions.size()) post_receive(actions[k + 1]);
        if (act.pass == Pass::forward) {
          Held h;
          h.tape = std::make_shared<::dax::detail::Tape>();
          Params traced = params[c];
          std::optional<DistArray<T>> out;
          if (c == 0) {
            timed([&] {
              ::dax::detail::TapeScope scope(*h.tape);
              ::dax::detail::watch_tree(*h.tape, traced);
              using E = typename In::value_type;
              if constexpr (::dax::detail::is_floating_v<E>) {
                if (schedule_.kind == ScheduleKind::zero_bubble_h1) {
                  // Marked, never differentiated: ZB-H1's B pass on the first chunk is the
                  // activations' gradients (what depends on the input), its W pass the weights'.
                  In x = inputs[i];
                  x.set_trace_id(h.tape->watch(/*summed=*/false));
                  h.x_id = x.trace_id();
                  h.x_is_input = true;
                  out = chunk_(c, std::as_const(traced), std::as_const(x));
                  return;
                }
              }
              out = chunk_(c, std::as_const(traced), inputs[i]);
            });
          } else {
            DistArray<T> x = receive(c - 1, c, i, /*gradient=*/false);
            timed([&] {
              ::dax::detail::TapeScope scope(*h.tape);
              ::dax::detail::watch_tree(*h.tape, traced);
              x.set_trace_id(h.tape->watch(/*summed=*/false));  // its gradient goes back every microbatch
              h.x_id = x.trace_id();
              h.x_shape = x.shape();
              h.x_sharding = std::make_shared<NamedSharding>(x.sharding());
              out = chunk_(c, std::as_const(traced), std::as_const(x));
            });
          }
          timed([&] {
            if (c == chunks - 1) {
              DistArray<T> l = [&] {
                ::dax::detail::TapeScope scope(*h.tape);
                return loss_(std::as_const(*out), targets[i]);
              }();
              DAX_CHECK(l.ndim() == 0, "pipeline: the loss must be a scalar, got shape ", ::dax::to_string(l.shape()));
              h.out_id = l.trace_id();
              h.out_sharding = std::make_shared<NamedSharding>(l.sharding());
              loss_sum = add(loss_sum, reshard(::dax::detail::detached(l), loss_sum.sharding()));
            } else {
              h.out_id = out->trace_id();
              send(c + 1, i, ::dax::detail::detached(*out), /*gradient=*/false);
            }
            ::dax::detail::leaf_ids(traced, h.leaves);
          });
          traced_of[c] = std::move(traced);
          ran[c] = true;
          held.emplace(std::pair{c, i}, std::move(h));
          peak = std::max(peak, held.size());
        } else if (act.pass == Pass::backward || act.pass == Pass::backward_input) {
          auto it = held.find({c, i});
          DAX_CHECK(it != held.end(), "pipeline: the schedule runs the backward of microbatch ", i, " through chunk ",
                    c, " before its forward");
          Held h = std::move(it->second);
          held.erase(it);
          DistArray<T> g = c == chunks - 1 ? full<T>({}, T(1) / T(m), NamedSharding(h.out_sharding->mesh(), P()))
                                           : receive(c + 1, c, i, /*gradient=*/true);
          timed([&] {
            std::unordered_map<uint64_t, AnyArray> cotangents;
            if (act.pass == Pass::backward) {
              std::vector<uint64_t> wanted = h.leaves;
              if (h.x_id != 0) wanted.push_back(h.x_id);
              // Each pullback's saved values go as soon as it has run (as value_and_grad's), so the
              // later layers' activations are gone before the earlier layers' gradients are made.
              cotangents = h.tape->backward_once(h.out_id, AnyArray(g), wanted);
              add_sums(sums[c], h.leaves, cotangents);
              h.tape.reset();
            } else {
              // ZB-H1's B: the input's gradient only; the weights' GEMMs wait for the W pass, with
              // the tape (counted as held until here, as the zero-bubble paper counts it).
              auto later = std::make_shared<::dax::detail::Tape::WeightPass>();
              cotangents = h.tape->backward_input(h.out_id, AnyArray(g), h.x_id, *later, !h.x_is_input);
              weight_passes.emplace(std::pair{c, i}, std::pair{std::move(h.tape), std::move(later)});
              weight_leaves[{c, i}] = h.leaves;
            }
            if (c > 0) {
              auto ct = cotangents.find(h.x_id);
              DistArray<T> gx = ct == cotangents.end() ? zeros<T>(h.x_shape, *h.x_sharding)
                                                       : reshard(ct->second.template as<T>(), *h.x_sharding);
              send(c - 1, i, gx, /*gradient=*/true);
            }
          });
        } else {  // ZB-H1's W: the weights' gradients, filling what would be the bubble
          auto it = weight_passes.find({c, i});
          DAX_CHECK(it != weight_passes.end(), "pipeline: the schedule runs the weight pass of microbatch ", i,
                    " through chunk ", c, " before its input pass");
          timed([&] {
            auto [tape, later] = std::move(it->second);
            weight_passes.erase(it);
            const auto cotangents = tape->backward_weight(*later, weight_leaves.at({c, i}));
            add_sums(sums[c], weight_leaves.at({c, i}), cotangents);
          });
        }
      }
      for (auto& o : outgoing_) {
        o.header_sent->wait();
        o.payload_sent->wait();
      }
      outgoing_.clear();
      mine = {busy, std::chrono::duration<double>(Clock::now() - start).count(), double(peak)};
    }
    // Gradients: each chunk's summed cotangents, reduced once to its parameters' shardings.
    std::vector<Params> grads;
    const MemoryPart gradients_part(::dax::detail::kGradientsPart, true);
    for (int c = 0; c < chunks; ++c) {
      std::unordered_map<uint64_t, AnyArray> by_id;
      if (ran[c]) {
        std::vector<uint64_t> ids;
        ::dax::detail::leaf_ids(traced_of[c], ids);
        for (size_t k = 0; k < ids.size() && k < sums[c].size(); ++k)
          if (!sums[c][k].empty()) by_id.emplace(ids[k], sums[c][k]);
      }
      grads.push_back(::dax::detail::gradient_tree(by_id, params[c], ran[c] ? traced_of[c] : params[c]));
    }
    // Every rank learns every stage's times and peak, and the loss, from the stage group.
    const double loss_value = loss_sum.is_addressable() ? double(loss_sum.to_host()[0]) : 0.0;
    gather_stats(mine, loss_value);
    return {full<T>({}, T(stats_loss_), NamedSharding(mesh_, P())), std::move(grads)};
  }

 private:
  using AnyArray = ::dax::detail::AnyArray;
  struct Held {
    std::shared_ptr<::dax::detail::Tape> tape;
    uint64_t out_id = 0, x_id = 0;
    bool x_is_input = false;  // x_id marks chunk 0's input (ZB-H1), whose gradient nobody wants
    std::vector<uint64_t> leaves;
    Shape x_shape;
    std::shared_ptr<NamedSharding> x_sharding, out_sharding;
  };

  // Adds a backward's cotangents of `leaves` to a chunk's sums (kept unreduced: DESIGN §6).
  static void add_sums(std::vector<AnyArray>& sum, const std::vector<uint64_t>& leaves,
                       const std::unordered_map<uint64_t, AnyArray>& cotangents) {
    sum.resize(leaves.size());
    for (size_t k = 0; k < leaves.size(); ++k) {
      auto ct = cotangents.find(leaves[k]);
      if (ct == cotangents.end()) continue;
      sum[k] = sum[k].empty() ? ct->second : ::dax::detail::add_cotangents(sum[k], ct->second);
      sum[k].relabel(::dax::detail::gradients_memory_part());  // a parameter's: "gradients" (memory parts)
    }
  }

  // A transfer's tags: its header and payload, per (receiving chunk, microbatch, direction), so
  // transfers in flight between two stages never match the wrong receive.
  int tag(int to_chunk, int microbatch, bool gradient, bool payload) const {
    const int64_t t = ((int64_t(to_chunk) * schedule_.microbatches + microbatch) * 2 + gradient) * 2 + payload;
    return static_cast<int>(t % 32000);  // MPI guarantees tags up to 32767
  }

  void send(int to_chunk, int microbatch, const DistArray<T>& x, bool gradient) {
    const int to = schedule_.stage_of(to_chunk);
    if (to == stage_) {  // the next chunk is on this stage: nothing to move
      local_.insert_or_assign(std::tuple{to_chunk, microbatch, gradient}, x);
      return;
    }
    // A step's microbatches cross each link with one shape: the receiver posts its receives ahead
    // with the first one's size.
    const auto [first, fresh] = sent_shapes_.try_emplace(std::pair{to_chunk, gradient}, x.shape());
    DAX_CHECK(fresh || first->second == x.shape(), "pipeline: microbatch ", microbatch, "'s ",
              gradient ? "gradient" : "activation", " into chunk ", to_chunk, " has shape ", ::dax::to_string(x.shape()),
              ", an earlier microbatch's had ", ::dax::to_string(first->second),
              "; the microbatches of a step must have one shape");
    ::dax::detail::Communicator& link = *links_.at(to);
    const int peer = to < stage_ ? 0 : 1;
    detail::Outgoing o;
    o.header = detail::transfer_header(dtype_v<T>, x.shape(), x.sharding());
    auto keep = std::make_shared<DistArray<T>>(x);
    o.header_sent = link.start_send(o.header.data(), peer, detail::kHeaderLength, DType::int64,
                                    tag(to_chunk, microbatch, gradient, false));
    o.payload_sent = link.start_send(keep->local_data().data(), peer, int64_t(keep->local_data().size()), dtype_v<T>,
                                     tag(to_chunk, microbatch, gradient, true));
    stats_.bytes_sent += int64_t(keep->local_data().size_bytes());
    o.keep = std::move(keep);
    outgoing_.push_back(std::move(o));
  }

  DistArray<T> receive(int from_chunk, int to_chunk, int microbatch, bool gradient) {
    const int from = schedule_.stage_of(from_chunk);
    if (from == stage_) {
      auto it = local_.find(std::tuple{to_chunk, microbatch, gradient});
      DAX_CHECK(it != local_.end(), "pipeline: the schedule runs chunk ", to_chunk, " of microbatch ", microbatch,
                " before what it needs from chunk ", from_chunk);
      DistArray<T> x = std::move(it->second);
      local_.erase(it);
      return x;
    }
    const int64_t started = ::dax::detail::collective_start();
    const auto key = std::tuple{to_chunk, microbatch, gradient};
    auto posted = posted_.find(key);
    Posted r = posted != posted_.end() ? std::move(posted->second) : start_receive(to_chunk, microbatch, gradient, -1);
    if (posted != posted_.end()) posted_.erase(posted);
    r.header_received->wait();
    const Mesh& here = stage_meshes_[stage_];
    const int crossing = gradient ? to_chunk + 1 : to_chunk;  // the chunk whose input crosses the link
    Shape shape;
    PartitionSpec spec;
    if (::dax::detail::dev::on_meta()) {  // nothing was sent: the boundary says what would have been
      DAX_CHECK(bool(boundary_), "pipeline: a simulated device cannot receive what the previous stage sends into "
                "chunk ", crossing, " (its transfer header); give the boundaries' shapes with Pipeline::boundary");
      std::tie(shape, spec) = boundary_(crossing);
    } else {
      std::tie(shape, spec) = detail::read_header(r.header, dtype_v<T>, here);
      if (boundary_) {
        const auto [want_shape, want_spec] = boundary_(crossing);
        DAX_CHECK(want_shape == shape && NamedSharding(here, want_spec) == NamedSharding(here, spec), "pipeline: ",
                  gradient ? "the gradient" : "the activation", " into chunk ", to_chunk, " came as ",
                  ::dax::to_string(shape), " ", ::dax::to_string(spec), ", Pipeline::boundary says ",
                  ::dax::to_string(want_shape), " ", ::dax::to_string(want_spec));
      }
    }
    NamedSharding sharding(here, spec);
    const int64_t count = numel(sharding.device_indices(Runtime::current().rank(), shape));
    if (!r.payload_received) {  // the first of the step on this link: its size is learned here
      r = start_receive(to_chunk, microbatch, gradient, count, std::move(r));
      link_counts_[std::pair{to_chunk, gradient}] = count;
    }
    DAX_CHECK(r.count == count, "pipeline: microbatch ", microbatch, "'s ", gradient ? "gradient" : "activation",
              " into chunk ", to_chunk, " has ", count, " elements here, an earlier microbatch's had ", r.count,
              "; the microbatches of a step must have one shape");
    r.payload_received->wait();
    auto piece = std::move(r.piece);
    // In comm_stats as the bytes this device received over the stage axis, as for any collective
    // (its call site: the pipeline's activations or gradients, inside the caller's scope).
    const ::dax::detail::SiteScope site(::dax::detail::SiteScope::Part{},
                                        gradient ? "pipeline gradients" : "pipeline activations");
    ::dax::detail::count_collective("send_recv", "('" + axis_ + "',)", count * int64_t(sizeof(T)), started, 2);
    return DistArray<T>(shape, sharding, std::move(piece));
  }

  // A receive started ahead: its header, and its payload once the size is known.
  struct Posted {
    std::vector<int64_t> header;
    std::unique_ptr<::dax::detail::PendingCollective> header_received, payload_received;
    std::shared_ptr<::dax::detail::Buffer> piece;
    int64_t count = -1;
  };

  // Starts receiving the transfer into `to_chunk`: the header (unless `r` has it started), and
  // the payload of `count` elements when count >= 0.
  Posted start_receive(int to_chunk, int microbatch, bool gradient, int64_t count, Posted r = {}) {
    const int from = schedule_.stage_of(gradient ? to_chunk + 1 : to_chunk - 1);
    ::dax::detail::Communicator& link = *links_.at(from);
    const int peer = from < stage_ ? 0 : 1;
    if (!r.header_received) {
      r.header.assign(detail::kHeaderLength, 0);
      r.header_received = link.start_recv(r.header.data(), peer, detail::kHeaderLength, DType::int64,
                                          tag(to_chunk, microbatch, gradient, false));
    }
    if (count >= 0) {
      r.count = count;
      r.piece = ::dax::detail::dev::allocate(size_t(count) * sizeof(T));
      r.payload_received = link.start_recv(r.piece->data(), peer, count, dtype_v<T>,
                                           tag(to_chunk, microbatch, gradient, true));
    }
    return r;
  }

  // Posts the receive `act` will wait for, if it comes from another stage and this step has
  // already seen its link's size (shared-memory MPI moves a message only while both sides are in
  // MPI: posted, it moves during this stage's ops as well as the sender's).
  void post_receive(const Action& act) {
    if (act.pass == Pass::backward_weight) return;  // receives nothing
    const bool gradient = act.pass != Pass::forward;
    const int c = act.chunk;
    if (gradient ? c + 1 >= schedule_.chunks() : c == 0) return;
    if (schedule_.stage_of(gradient ? c + 1 : c - 1) == stage_) return;
    const auto key = std::tuple{c, act.microbatch, gradient};
    const auto size = link_counts_.find(std::pair{c, gradient});
    if (size == link_counts_.end() || posted_.contains(key)) return;
    posted_.emplace(key, start_receive(c, act.microbatch, gradient, size->second));
  }

  // Over the stage group (the devices sharing this rank's coordinates off the stage axis): every
  // stage's busy time, step time and peak, and the loss the last stage summed.
  void gather_stats(const std::vector<double>& mine, double loss) {
    const int p = schedule_.stages;
    stats_.busy.assign(p, 0);
    stats_.seconds.assign(p, 0);
    stats_.peak_activations.assign(p, 0);
    stats_loss_ = loss;
    if (stage_ < 0) return;
    auto bits = [](double v) {
      int64_t b;
      std::memcpy(&b, &v, sizeof b);
      return b;
    };
    auto value = [](int64_t b) {
      double v;
      std::memcpy(&v, &b, sizeof v);
      return v;
    };
    std::vector<int64_t> all = {bits(mine[0]), bits(mine[1]), int64_t(mine[2]), bits(loss)};
    if (p > 1) all = Runtime::current().group(mesh_, {mesh_.axis_index(axis_)}).host().all_gather_host(all);
    for (int s = 0; s < p; ++s) {
      stats_.busy[s] = value(all[4 * s]);
      stats_.seconds[s] = value(all[4 * s + 1]);
      stats_.peak_activations[s] = static_cast<int>(all[4 * s + 2]);
    }
    stats_loss_ = value(all[4 * schedule_.stage_of(schedule_.chunks() - 1) + 3]) / schedule_.microbatches;
    stats_.makespan = *std::max_element(stats_.seconds.begin(), stats_.seconds.end());
    double busy = 0;
    for (double b : stats_.busy) busy += b;
    stats_.bubble = stats_.makespan > 0 ? 1.0 - busy / (p * stats_.makespan) : 0.0;
  }

  Mesh mesh_;
  Schedule schedule_;
  Chunk chunk_;
  Loss loss_;
  std::string axis_;
  std::vector<Mesh> stage_meshes_;
  Boundary boundary_;
  std::vector<int64_t> coords_;
  int stage_ = -1;
  std::map<int, ::dax::detail::Communicator*> links_;  // other stage -> the pair's communicator
  std::map<std::tuple<int, int, bool>, DistArray<T>> local_;  // handoffs between chunks of this stage
  std::vector<detail::Outgoing> outgoing_;
  std::map<std::tuple<int, int, bool>, Posted> posted_;      // (to chunk, microbatch, gradient)
  std::map<std::pair<int, bool>, int64_t> link_counts_;      // (to chunk, gradient) -> elements, this step
  std::map<std::pair<int, bool>, Shape> sent_shapes_;        // (to chunk, gradient) -> shape, this step
  StepStats stats_;
  double stats_loss_ = 0;
};

/// dax::pipeline::make<float>(mesh, make_schedule(ScheduleKind::one_f_one_b, 4, 8), chunk, loss):
/// a Pipeline whose activations are DistArray<T> (see Pipeline).
template <class T, class Chunk, class Loss>
Pipeline<T, Chunk, Loss> make(Mesh mesh, Schedule schedule, Chunk chunk, Loss loss, std::string axis = "stage") {
  return Pipeline<T, Chunk, Loss>(std::move(mesh), std::move(schedule), std::move(chunk), std::move(loss),
                                  std::move(axis));
}

}  // namespace dax::pipeline
