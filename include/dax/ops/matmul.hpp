// matmul for 1-d, 2-d and batched (..., M, K) @ (..., K, N) with broadcast batch dimensions, dot
// and outer. The rule picks the cheapest way to split the work (see matmul_rule.hpp); operands
// move to its layouts, each device multiplies its pieces, and the local products (partial sums
// when K is split) are brought to the result's sharding.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <dax/array/reshard.hpp>
#include <dax/array/trace.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/ops/elementwise.hpp>
#include <dax/ops/matmul_rule.hpp>
#include <dax/ops/rule_cache.hpp>
#include <dax/ops/shape.hpp>

namespace dax {
namespace detail {

inline RuleCache<MatmulRule>& matmul_rules() {
  static RuleCache<MatmulRule> cache;
  return cache;
}

/// While a gradient is being taken, the rule prices the product's backward too (MatmulGrad):
/// `grad` says which operands will get cotangents.
/// `sums`, `reduced_at`: see matmul_rule (a cotangent summed over that many backward passes before
/// its one reduction; a cotangent its consumer reduces at that layout).
template <class T>
const MatmulRule& matmul_rule_for(const DistArray<T>& a, const DistArray<T>& b,
                                  const std::optional<NamedSharding>& out, bool a_vector, bool b_vector,
                                  bool keep_unreduced = false, MatmulGrad grad = {}, int64_t sums = 1,
                                  const NamedSharding* reduced_at = nullptr) {
  const int64_t present = (out ? 1 : 0) + (grad.a_reduced_at ? 2 : 0) + (grad.b_reduced_at ? 4 : 0) + (reduced_at ? 8 : 0);
  RuleKey key{2000 + a_vector + 2 * b_vector, {a.shape(), b.shape()}, {a.sharding(), b.sharding()},
              {keep_unreduced, static_cast<int64_t>(sizeof(T)), grad.a + 2 * grad.b, grad.a_sums, grad.b_sums, sums,
               present}};
  for (const NamedSharding* s : {out ? &*out : nullptr, grad.a_reduced_at.get(), grad.b_reduced_at.get(), reduced_at})
    if (s) key.shardings.push_back(*s);
  return matmul_rules().get(std::move(key), [&] {
    return matmul_rule(a.shape(), a.sharding(), b.shape(), b.sharding(), out, a_vector, b_vector, keep_unreduced,
                       sizeof(T), grad, sums, reduced_at);
  });
}

/// The operands a gradient will flow back to from a product of a and b recorded now (and, for a
/// leaf, over how many backward passes its cotangent is summed).
template <class T>
MatmulGrad matmul_grad(const DistArray<T>& a, const DistArray<T>& b) {
  if (!tracing(a, b)) return {};
  return {needs_gradient(a), needs_gradient(b), leaf_sums_of(a), leaf_sums_of(b), cotangent_destination_of(a),
          cotangent_destination_of(b)};
}

/// `keep_unreduced`: the result is laid out by `out`'s dimensions but partial sums over the split
/// contraction stay unreduced (a cotangent, reduced once where its consumer needs it: DESIGN §6).
template <class T>
DistArray<T> matmul_nd(const DistArray<T>& a, const DistArray<T>& b, const std::optional<NamedSharding>& out,
                       bool a_vector, bool b_vector, bool keep_unreduced = false, int64_t sums = 1,
                       const NamedSharding* reduced_at = nullptr) {
  const ProfiledOp profiled("matmul", a, b);
  const MatmulRule& rule =
      matmul_rule_for(a, b, out, a_vector, b_vector, keep_unreduced, matmul_grad(a, b), sums, reduced_at);
  const MatmulCandidate& c = rule.best();
  const DistArray<T> am = operand_to(a, c.a, "matmul"), bm = operand_to(b, c.b, "matmul");
  Runtime& rt = Runtime::current();
  if (!am.is_addressable()) return DistArray<T>(rule.out_shape, rule.target, nullptr);
  const Shape local = box_shape(c.out.device_indices(rt.rank(), rule.out_shape));
  auto buffer = dev::allocate(numel(local) * sizeof(T));
  // A lazy transpose (x.T(), transpose of the last two dims) reaches BLAS as a flag, not a copy.
  dev::batched_gemm(static_cast<const T*>(am.stored_buffer()->data()), am.local_shape(),
                    static_cast<const T*>(bm.stored_buffer()->data()), bm.local_shape(),
                    static_cast<T*>(buffer->data()), local, am.stores_swapped(), bm.stores_swapped());
  return moved_to(DistArray<T>(rule.out_shape, c.out, std::move(buffer)), rule.target);
}

/// The cotangents of c = a @ b (operands of rank >= 2, batch dims broadcast): dA = g @ B^T and
/// dB = A^T @ g, the transposes as views (BLAS flags, no copies), each laid out like its operand
/// with the contraction's partial sums left unreduced, then summed over broadcast batch dims.
/// When both products want g moved to the same layout (g split where the forward's output was
/// asked to be, e.g. a row-parallel output under sequence parallelism), it is moved once.
/// `sums` (MatmulGrad as the forward saw it): a leaf operand's cotangent is summed over a_sums /
/// b_sums backward passes before its one reduction; a moved operand's is reduced at a_reduced_at /
/// b_reduced_at by its move's transpose.
/// `split`: a split backward (zero-bubble) asks for one side now and the other in a later call
/// with the same g; the moved g is kept there between the two calls, so it moves once then too.
template <class T>
Cotangents matmul_cotangents(const DistArray<T>& g, const DistArray<T>& a, const DistArray<T>& b, bool need_a,
                             bool need_b, MatmulGrad sums = {}, std::optional<DistArray<T>>* split = nullptr) {
  Cotangents out(2);
  const DistArray<T> bt = transpose_last_two(b), at = transpose_last_two(a);
  // A destination applies to a product of the operand's own shape (no broadcast batch to sum first).
  const NamedSharding* a_at = a.ndim() == g.ndim() ? sums.a_reduced_at.get() : nullptr;
  const NamedSharding* b_at = b.ndim() == g.ndim() ? sums.b_reduced_at.get() : nullptr;
  DistArray<T> gm = g;
  if (split && *split) {  // the first call's move
    gm = std::move(**split);
    split->reset();
  } else if ((need_a && need_b) || split) {
    const NamedSharding for_a =
        matmul_rule_for(g, bt, a.sharding(), false, false, true, matmul_grad(g, bt), sums.a_sums, a_at)
            .best()
            .a;
    const NamedSharding for_b =
        matmul_rule_for(at, g, b.sharding(), false, false, true, matmul_grad(at, g), sums.b_sums, b_at)
            .best()
            .b;
    if (for_a == for_b && !(for_a == g.sharding())) {
      gm = moved_to(g, for_a);
      if (split) *split = gm;
    }
  }
  if (need_a)
    out[0] = AnyArray(sum_to(matmul_nd(gm, bt, a.sharding(), false, false, true, sums.a_sums, a_at),
                             a.shape()));
  if (need_b)
    out[1] = AnyArray(sum_to(matmul_nd(at, gm, b.sharding(), false, false, true, sums.b_sums, b_at),
                             b.shape()));
  return out;
}

}  // namespace detail

/// a @ b. 1-d operands are vectors (a 1-d `a` is a row, a 1-d `b` a column, and that dimension is
/// dropped from the result); `out` fixes the result's sharding, else the rule picks it.
template <class T>
DistArray<T> matmul(const DistArray<T>& a, const DistArray<T>& b,
                    const std::optional<NamedSharding>& out = std::nullopt) {
  DAX_CHECK(a.ndim() >= 1 && b.ndim() >= 1, "matmul: operands must have rank >= 1, got ", to_string(a.shape()),
            " and ", to_string(b.shape()));
  const bool av = a.ndim() == 1, bv = b.ndim() == 1;
  const DistArray<T> a2 = av ? detail::insert_unit_dim(a, 0) : a;
  const DistArray<T> b2 = bv ? detail::insert_unit_dim(b, 1) : b;
  DistArray<T> r = [&] {
    if (!av && !bv) return detail::matmul_nd(a2, b2, out, false, false);
    // The result of the 2-d product, then the added dimensions dropped.
    DistArray<T> r = detail::matmul_nd(a2, b2, std::nullopt, av, bv);
    if (bv) r = detail::drop_unit_dim(r, r.ndim() - 1);
    if (av) r = detail::drop_unit_dim(r, r.ndim() - 2 + (bv ? 1 : 0));
    return out ? detail::moved_to(r, *out) : r;
  }();
  detail::record("matmul", r, [&](auto need) {
    const detail::MatmulGrad sums = detail::matmul_grad(a, b);  // leaves' sums, as the forward sees them
    // A split backward's moved cotangent, kept from its first half for the second.
    auto split = std::make_shared<std::optional<DistArray<T>>>();
    return [need, a2, b2, av, bv, sums, split](const DistArray<T>& g) {
      DistArray<T> g2 = g;  // the added unit dimensions back in place
      if (av) g2 = detail::insert_unit_dim(g2, g2.ndim() - (bv ? 0 : 1));
      if (bv) g2 = detail::insert_unit_dim(g2, g2.ndim());
      // A split backward may want one side only (the weight's GEMM waits for its own pass).
      const bool need_a = need[0] && detail::cotangent_wanted(0), need_b = need[1] && detail::cotangent_wanted(1);
      const bool halves = need[0] && need[1] && need_a != need_b;
      detail::Cotangents c = detail::matmul_cotangents(g2, a2, b2, need_a, need_b, sums, halves ? split.get() : nullptr);
      if (av && need_a) c[0] = detail::AnyArray(detail::drop_unit_dim(c[0].template as<T>(), 0));
      if (bv && need_b) {
        const auto& cb = c[1].template as<T>();
        c[1] = detail::AnyArray(detail::drop_unit_dim(cb, cb.ndim() - 1));
      }
      return c;
    };
  }, a, b);
  return r;
}

/// Inner product of two 1-d arrays (a scalar array), or matmul for higher ranks.
template <class T>
DistArray<T> dot(const DistArray<T>& a, const DistArray<T>& b) {
  return matmul(a, b);
}

/// Outer product of two 1-d arrays: (M,) x (N,) -> (M, N).
template <class T>
DistArray<T> outer(const DistArray<T>& a, const DistArray<T>& b) {
  DAX_CHECK(a.ndim() == 1 && b.ndim() == 1, "outer: operands must be 1-d, got ", to_string(a.shape()), " and ",
            to_string(b.shape()));
  return matmul(detail::insert_unit_dim(a, 1), detail::insert_unit_dim(b, 0));
}

/// The matmul rule's candidates, their bytes and the one chosen, as text.
template <class T>
std::string explain_matmul(const DistArray<T>& a, const DistArray<T>& b,
                           const std::optional<NamedSharding>& out = std::nullopt) {
  const bool av = a.ndim() == 1, bv = b.ndim() == 1;
  const DistArray<T> a2 = av ? detail::insert_unit_dim(a, 0) : a;
  const DistArray<T> b2 = bv ? detail::insert_unit_dim(b, 1) : b;
  return detail::explain_matmul_rule(detail::matmul_rule_for(a2, b2, av || bv ? std::nullopt : out, av, bv),
                                     a2.shape(), b2.shape(), sizeof(T));
}

}  // namespace dax
