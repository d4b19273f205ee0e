// The sharding rule of matmul (pure). For (..., M, K) @ (..., K, N), every mesh axis takes one
// role: split a batch dimension, split M, split N, split K (each device then holds a partial
// product: the result is unreduced over that axis), or replicate. Each combination is costed in
// estimated time (ops/cost.hpp): the bytes moved to bring A and B to the layouts it needs and its
// result to the requested sharding (all-reduce, reduce-scatter or nothing) over the link's
// bandwidth, plus the local product's FLOPs (2*M*N*K over the devices splitting batch, M, N or K:
// a replicating axis repeats the work) over the device's rate. The fastest wins; an exact tie goes
// to fewer collectives (one all-reduce of the result over an all-to-all, an all-gather of the
// weight and one of the result, the same bytes), then to the earlier combination in a fixed
// order. Printable with explain_matmul.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <dax/ops/broadcast.hpp>
#include <dax/ops/cost.hpp>
#include <dax/reshard/explain.hpp>
#include <dax/reshard/reduction_axes.hpp>
#include <dax/sharding/build.hpp>

namespace dax::detail {

/// Which operands a gradient will flow back to (the op records for autodiff): their cotangents'
/// products are priced with the forward's (matmul_rule).
struct MatmulGrad {
  bool a = false, b = false;
  // Where an operand is a leaf, the backward passes whose cotangents of it are summed before one
  // reduction (leaf_sum_count: a pipeline's microbatches): its product's share of that reduction.
  int64_t a_sums = 1, b_sums = 1;
  // Where an operand is a move's result (an FSDP weight gathered): where that move's transpose
  // reduces its cotangent (the stored layout), else null.
  std::shared_ptr<const NamedSharding> a_reduced_at{}, b_reduced_at{};
  bool any() const { return a || b; }
};

struct MatmulCandidate {
  std::vector<int> roles;  // per mesh axis: 0..nb-1 batch dim, nb: M, nb+1: N, nb+2: K, nb+3: replicate
  NamedSharding a, b, out;  // required operand shardings; the local products' sharding
  int64_t a_cost = 0, b_cost = 0, out_cost = 0;  // elements received per device (max over devices)
  double flops = 0;                              // of the largest local product
  double time = 0;                               // estimated seconds: what the rule minimizes
  double backward = 0;                           // of which the cotangents' products (MatmulGrad)
  int collectives = 0;                           // the moves' communicating steps (breaks ties)
  NamedSharding target;                          // where its result goes (the rule's target if chosen)
  int64_t total() const { return a_cost + b_cost + out_cost; }
};

struct MatmulRule {
  Shape out_shape;
  std::vector<MatmulCandidate> candidates;  // in enumeration order
  size_t chosen = 0;
  NamedSharding target;                     // the result's sharding
  CostModel model;                          // the constants it chose by
  int64_t item_bytes = 4;                   // the element size it costed bytes with
  const MatmulCandidate& best() const { return candidates[chosen]; }
};

/// Axes with a role, ordered as `current` lists them first (to keep the operand's layout), then
/// in mesh order.
inline std::vector<int> ordered(const std::vector<int>& current, const std::vector<int>& axes) {
  std::vector<int> out;
  for (int a : current)
    if (has_axis(axes, a)) out.push_back(a);
  for (int a : axes)
    if (!has_axis(out, a)) out.push_back(a);
  return out;
}

/// `a_vector` / `b_vector`: the operand was 1-d (its M or N dimension is an added 1 that must stay
/// unsplit). `keep_unreduced` (with a requested sharding): a candidate's partial sums over its K
/// axes may stay unreduced, its target being the requested spec plus those axes (K axes the
/// request splits a dimension with are still reduce-scattered there); autodiff's cotangents use it.
/// `item_bytes` sizes the elements moved (the model's bandwidth is in bytes). `grad`: while a
/// gradient is being taken, a candidate also pays for its backward (matmul_backward_cost).
/// `sums` (with keep_unreduced): the result is a leaf's cotangent that `sums` backward passes add
/// to, unreduced, before it is reduced once (a pipeline's microbatches): a candidate pays 1/sums of
/// that reduction, so a pipeline keeps partial sums where one product alone would gather instead.
/// `reduced_at` (with keep_unreduced): the result's consumer moves it on to this layout, reducing
/// the kept partial sums there (an FSDP weight's cotangent, reduce-scattered by its gather's
/// transpose to the stored layout): a candidate pays its move to its target and that one, where
/// otherwise it pays the request's whole reduction (an all-reduce).
inline MatmulRule matmul_rule(const Shape& a_shape, const NamedSharding& a, const Shape& b_shape,
                              const NamedSharding& b, const std::optional<NamedSharding>& requested, bool a_vector,
                              bool b_vector, bool keep_unreduced = false, int64_t item_bytes = 4,
                              MatmulGrad grad = {}, int64_t sums = 1, const NamedSharding* reduced_at = nullptr);

/// Shape and sharding with the last two dimensions swapped (a transpose's view, no move).
inline std::pair<Shape, NamedSharding> swap_last_two(const Shape& shape, const NamedSharding& s) {
  const size_t n = shape.size();
  Shape t = shape;
  std::swap(t[n - 1], t[n - 2]);
  std::vector<std::vector<int>> dims(n);
  for (size_t d = 0; d < n; ++d) dims[d] = s.dim_axes(d);
  std::swap(dims[n - 1], dims[n - 2]);
  return {t, make_sharding(s.mesh(), dims, s.unreduced_axes())};
}

/// What the backward of c = a @ b costs when its cotangent g arrives laid out as the forward's
/// result (`g`): the products the VJP runs (ops/matmul.hpp, matmul_cotangents), dA = g @ B^T laid
/// out like a and dB = A^T @ g like b, partial sums kept, each priced by its own rule. Choosing by
/// the forward alone picks layouts whose backward reshards every operand (issue 39: a
/// row-parallel product run as gathers, whose backward made four moves where Megatron's makes none).
struct BackwardCost {
  double time = 0;
  int collectives = 0;
};
inline BackwardCost matmul_backward_cost(const Shape& a_shape, const NamedSharding& a, const Shape& b_shape,
                                         const NamedSharding& b, const Shape& out_shape, const NamedSharding& g,
                                         MatmulGrad grad, int64_t item_bytes) {
  BackwardCost cost;
  auto add = [&](const MatmulRule& r) {
    cost.time += r.best().time;
    cost.collectives += r.best().collectives;
  };
  if (grad.a) {
    const auto [bt_shape, bt] = swap_last_two(b_shape, b);
    add(matmul_rule(out_shape, g, bt_shape, bt, a, false, false, true, item_bytes, {}, grad.a_sums,
                    a_shape.size() == out_shape.size() ? grad.a_reduced_at.get() : nullptr));
  }
  if (grad.b) {
    const auto [at_shape, at] = swap_last_two(a_shape, a);
    add(matmul_rule(at_shape, at, out_shape, g, b, false, false, true, item_bytes, {}, grad.b_sums,
                    b_shape.size() == out_shape.size() ? grad.b_reduced_at.get() : nullptr));
  }
  return cost;
}

inline MatmulRule matmul_rule(const Shape& a_shape, const NamedSharding& a, const Shape& b_shape,
                              const NamedSharding& b, const std::optional<NamedSharding>& requested, bool a_vector,
                              bool b_vector, bool keep_unreduced, int64_t item_bytes, MatmulGrad grad,
                              int64_t sums, const NamedSharding* reduced_at) {
  DAX_CHECK(a.mesh() == b.mesh(), "matmul: operands must be on the same mesh, got ", to_string(a.mesh()), " and ",
            to_string(b.mesh()));
  const size_t ra = a_shape.size(), rb = b_shape.size();
  DAX_CHECK(a_shape[ra - 1] == b_shape[rb - 2], "matmul: contraction dimensions differ: ", to_string(a_shape),
            " @ ", to_string(b_shape), " (", a_shape[ra - 1], " vs ", b_shape[rb - 2], ")");
  const Shape a_batch(a_shape.begin(), a_shape.end() - 2), b_batch(b_shape.begin(), b_shape.end() - 2);
  const Shape batch = broadcast_shapes({a_batch, b_batch});
  const size_t nb = batch.size();
  Shape out_shape = batch;
  out_shape.push_back(a_shape[ra - 2]);
  out_shape.push_back(b_shape[rb - 1]);
  const Mesh& mesh = a.mesh();
  const int M = static_cast<int>(nb), N = M + 1, K = M + 2, R = M + 3;

  std::vector<int> active;  // axes with more than one device; the others stay replicated
  for (int x = 0; x < mesh.num_axes(); ++x)
    if (mesh.axis_size(x) > 1) active.push_back(x);
  MatmulRule rule{out_shape, {}, 0, a, cost_model(), item_bytes};
  const int64_t m_size = a_shape[ra - 2], n_size = b_shape[rb - 1], k_size = a_shape[ra - 1];
  // Operand layouts repeat across candidates: each distinct move is planned once.
  std::vector<std::pair<NamedSharding, MoveCost>> a_moves, b_moves;
  auto move_cost = [](std::vector<std::pair<NamedSharding, MoveCost>>& seen, const Shape& shape,
                      const NamedSharding& from, const NamedSharding& to) {
    for (const auto& [s, c] : seen)
      if (s == to) return c;
    seen.emplace_back(to, reshard_move_cost(shape, from, to));
    return seen.back().second;
  };
  // The backward depends on a candidate only through where its result goes: priced once per target.
  // Batch dimensions that broadcast are summed after the products (sum_to), not priced here.
  const bool price_backward = grad.any() && !keep_unreduced && a_batch == batch && b_batch == batch;
  std::vector<std::pair<NamedSharding, BackwardCost>> backward_by_target;
  auto backward_cost = [&](const NamedSharding& target) {
    for (const auto& [t, c] : backward_by_target)
      if (t == target) return c;
    backward_by_target.emplace_back(target,
                                    matmul_backward_cost(a_shape, a, b_shape, b, out_shape, target, grad, item_bytes));
    return backward_by_target.back().second;
  };
  std::vector<int> roles(mesh.num_axes(), R);
  const std::vector<int> order = [&] {  // batch dims first, then M, N, K, replicate
    std::vector<int> o;
    for (int i = 0; i <= R; ++i) o.push_back(i);
    return o;
  }();
  std::vector<size_t> pick(active.size(), 0);
  while (true) {
    for (size_t i = 0; i < active.size(); ++i) roles[active[i]] = order[pick[i]];
    bool legal = true;
    for (size_t i = 0; i < active.size(); ++i) {
      const int role = roles[active[i]];
      if ((role == M && a_vector) || (role == N && b_vector)) legal = false;
    }
    if (legal) {
      auto with_role = [&](int role) {
        std::vector<int> axes;
        for (int x = 0; x < mesh.num_axes(); ++x)
          if (roles[x] == role) axes.push_back(x);
        return axes;
      };
      const auto k_axes = ordered(a.dim_axes(ra - 1), with_role(K));
      std::vector<std::vector<int>> ad(ra), bd(rb), od(out_shape.size());
      for (size_t d = 0; d < nb; ++d) {  // batch dims align from the right; stretched ones replicate
        const int64_t ai = int64_t(d) - int64_t(nb - a_batch.size());
        const int64_t bi = int64_t(d) - int64_t(nb - b_batch.size());
        const std::vector<int> current = ai >= 0 ? a.dim_axes(ai) : bi >= 0 ? b.dim_axes(bi) : std::vector<int>{};
        od[d] = ordered(current, with_role(static_cast<int>(d)));
        if (ai >= 0 && a_batch[ai] == batch[d]) ad[ai] = od[d];
        if (bi >= 0 && b_batch[bi] == batch[d]) bd[bi] = od[d];
      }
      od[nb] = ad[ra - 2] = ordered(a.dim_axes(ra - 2), with_role(M));
      od[nb + 1] = bd[rb - 1] = ordered(b.dim_axes(rb - 1), with_role(N));
      ad[ra - 1] = bd[rb - 2] = k_axes;
      std::vector<int> unreduced = k_axes;
      std::sort(unreduced.begin(), unreduced.end());
      MatmulCandidate c{roles, make_sharding(mesh, ad, {}), make_sharding(mesh, bd, {}),
                        make_sharding(mesh, od, unreduced), 0, 0, 0, 0, 0, 0, 0, a};
      const MoveCost a_move = move_cost(a_moves, a_shape, a, c.a), b_move = move_cost(b_moves, b_shape, b, c.b);
      c.a_cost = a_move.elements;
      c.b_cost = b_move.elements;
      c.target = requested ? *requested : make_sharding(mesh, od, {});
      if (requested && keep_unreduced) {  // partial sums stay, except over axes the request splits with
        std::vector<int> keep = requested->unreduced_axes();
        for (int x : unreduced)
          if (!requested->splits(x) && !has_axis(keep, x)) keep.push_back(x);
        std::sort(keep.begin(), keep.end());
        c.target = with_unreduced_axes(*requested, out_shape.size(), keep);
      }
      // Kept partial sums are still reduced later (by the consumer, or when the gradient reaches its
      // parameter): the choice counts that reduction, so a strategy that avoids it can win, while
      // the result itself moves only to c.target.
      MoveCost out_move;
      if (requested && keep_unreduced && reduced_at) {  // the result's move, then its consumer's
        out_move = reshard_move_cost(out_shape, c.out, c.target);
        const MoveCost later = reshard_move_cost(out_shape, c.target, *reduced_at);
        out_move.elements += later.elements;
        out_move.collectives += later.collectives;
      } else {
        out_move = reshard_move_cost(out_shape, c.out, requested && keep_unreduced ? *requested : c.target);
      }
      c.out_cost = out_move.elements;
      if (requested && keep_unreduced && !reduced_at && sums > 1 && !(c.target == *requested)) {
        // The later reduction (from the kept partial sums to the request) runs once for `sums`
        // such products: this one pays its share.
        const int64_t later = reshard_move_cost(out_shape, c.target, *requested).elements;
        c.out_cost = std::max<int64_t>(0, c.out_cost - later + (later + sums - 1) / sums);
      }
      c.collectives = a_move.collectives + b_move.collectives + out_move.collectives;
      // The largest local product: the work divides only over axes that split batch, M, N or K.
      double work = 2.0 * static_cast<double>(largest_chunk(m_size, c.out.num_pieces(nb))) *
                    static_cast<double>(largest_chunk(n_size, c.out.num_pieces(nb + 1))) *
                    static_cast<double>(largest_chunk(k_size, group_size(mesh, k_axes)));
      for (size_t d = 0; d < nb; ++d) work *= static_cast<double>(largest_chunk(batch[d], c.out.num_pieces(d)));
      c.flops = work;
      c.time = estimated_time(rule.model, c.total(), item_bytes, c.flops, c.collectives);
      if (price_backward) {
        const BackwardCost back = backward_cost(c.target);
        c.backward = back.time;
        c.time += back.time;
        c.collectives += back.collectives;
      }
      if (rule.candidates.empty() || c.time < rule.best().time ||
          (c.time == rule.best().time && c.collectives < rule.best().collectives)) {
        rule.chosen = rule.candidates.size();
        rule.target = c.target;
      }
      rule.candidates.push_back(std::move(c));
    }
    size_t i = active.size();
    while (i > 0 && ++pick[i - 1] == order.size()) pick[--i] = 0;
    if (i == 0) break;
  }
  return rule;
}

inline std::string role_name(int role, size_t nb) {
  const int M = static_cast<int>(nb);
  if (role < M) return "batch" + std::to_string(role);
  if (role == M) return "M";
  if (role == M + 1) return "N";
  if (role == M + 2) return "K";
  return "replicate";
}

/// The candidates with their estimated times and bytes, fastest first, the chosen one marked.
inline std::string explain_matmul_rule(const MatmulRule& rule, const Shape& a_shape, const Shape& b_shape,
                                       int64_t item_bytes) {
  const Mesh& mesh = rule.best().a.mesh();
  const size_t nb = rule.out_shape.size() - 2;
  std::vector<size_t> idx(rule.candidates.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t x, size_t y) {  // the rule's own order of preference
    const auto &cx = rule.candidates[x], &cy = rule.candidates[y];
    return cx.time < cy.time || (cx.time == cy.time && cx.collectives < cy.collectives);
  });
  std::ostringstream out;
  out << "matmul " << to_string(a_shape) << " @ " << to_string(b_shape) << " -> " << to_string(rule.out_shape)
      << " on " << to_string(mesh) << ", result " << to_string(rule.target.spec()) << "\n"
      << "  (time = bytes / " << rule.model.link_bytes_per_s / 1e9 << " GB/s + FLOPs / "
      << rule.model.flops_per_s / 1e9 << " GFLOP/s"
      << (rule.model.collective_s > 0 ? " + collectives x " : "");
  if (rule.model.collective_s > 0) out << rule.model.collective_s * 1e6 << " us";
  out << ", costed at " << rule.item_bytes << " bytes an element)\n";
  for (size_t i : idx) {
    const auto& c = rule.candidates[i];
    out << (i == rule.chosen ? "* " : "  ");
    for (int x = 0; x < mesh.num_axes(); ++x)
      if (mesh.axis_size(x) > 1) out << mesh.axis_names()[x] << "->" << role_name(c.roles[x], nb) << " ";
    out << "| A " << to_string(c.a.spec()) << " " << c.a_cost * item_bytes << " B, B " << to_string(c.b.spec())
        << " " << c.b_cost * item_bytes << " B, out " << c.out_cost * item_bytes << " B | total "
        << c.total() * item_bytes << " bytes/device in " << c.collectives << " collective"
        << (c.collectives == 1 ? "" : "s") << ", " << c.flops << " FLOPs | ~" << time_text(c.time);
    if (c.backward > 0) out << " (backward ~" << time_text(c.backward) << ")";
    out << "\n";
  }
  return out.str();
}

}  // namespace dax::detail
