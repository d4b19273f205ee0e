// Expert parallelism: a mixture-of-experts layer (GShard, Switch Transformer; the dropless
// dispatch of MegaBlocks and of Megatron-LM / torchtitan's token dispatchers).
//
// Each token's router picks its top-k of E experts; the experts are split over a mesh axis
// ('expert', ne devices, E / ne experts each), and the tokens over that axis too (and over any
// others that split the batch). Per device, in one shard_map:
//   1. route: logits = x @ router (an ordinary matmul before the shard_map, so the router's gradient
//      is reduced with the step's others), probs = softmax(logits); each token's top k experts (ties to the
//      lower index) are chosen on the host from this device's probabilities;
//   2. dispatch: the chosen (token, slot) rows are gathered in expert order and sent to the
//      experts' devices with one all_to_allv of uneven counts (each device first learns, in one
//      small all_gather, how many rows each other device sends to each of its experts);
//   3. compute: each local expert runs its two-matrix MLP on its rows (no padding);
//   4. combine: the rows go home with the reverse all_to_allv and each token's output is the sum
//      of its k rows weighted by their router probabilities (the gates).
// Dropless by default; with a capacity factor cf each device sends each expert at most
// ceil(cf * tokens * k / E) rows, first choices before second ones, earlier tokens first, and a
// dropped (token, slot) adds nothing (the caller's residual carries the token).
// The load-balancing loss is Switch's, for top-k as in Megatron and Mixtral:
//   aux = E * sum_e f_e * P_e, with f_e the fraction of the batch's routed (token, slot) pairs that
//   chose expert e (before any drop; no gradient) and P_e the batch's mean router probability of e.
// Bytes: each row that leaves its device travels there and back (d elements each way); the
// backward moves the same again. The gradients are the ops' own (take's scatter-add, slice,
// concatenate, all_to_allv's transpose), so the router gets its gradient through the gates and the
// aux loss, as in the papers.
#pragma once

#include <dax/core/compiled_mode.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include <dax/array/reshard.hpp>
#include <dax/autodiff/tree.hpp>
#include <dax/core/error.hpp>
#include <dax/manual/collectives.hpp>
#include <dax/manual/shard_map.hpp>
#include <dax/ops/elementwise.hpp>
#include <dax/ops/join.hpp>
#include <dax/ops/matmul.hpp>
#include <dax/ops/reduction.hpp>
#include <dax/ops/reshape.hpp>
#include <dax/ops/take.hpp>

namespace dax::parallel {

/// The weights of a mixture-of-experts layer of E experts, model width d and expert width f:
/// router (d, E), usually replicated; w_in (E, d, f) and w_out (E, f, d), split over the expert
/// axis on their first dimension (moe moves them there if they are not). A tree.
template <class T>
struct MoeParams {
  DistArray<T> router;
  DistArray<T> w_in;
  DistArray<T> w_out;
};

template <class T>
auto dax_tree_fields(const MoeParams<T>*) {
  return std::make_tuple(tree_field("router", &MoeParams<T>::router), tree_field("w_in", &MoeParams<T>::w_in),
                         tree_field("w_out", &MoeParams<T>::w_out));
}

enum class MoeActivation { gelu, relu, silu };

struct MoeOptions {
  int top_k = 2;
  double capacity_factor = 0;  // <= 0: dropless; else each device sends each expert at most
                               // ceil(capacity_factor * its tokens * top_k / E) rows
  bool normalize_gates = false;  // the k gates of a token divided by their sum (Mixtral), or the
                                 // router's probabilities as they are (Switch, GShard, DeepSeek)
  MoeActivation activation = MoeActivation::gelu;  // gelu: the tanh approximation
};

/// What the router did, as this rank saw it.
struct MoeRouting {
  std::vector<int64_t> tokens_per_expert;  // (token, slot) pairs that chose each expert, over the
                                           // whole batch, before any drop (equal on every rank)
  int64_t dropped = 0;        // pairs over capacity, over the whole batch
  int64_t rows_sent = 0;      // rows this device sent to other devices in the dispatch (they come
                              // back in the combine)
  int64_t rows_received = 0;  // rows other devices sent this one's experts (they go back)
};

template <class T>
struct MoeResult {
  DistArray<T> y;         // (tokens, d), split like the tokens
  DistArray<T> aux_loss;  // the load-balancing loss, a replicated scalar
  MoeRouting routing;
};

namespace detail {

struct MoeSetup {
  std::string axis;                      // the experts' axis
  std::vector<std::string> token_axes;   // the axes splitting the tokens (the experts' among them)
  MoeOptions options;
};

template <class T>
DistArray<T> moe_activation(const DistArray<T>& h, MoeActivation a) {
  switch (a) {
    case MoeActivation::relu: return relu(h);
    case MoeActivation::silu: return silu(h);
    case MoeActivation::gelu: break;
  }
  return gelu(h);
}

/// Each token's top k experts by probability (ties to the lower index): entry t * k + j.
inline std::vector<int64_t> top_k_experts(const std::vector<double>& probs, int64_t tokens, int64_t experts, int k) {
  std::vector<int64_t> choice(static_cast<size_t>(tokens * k));
  std::vector<int64_t> idx(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(idx.begin(), idx.end(), int64_t(0));
    const double* p = probs.data() + t * experts;
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [p](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    std::copy(idx.begin(), idx.begin() + k, choice.begin() + t * k);
  }
  return choice;
}

/// The pairs kept under capacity (1) or dropped (0): first choices before second ones, earlier
/// tokens first, at most `capacity` per expert; all kept when capacity < 0.
inline std::vector<char> kept_pairs(const std::vector<int64_t>& choice, int64_t tokens, int64_t experts, int k,
                                    int64_t capacity) {
  std::vector<char> kept(choice.size(), 1);
  if (capacity < 0) return kept;
  std::vector<int64_t> filled(static_cast<size_t>(experts), 0);
  for (int j = 0; j < k; ++j)
    for (int64_t t = 0; t < tokens; ++t) {
      const size_t a = static_cast<size_t>(t * k + j);
      if (filled[static_cast<size_t>(choice[a])] < capacity) ++filled[static_cast<size_t>(choice[a])];
      else kept[a] = 0;
    }
  return kept;
}

template <class T>
std::tuple<DistArray<T>, DistArray<T>> moe_block(const DistArray<T>& x, const DistArray<T>& logits,
                                                 const DistArray<T>& w_in, const DistArray<T>& w_out,
                                                 const MoeSetup& s, MoeRouting* routing) {
  const int64_t n = x.shape()[0], d = x.shape()[1], E = logits.shape()[1];
  const int64_t local_experts = w_in.shape()[0], f = w_in.shape()[2];
  const int k = s.options.top_k;
  const int ne = axis_size(s.axis), me = axis_index(s.axis);
  const AxisNames token_axes(s.token_axes);
  const NamedSharding here = local_sharding();
  auto ids = [&](const std::vector<int64_t>& v) { return device_put(v, Shape{int64_t(v.size())}, here); };

  // 1. Route.
  const DistArray<T> probs = softmax(logits, -1);  // (n, E)
  std::vector<double> p_host;
  {
    const std::vector<T> h = probs.local_to_host();
    p_host.assign(h.begin(), h.end());
  }
  // Simulated devices (the meta backend) have no router values: their tokens go round-robin over
  // the experts, the balanced routing the load-balancing loss aims for, the same on every member.
  const bool simulated = ::dax::detail::dev::on_meta();
  std::vector<int64_t> choice;
  if (simulated)
    for (int64_t a = 0; a < n * k; ++a) choice.push_back(a % E);
  else choice = top_k_experts(p_host, n, E, k);
  const int64_t capacity = s.options.capacity_factor > 0
                               ? static_cast<int64_t>(std::ceil(s.options.capacity_factor * double(n * k) / double(E)))
                               : -1;
  const std::vector<char> kept = kept_pairs(choice, n, E, k, capacity);

  // The kept pairs in expert order (then pair order): where each goes, and how many per expert.
  std::vector<int64_t> routed(static_cast<size_t>(E), 0), per_expert(static_cast<size_t>(E), 0);
  for (size_t a = 0; a < choice.size(); ++a) {
    ++routed[static_cast<size_t>(choice[a])];
    if (kept[a]) ++per_expert[static_cast<size_t>(choice[a])];
  }
  std::vector<int64_t> start(static_cast<size_t>(E) + 1, 0);
  for (int64_t e = 0; e < E; ++e) start[size_t(e) + 1] = start[size_t(e)] + per_expert[size_t(e)];
  const int64_t sent_rows = start[size_t(E)];
  std::vector<int64_t> token_of(static_cast<size_t>(sent_rows));  // the token of each row sent, in expert order
  std::vector<int64_t> place_of(choice.size(), sent_rows);  // a pair's row among them; dropped: the zero row
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (size_t a = 0; a < choice.size(); ++a) {
      if (!kept[a]) continue;
      const int64_t r = next[static_cast<size_t>(choice[a])]++;
      token_of[size_t(r)] = int64_t(a) / k, place_of[a] = r;
    }
  }

  // How many rows every member sends each expert: one small all_gather of the counts.
  std::vector<int64_t> all_counts =
      all_gather(device_put(per_expert, Shape{1, E}, here), s.axis, 0, true).local_to_host();  // (ne, E)
  if (simulated)  // every member routes as this one
    for (int j = 0; j < ne; ++j) std::copy(per_expert.begin(), per_expert.end(), all_counts.begin() + j * E);
  std::vector<int64_t> send_counts(static_cast<size_t>(ne), 0), recv_counts(static_cast<size_t>(ne), 0);
  for (int j = 0; j < ne; ++j)
    for (int64_t le = 0; le < local_experts; ++le) {
      send_counts[size_t(j)] += per_expert[size_t(j * local_experts + le)];
      recv_counts[size_t(j)] += all_counts[size_t(j * E + me * local_experts + le)];
    }

  // 2. Dispatch. Rows arrive source-major (then by expert); the experts want them expert-major,
  // each expert's rows followed by one zero row (below).
  const DistArray<T> arrived = all_to_allv(take(x, ids(token_of), 0), s.axis, send_counts, recv_counts);
  const int64_t arrived_rows = arrived.shape()[0];
  std::vector<int64_t> grouped_ids, ungroup(static_cast<size_t>(arrived_rows)), rows_of(size_t(local_experts), 0);
  {
    std::vector<int64_t> src_start(static_cast<size_t>(ne) + 1, 0);
    for (int j = 0; j < ne; ++j) src_start[size_t(j) + 1] = src_start[size_t(j)] + recv_counts[size_t(j)];
    for (int64_t le = 0; le < local_experts; ++le) {
      for (int j = 0; j < ne; ++j) {
        int64_t off = src_start[size_t(j)];
        for (int64_t e = 0; e < le; ++e) off += all_counts[size_t(j * E + me * local_experts + e)];
        const int64_t count = all_counts[size_t(j * E + me * local_experts + le)];
        for (int64_t r = 0; r < count; ++r) {
          ungroup[size_t(off + r)] = int64_t(grouped_ids.size());
          grouped_ids.push_back(off + r);
        }
        rows_of[size_t(le)] += count;
      }
      grouped_ids.push_back(arrived_rows + le);  // the expert's zero row
      ++rows_of[size_t(le)];
    }
  }

  // 3. The local experts, each on its own rows. Each also gets one zero row, so that every device
  // runs the same ops whatever its counts: an expert with no rows here still takes part in the
  // backward's reductions of its weights' gradients over the axes the rows vary on (the tokens'
  // other axes), and no array is empty. The zero rows' outputs are dropped.
  const DistArray<T> grouped =
      take(concatenate(std::vector<DistArray<T>>{arrived, zeros<T>({local_experts, d}, here)}, 0), ids(grouped_ids), 0);
  std::vector<DistArray<T>> outs;
  for (int64_t le = 0, off = 0; le < local_experts; off += rows_of[size_t(le)], ++le) {
    const DistArray<T> rows = slice(grouped, {off, 0}, {off + rows_of[size_t(le)], d});
    const DistArray<T> w1 = reshape(slice(w_in, {le, 0, 0}, {le + 1, d, f}), {d, f});
    const DistArray<T> w2 = reshape(slice(w_out, {le, 0, 0}, {le + 1, f, d}), {f, d});
    outs.push_back(matmul(moe_activation(matmul(rows, w1), s.options.activation), w2));
  }
  const DistArray<T> computed = take(outs.size() == 1 ? outs[0] : concatenate(outs, 0), ids(ungroup), 0);

  // 4. Combine: the rows go home in the order they were sent; each pair picks its row (a dropped one the zero row).
  const DistArray<T> home = all_to_allv(computed, s.axis, recv_counts, send_counts);
  const DistArray<T> padded = concatenate(std::vector<DistArray<T>>{home, zeros<T>({1, d}, here)}, 0);
  const DistArray<T> pair_rows = reshape(take(padded, ids(place_of), 0), {n, int64_t(k), d});
  std::vector<int64_t> gate_ids(choice.size());
  for (size_t a = 0; a < choice.size(); ++a) gate_ids[a] = int64_t(a) / k * E + choice[a];
  DistArray<T> gates = reshape(take(reshape(probs, {n * E}), ids(gate_ids), 0), {n, int64_t(k), 1});
  if (s.options.normalize_gates) gates = gates / sum(gates, {1}, true);
  const DistArray<T> y = sum(pair_rows * gates, {1});

  // The load-balancing loss over the whole batch: one small psum of the counts (and the drops).
  int64_t dropped = 0;
  for (char kp : kept) dropped += kp ? 0 : 1;
  std::vector<int64_t> counts = routed;
  counts.push_back(dropped);
  std::vector<int64_t> routed_all = psum(device_put(counts, Shape{E + 1}, here), token_axes).local_to_host();
  const int64_t dropped_all = routed_all.back();
  routed_all.pop_back();
  const int64_t total_pairs = n * k * axis_size(token_axes);
  std::vector<T> fraction(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) fraction[size_t(e)] = T(double(routed_all[size_t(e)]) / double(total_pairs));
  const DistArray<T> mean_prob = psum(sum(probs, {0}), token_axes) * T(1.0 / double(n * axis_size(token_axes)));
  const DistArray<T> aux = sum(mean_prob * device_put(fraction, Shape{E}, here)) * T(double(E));

  if (routing) {
    routing->tokens_per_expert = routed_all;
    routing->dropped = dropped_all;
    routing->rows_sent = sent_rows - send_counts[size_t(me)];
    routing->rows_received = arrived.shape()[0] - recv_counts[size_t(me)];
  }
  return {y, aux};
}

}  // namespace detail

/// A mixture-of-experts layer on tokens x (tokens, d) with experts split over mesh axis `axis`
/// (see the top of this file). The tokens are split over `axis` (added to x's first dimension's
/// split if it is not there, after the axes already splitting it); the result is laid out so.
/// E must divide evenly over the axis, and the tokens over the axes that split them.
template <class T>
MoeResult<T> moe(const DistArray<T>& x, const MoeParams<T>& p, const std::string& axis, const MoeOptions& options = {}) {
  DAX_CHECK(x.ndim() == 2, "moe: expected tokens x of shape (tokens, d), got ", to_string(x.shape()));
  const int64_t d = x.shape()[1];
  DAX_CHECK(p.router.ndim() == 2 && p.router.shape()[0] == d, "moe: expected the router of shape (", d,
            ", experts), got ", to_string(p.router.shape()));
  const int64_t E = p.router.shape()[1];
  DAX_CHECK(p.w_in.ndim() == 3 && p.w_in.shape()[0] == E && p.w_in.shape()[1] == d,
            "moe: expected w_in of shape (", E, ", ", d, ", f), got ", to_string(p.w_in.shape()));
  const int64_t f = p.w_in.shape()[2];
  DAX_CHECK(p.w_out.shape() == Shape({E, f, d}), "moe: expected w_out of shape (", E, ", ", f, ", ", d, "), got ",
            to_string(p.w_out.shape()));
  DAX_CHECK(options.top_k >= 1 && options.top_k <= E, "moe: expected top_k in [1, ", E, "], got ", options.top_k);
  const Mesh& mesh = x.sharding().mesh();
  const int a = mesh.find_axis(axis);
  DAX_CHECK(a >= 0, "moe: expected the experts' axis to be one of ", to_string(mesh), ", got '", axis, "'");
  const int64_t ne = mesh.axis_size(a);
  DAX_CHECK(E % ne == 0, "moe: expected the ", E, " experts to divide evenly over the ", ne, " devices of '", axis,
            "'");
  const PartitionSpec& xs = x.sharding().spec();
  std::vector<std::string> token_axes = xs.size() > 0 ? xs[0].axes() : std::vector<std::string>{};
  if (std::find(token_axes.begin(), token_axes.end(), axis) == token_axes.end()) token_axes.push_back(axis);
  int64_t groups = 1;
  for (const std::string& name : token_axes) groups *= mesh.axis_size(mesh.find_axis(name));
  DAX_CHECK(x.shape()[0] % groups == 0, "moe: expected the ", x.shape()[0], " tokens to divide evenly over the ",
            groups, " devices of ", to_string(PartitionSpec::Entry(axes(token_axes))), ", got a remainder of ",
            x.shape()[0] % groups);
  detail::MoeSetup setup{axis, token_axes, options};
  const PartitionSpec tokens(PartitionSpec::Entry(axes(token_axes)), none);
  const PartitionSpec experts(axis, none, none);
  MoeRouting routing;
  MoeRouting* seen = &routing;
  // The router's matmul is an ordinary op outside the shard_map: its weight's gradient stays a
  // partial sum over the tokens' axes until the step's one reduction (inside, the replicated
  // router would be summed at every call: once per microbatch in a pipeline).
  const DistArray<T> xt = reshard(x, NamedSharding(mesh, tokens));
  const DistArray<T> logits = matmul(xt, p.router, NamedSharding(mesh, tokens));
  auto [y, aux] = shard_map(
      [setup, seen](const DistArray<T>& xb, const DistArray<T>& lb, const DistArray<T>& ib, const DistArray<T>& ob) {
        return detail::moe_block(xb, lb, ib, ob, setup, seen);
      },
      mesh, {tokens, tokens, experts, experts}, std::vector<PartitionSpec>{tokens, P()})(xt, logits, p.w_in, p.w_out);
  return MoeResult<T>{std::move(y), std::move(aux), std::move(routing)};
}

}  // namespace dax::parallel
