// Context parallelism: ring attention (Liu et al. 2023; the load-balanced causal order of
// Megatron-LM's context parallel and Brandon et al.'s striped / zigzag attention).
//
// Each device of a 'context' axis of c devices holds a block of the sequence of q, k and v. The k
// and v blocks travel around the ring (ppermute, one neighbour each step), and each device
// attends its queries to the block at hand; after c steps every query has seen every key. The
// blocks' partial results are combined as flash attention combines its tiles: each block gives
// its output normalised by its own softmax sum and that sum's log (lse), and the total is the
// blocks' outputs weighted by exp(lse_block - lse_total).
//
// Causal attention with contiguous blocks would leave device 0 one block of work and device c-1
// c blocks. In the zigzag order the sequence is cut into 2c chunks and device i holds chunks i and
// 2c-1-i, so every device does the same work: a query chunk a attends kv chunk b in full when
// b < a, causally when b == a, not at all when b > a. The caller lays the sequence out in that
// order once (zigzag_order: permute token ids, positions and labels alike when loading a batch);
// attention is the only op that cares.
//
// The next k and v blocks are passed on (ppermute_start) while the blocks at hand are computed,
// and waited for after them (RingAttention::overlap): the exchange hides behind the compute where
// a block's compute takes longer than its transfer.
//
// Each block is one fused attention kernel each way (nn/attention.hpp): its output and its
// queries' log-sum-exp (lse) forward, no block's scores ever in memory; outputs are combined in
// the compute type (float for bfloat16 / half, whose k and v travel in their own 2 bytes). The
// backward of each block runs against the whole output and lse (as flash attention's tiles), and
// comes in two kinds (RingAttention::recompute):
// - recompute (the default, as ring-flash-attention): the forward keeps only each query's output
//   and lse; the backward sends k, v and their gradients' accumulators around the ring once more.
//   Bytes per call, per device, in blocks of k: 2(c-1) forward, 2(c-1) + 2c backward (the
//   accumulators take one more step home).
// - kept blocks (what ring_attention_shard, the body inside a caller's shard_map, runs): the
//   forward keeps the k and v chunks it met; the backward computes each one's gradient where it
//   was met and sends the accumulators back around the ring: 2(c-1) blocks each way, and every
//   k / v block in memory (1/c of the unsplit k and v, c times).
#pragma once

#include <dax/core/compiled_mode.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <dax/array/creation.hpp>
#include <dax/autodiff/custom_vjp.hpp>
#include <dax/core/error.hpp>
#include <dax/core/float16.hpp>
#include <dax/manual/collectives.hpp>
#include <dax/manual/shard_map.hpp>
#include <dax/nn/attention.hpp>
#include <dax/ops/elementwise.hpp>
#include <dax/ops/join.hpp>
#include <dax/ops/reduction.hpp>

namespace dax::parallel {

/// The zigzag order of a sequence of `length` over `devices` devices: entry p is the original
/// position of the token that goes to place p. The sequence is cut into 2 * devices chunks (the
/// length must divide evenly) and device i's block is chunk i followed by chunk 2 * devices - 1 - i.
inline std::vector<int64_t> zigzag_order(int64_t length, int devices) {
  DAX_CHECK(devices >= 1 && length % (2 * devices) == 0, "zigzag_order: expected a length divisible by 2 x ",
            devices, " devices, got ", length);
  const int64_t chunk = length / (2 * devices);
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(length));
  for (int i = 0; i < devices; ++i)
    for (int64_t part : {int64_t(i), int64_t(2 * devices - 1 - i)})
      for (int64_t t = 0; t < chunk; ++t) order.push_back(part * chunk + t);
  return order;
}

namespace detail {

using dax::detail::compute_t;

/// x as element type S (itself when it already is; a local cast, no communication).
template <class S, class T>
DistArray<S> in_type(const DistArray<T>& x) {
  if constexpr (std::is_same_v<S, T>) return x;
  else return astype<S>(x);
}

/// The k and v chunks a device met at each step of the ring, kept for the backward: [step][part],
/// empty where the part met no query chunk.
template <class T>
using KeptBlocks = std::vector<std::vector<std::optional<std::pair<DistArray<T>, DistArray<T>>>>>;

/// This device's place in the ring, shared by the ring's bodies below: c devices, this one's
/// index, its query chunks (two in zigzag order when causal, one whole block otherwise), which
/// block pairs meet at each step, and the permutations that pass blocks on around the ring.
template <class T>
class RingBlocks {
 public:
  RingBlocks(const Shape& shape, const std::string& axis, bool causal, bool overlap = true)
      : c(axis_size(axis)), me(axis_index(axis)), parts(causal ? 2 : 1), len(shape[1] / parts), shape_(shape),
        causal_(causal), overlap_(overlap) {
    for (int d = 0; d < c; ++d) ring.push_back({d, (d + 1) % c});  // each device passes on to the next
    for (int d = 0; d < c; ++d) back.push_back({d, (d + c - 1) % c});  // and back
  }

  const int c, me, parts;
  const int64_t len;  // tokens in one chunk
  std::vector<std::pair<int, int>> ring, back;

  /// Whose k and v are here at `step`.
  int from(int step) const { return (me - step + c) % c; }
  /// The global chunk index of `device`'s chunk `part`.
  int chunk_of(int device, int part) const { return part == 0 ? device : 2 * c - 1 - device; }
  /// Whether query chunk `a` of this device meets key chunk `b` of `device` (not all in its future).
  bool meets(int a, int device, int b) const { return !causal_ || chunk_of(device, b) <= chunk_of(me, a); }
  /// Whether they meet on the diagonal (the same chunk: causal within the block).
  bool diagonal(int a, int device, int b) const { return causal_ && chunk_of(device, b) == chunk_of(me, a); }
  /// Walks k and v (b, n, h, e) around the ring: at each step, visit(a, b, from, k_b, v_b) for every
  /// query chunk a of this device and chunk b of the visiting block (from `from`) that meet; then k
  /// and v move on to the next device (but after the last step) and after_step() runs. With
  /// `overlap` (the default) k and v are passed on while the step's blocks are visited
  /// (ppermute_start, waited for after the visits): the transfer hides behind the step's compute.
  template <class Visit, class AfterStep>
  void walk(DistArray<T> k, DistArray<T> v, const std::string& axis, Visit&& visit, AfterStep&& after_step) {
    for (int step = 0; step < c; ++step) {
      const int device = from(step);
      const bool pass_on = step + 1 < c;
      std::optional<PendingPpermute<T>> next_k, next_v;
      if (pass_on && overlap_) next_k.emplace(ppermute_start(k, axis, ring)), next_v.emplace(ppermute_start(v, axis, ring));
      for (int a = 0; a < parts; ++a)
        for (int b = 0; b < parts; ++b)
          if (meets(a, device, b)) visit(a, b, device, cut(k, b), cut(v, b));
      if (pass_on) {
        k = overlap_ ? next_k->wait() : ppermute(k, axis, ring);
        v = overlap_ ? next_v->wait() : ppermute(v, axis, ring);
      }
      after_step();
    }
  }

  /// Chunk `part` along the sequence: dim 1 of (b, n, h, e). A view into x where the chunk is
  /// contiguous (a batch of one here), else a copy: the kernels' operands, while x lives anyway.
  template <class S>
  DistArray<S> cut(const DistArray<S>& x, int part) const {
    return parts == 1 ? x : dax::detail::window_along(x, 1, part * len, (part + 1) * len);
  }
  /// Chunk `part` along the queries: dim 2 of a (b, h, n) row statistic.
  template <class S>
  DistArray<S> cut_rows(const DistArray<S>& x, int part) const {
    return parts == 1 ? x : dax::detail::window_along(x, 2, part * len, (part + 1) * len);
  }
  /// acc's chunk `part` (dim 1) += x, in place: a block's gradient summed chunk by chunk.
  template <class S>
  void add_to_chunk(DistArray<S>& acc, const DistArray<S>& x, int part) const {
    dax::detail::add_into_window(acc, x, 1, part * len);
  }
  /// The chunks joined along the sequence again.
  template <class S>
  DistArray<S> joined(const std::vector<DistArray<S>>& xs, int64_t dim = 1) const {
    return parts == 1 ? xs[0] : concatenate(xs, dim);
  }
  /// Zeros of this device's block's shape (b, n, h, e).
  template <class S>
  DistArray<S> zero_block() const {
    return zeros<S>(shape_, local_sharding());
  }

 private:
  Shape shape_;
  bool causal_, overlap_;
};

/// x in a buffer of its own: a copy where x views a larger one (a chunk kept for the backward
/// must not keep its whole block alive).
template <class T>
DistArray<T> owned(const DistArray<T>& x) {
  if (!x.is_addressable() || !x.buffer()->is_view()) return x;
  return slice(x, std::vector<int64_t>(x.ndim(), 0), std::vector<int64_t>(x.shape().begin(), x.shape().end()));
}

/// A (b, h, n) row statistic as a (b, n, h, 1) factor of outputs laid out (b, n, h, e).
template <class T>
DistArray<T> per_row(const DistArray<T>& x) {
  return expand_dims(transpose(x, {0, 2, 1}), 3);
}

/// The forward on this device's blocks (b, n, h, e): its queries' outputs and, per query, the log
/// of its softmax's sum over every key (b, h, n), in the compute type. Each block is one fused
/// attention kernel (its output and lse; causal on the diagonal), and blocks are combined as they
/// come, in the compute type. With `kept`, the k and v chunks met are kept there for the backward.
template <class T>
std::tuple<DistArray<T>, DistArray<compute_t<T>>> ring_forward_block(const DistArray<T>& q, DistArray<T> k,
                                                                     DistArray<T> v, const std::string& axis,
                                                                     bool causal, double scale, bool overlap = true,
                                                                     KeptBlocks<T>* kept = nullptr) {
  using C = compute_t<T>;
  RingBlocks<T> r(q.shape(), axis, causal, overlap);
  if (kept) kept->assign(size_t(r.c), std::vector<std::optional<std::pair<DistArray<T>, DistArray<T>>>>(size_t(r.parts)));
  std::vector<std::optional<DistArray<C>>> outs(size_t(r.parts)), lses(size_t(r.parts));
  int step = 0;
  auto visit = [&](int a, int b, int from, const DistArray<T>& kb, const DistArray<T>& vb) {
    auto [o, saved] = dax::detail::fused_attention_forward(r.cut(q, a), kb, vb, scale, r.diagonal(a, from, b));
    if (kept) (*kept)[size_t(step)][size_t(b)] = std::pair{owned(kb), owned(vb)};
    const DistArray<C>& lse = saved.lse;
    auto& out = outs[size_t(a)];
    auto& total = lses[size_t(a)];
    if (!out) {
      out = in_type<C>(o), total = lse;
    } else {  // log(e^x + e^y) = m + log(e^(x-m) + e^(y-m)), m = max(x, y)
      const DistArray<C> m = maximum(*total, lse);
      const DistArray<C> both = m + log(exp(*total - m) + exp(lse - m));
      out = *out * per_row(exp(*total - both)) + in_type<C>(o) * per_row(exp(lse - both));
      total = both;
    }
  };
  r.walk(k, v, axis, visit, [&] { ++step; });
  std::vector<DistArray<T>> o_parts;
  std::vector<DistArray<C>> lse_parts;
  for (int a = 0; a < r.parts; ++a) {
    o_parts.push_back(in_type<T>(*outs[size_t(a)]));
    lse_parts.push_back(*lses[size_t(a)]);
  }
  return {r.joined(o_parts), r.joined(lse_parts, 2)};
}

/// The gradients of one query chunk a against one key chunk (k_b, v_b) met on `from`'s block: the
/// fused attention backward against the whole output and lse (nn/attention.hpp: P = exp(S - lse),
/// dV_b = P^T dO, dS = P (dO V_b^T - rowsum(dO O)), dQ_a = dS K_b scale, dK_b = dS^T Q_a scale).
template <class T>
std::tuple<DistArray<T>, DistArray<T>, DistArray<T>> ring_block_grads(const RingBlocks<T>& r, int a, int b, int from,
                                                                      const DistArray<T>& q, const DistArray<T>& kb,
                                                                      const DistArray<T>& vb, const DistArray<T>& out,
                                                                      const DistArray<compute_t<T>>& lse,
                                                                      const DistArray<T>& g, double scale) {
  const dax::detail::AttentionSaved<T> block{r.cut(q, a), kb, vb, r.cut(out, a), r.cut_rows(lse, a), scale,
                                              r.diagonal(a, from, b)};
  return dax::detail::fused_attention_backward(block, r.cut(g, a));
}

/// The recomputing backward on this device's blocks: q, k, v, the output and the cotangent g
/// (b, n, h, e), lse (b, h, n). k and v go around the ring again, each met pair's gradients from
/// ring_block_grads added in place to the block's accumulators: dQ's here (in the compute type),
/// dK's and dV's (in T) travelling with k and v, home at the end.
template <class T>
std::tuple<DistArray<T>, DistArray<T>, DistArray<T>> ring_backward_block(const DistArray<T>& q, DistArray<T> k,
                                                                         DistArray<T> v, const DistArray<T>& out,
                                                                         const DistArray<compute_t<T>>& lse,
                                                                         const DistArray<T>& g, const std::string& axis,
                                                                         bool causal, double scale, bool overlap = true) {
  using C = compute_t<T>;
  RingBlocks<T> r(q.shape(), axis, causal, overlap);
  DistArray<C> dq = r.template zero_block<C>();
  DistArray<T> dk = r.template zero_block<T>(), dv = r.template zero_block<T>();
  auto visit = [&](int a, int b, int from, const DistArray<T>& kp, const DistArray<T>& vp) {
    auto [dq_ab, dk_ab, dv_ab] = ring_block_grads(r, a, b, from, q, kp, vp, out, lse, g, scale);
    r.add_to_chunk(dq, in_type<C>(dq_ab), a);
    r.add_to_chunk(dk, dk_ab, b);
    r.add_to_chunk(dv, dv_ab, b);
  };
  // The accumulators of k's and v's gradients go with them, one step more: after c steps they are
  // back on the device they belong to.
  r.walk(k, v, axis, visit, [&] {
    if (r.c == 1) return;
    dk = ppermute(dk, axis, r.ring), dv = ppermute(dv, axis, r.ring);
  });
  return {in_type<T>(dq), dk, dv};
}

/// The kept-blocks backward: each k / v chunk's gradient where the forward met it (from `kept`),
/// the accumulators of dK and dV sent back around the ring, c-1 steps: the device that met a block
/// last starts its accumulator, each device before it on the way home adds its own part. dQ is
/// summed here, in the compute type.
template <class T>
std::tuple<DistArray<T>, DistArray<T>, DistArray<T>> ring_backward_kept(const DistArray<T>& q, const KeptBlocks<T>& kept,
                                                                        const DistArray<T>& out,
                                                                        const DistArray<compute_t<T>>& lse,
                                                                        const DistArray<T>& g, const std::string& axis,
                                                                        bool causal, double scale) {
  using C = compute_t<T>;
  RingBlocks<T> r(q.shape(), axis, causal);
  DistArray<C> dq = r.template zero_block<C>();
  std::optional<DistArray<T>> dk_home, dv_home;  // the accumulators of the block met at `step`
  for (int step = r.c - 1; step >= 0; --step) {
    if (dk_home) dk_home = ppermute(*dk_home, axis, r.back), dv_home = ppermute(*dv_home, axis, r.back);
    else dk_home = r.template zero_block<T>(), dv_home = r.template zero_block<T>();
    const int device = r.from(step);
    for (int a = 0; a < r.parts; ++a)
      for (int b = 0; b < r.parts; ++b) {
        if (!r.meets(a, device, b)) continue;
        const auto& [kb, vb] = *kept[size_t(step)][size_t(b)];
        auto [dq_ab, dk_ab, dv_ab] = ring_block_grads(r, a, b, device, q, kb, vb, out, lse, g, scale);
        r.add_to_chunk(dq, in_type<C>(dq_ab), a);
        r.add_to_chunk(*dk_home, dk_ab, b);
        r.add_to_chunk(*dv_home, dv_ab, b);
      }
  }
  return {in_type<T>(dq), *dk_home, *dv_home};
}

/// What the kept-blocks ring keeps for its backward.
template <class T>
struct RingKept {
  DistArray<T> q, out;
  DistArray<compute_t<T>> lse;
  KeptBlocks<T> kept;
};

/// Ring attention on this device's blocks inside a shard_map body, with the kept-blocks backward
/// (a custom VJP: its backward runs in the body's context, as the tape runs a body's pullbacks).
template <class T>
DistArray<T> ring_attention_kept(const DistArray<T>& q, const DistArray<T>& k, const DistArray<T>& v,
                                 const std::string& axis, bool causal, double scale, bool overlap = true) {
  const auto f = custom_vjp(
      "ring_attention",
      [=](const DistArray<T>& qb, const DistArray<T>& kb, const DistArray<T>& vb) {
        KeptBlocks<T> kept;
        auto [out, lse] = ring_forward_block(qb, kb, vb, axis, causal, scale, overlap, &kept);
        return std::pair{out, RingKept<T>{qb, out, std::move(lse), std::move(kept)}};
      },
      [=](const RingKept<T>& s, const DistArray<T>& g) {
        return ring_backward_kept(s.q, s.kept, s.out, s.lse, g, axis, causal, scale);
      });
  return f(q, k, v);
}

}  // namespace detail

/// How ring_attention runs (the header's comment has the trade).
struct RingAttention {
  bool causal = true;
  double scale = 0;        // <= 0: 1 / sqrt(head_dim)
  bool recompute = true;   // the backward sends k and v around again (memory: this device's blocks)
                           // rather than keep every block the forward met (bytes: 2(c-1) blocks less)
  bool overlap = true;     // pass k and v on while the blocks at hand are computed (ppermute_start)
};

/// softmax(q k^T * scale) v over the whole sequence, with the sequence split over mesh axis
/// `axis` (context parallelism). q, k, v: (batch, sequence, heads, head_dim) on one mesh; the
/// batch and the heads keep q's split (e.g. 'data' and 'model'), the sequence is split over
/// `axis` (moved there first if it is not), and with `causal` it must be in zigzag_order for the
/// axis's size. The result is laid out like the moved q.
template <class T>
DistArray<T> ring_attention(const DistArray<T>& q, const DistArray<T>& k, const DistArray<T>& v,
                            const std::string& axis, const RingAttention& options = {}) {
  DAX_CHECK(q.ndim() == 4 && k.shape() == q.shape() && v.shape() == q.shape(),
            "ring_attention: expected q, k, v of one shape (batch, sequence, heads, head_dim), got ",
            to_string(q.shape()), ", ", to_string(k.shape()), ", ", to_string(v.shape()));
  const bool causal = options.causal;
  const Mesh& mesh = q.sharding().mesh();
  const int x = mesh.find_axis(axis);
  DAX_CHECK(x >= 0, "ring_attention: expected an axis of ", to_string(mesh), ", got '", axis, "'");
  const int c = static_cast<int>(mesh.axis_size(x));
  const int64_t seq = q.shape()[1];
  DAX_CHECK(seq % (causal ? 2 * c : c) == 0, "ring_attention: the sequence (", seq, ") must divide into ",
            causal ? "2 x " : "", c, " equal chunks over '", axis, "'");
  const PartitionSpec& qs = q.sharding().spec();
  auto entry = [&](size_t d) { return d < qs.size() ? qs[d] : PartitionSpec::Entry(none); };
  for (size_t d : {size_t(0), size_t(2)}) {
    const PartitionSpec::Entry split = entry(d);
    for (const std::string& name : split.axes())
      DAX_CHECK(name != axis, "ring_attention: q's dimension ", d, " is split over '", axis,
                "', the sequence's axis; expected it split over other axes, got ", to_string(qs));
  }
  const PartitionSpec spec(entry(0), axis, entry(2), none);
  const double s = options.scale > 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(q.shape()[3]));
  const bool overlap = options.overlap;
  if (!options.recompute)
    return shard_map(
        [axis, causal, s, overlap](const DistArray<T>& qb, const DistArray<T>& kb, const DistArray<T>& vb) {
          return detail::ring_attention_kept(qb, kb, vb, axis, causal, s, overlap);
        },
        mesh, {spec, spec, spec}, spec)(q, k, v);
  using C = dax::detail::compute_t<T>;
  const PartitionSpec rows(entry(0), entry(2), axis);  // lse: (batch, heads, sequence)
  auto forward = [=](const DistArray<T>& qf, const DistArray<T>& kf, const DistArray<T>& vf) {
    const NamedSharding at(mesh, spec);
    const DistArray<T> qm = reshard(qf, at), km = reshard(kf, at), vm = reshard(vf, at);
    auto [out, lse] = shard_map(
        [axis, causal, s, overlap](const DistArray<T>& qb, const DistArray<T>& kb, const DistArray<T>& vb) {
          return detail::ring_forward_block(qb, kb, vb, axis, causal, s, overlap);
        },
        mesh, {spec, spec, spec}, std::vector<PartitionSpec>{spec, rows})(qm, km, vm);
    return std::pair{out, std::tuple{qm, km, vm, out, lse}};
  };
  auto backward = [=](const auto& saved, const DistArray<T>& g) {
    const auto& [qm, km, vm, out, lse] = saved;
    return shard_map(
        [axis, causal, s, overlap](const DistArray<T>& qb, const DistArray<T>& kb, const DistArray<T>& vb,
                                   const DistArray<T>& ob, const DistArray<C>& lb, const DistArray<T>& gb) {
          return detail::ring_backward_block(qb, kb, vb, ob, lb, gb, axis, causal, s, overlap);
        },
        mesh, {spec, spec, spec, spec, rows, spec}, std::vector<PartitionSpec>{spec, spec, spec})(qm, km, vm, out, lse, g);
  };
  return custom_vjp("ring_attention", forward, backward)(q, k, v);
}

/// ring_attention's body for a caller already inside shard_map over a mesh with `axis`: q, k, v
/// this device's (batch, block, heads, head_dim) blocks of the sequence (in zigzag_order when
/// causal), the result this device's output block. For models whose tokens are laid out flat
/// (batch x sequence rows, as examples/transformer_lm's with --cp): they reshape their own rows
/// to blocks and back. The backward is the kept blocks': 2(c-1) blocks of k and v each way.
template <class T>
DistArray<T> ring_attention_shard(const DistArray<T>& q, const DistArray<T>& k, const DistArray<T>& v,
                                  const std::string& axis, bool causal = true, double scale = 0) {
  DAX_CHECK(q.ndim() == 4 && k.shape() == q.shape() && v.shape() == q.shape(),
            "ring_attention_shard: expected q, k, v blocks of one shape (batch, block, heads, head_dim), got ",
            to_string(q.shape()), ", ", to_string(k.shape()), ", ", to_string(v.shape()));
  DAX_CHECK(!causal || q.shape()[1] % 2 == 0, "ring_attention_shard: a causal block holds two zigzag chunks, so its ",
            "length must be even, got ", q.shape()[1]);
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(q.shape()[3]));
  return detail::ring_attention_kept(q, k, v, axis, causal, s);
}

/// ring_attention(q, k, v, axis, {causal, scale}).
template <class T>
DistArray<T> ring_attention(const DistArray<T>& q, const DistArray<T>& k, const DistArray<T>& v,
                            const std::string& axis, bool causal, double scale = 0) {
  return ring_attention(q, k, v, axis, RingAttention{.causal = causal, .scale = scale});
}

}  // namespace dax::parallel
