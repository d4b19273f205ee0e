// Compound assignment (a += b, a -= b, a *= b, a /= b) keeps the left operand's shape and
// sharding: b is resharded to a's layout (reduced first if it is a partial sum), the op runs on
// each device's piece, and a is never re-laid out. `a = a - b` may instead follow b's layout when
// that moves fewer bytes; a parameter updated in place must not (DESIGN §6).
#pragma once

#include <dax/array/reshard.hpp>
#include <dax/ops/elementwise.hpp>
#include <dax/sharding/build.hpp>

namespace dax {
namespace detail {

/// The sharding b (broadcast to a's shape) takes so that `a op= b` runs on a's pieces: each
/// dimension of b split like the dimension of a it lines up with (replicated where b stretches),
/// unreduced over a's unreduced axes when the op is a sum (a partial sum plus a partial sum).
template <class T>
NamedSharding compound_operand_sharding(const char* op, const DistArray<T>& a, const Shape& b_shape,
                                        const NamedSharding& b_sharding, bool additive) {
  DAX_CHECK(a.sharding().mesh() == b_sharding.mesh(), "operator", op, ": the operands must be on the same mesh, got ",
            to_string(a.sharding().mesh()), " and ", to_string(b_sharding.mesh()));
  const Shape& as = a.shape();
  bool fits = b_shape.size() <= as.size();
  const size_t off = fits ? as.size() - b_shape.size() : 0;
  for (size_t d = 0; fits && d < b_shape.size(); ++d) fits = b_shape[d] == as[off + d] || b_shape[d] == 1;
  DAX_CHECK(fits, "operator", op, ": the right operand's shape ", to_string(b_shape),
            " must broadcast to the left operand's shape ", to_string(as),
            " (compound assignment keeps the left operand's shape and sharding)");
  std::vector<std::vector<int>> dims(b_shape.size());
  for (size_t d = 0; d < b_shape.size(); ++d)
    if (b_shape[d] == as[off + d]) dims[d] = a.sharding().dim_axes(off + d);
  return make_sharding(a.sharding().mesh(), dims, additive ? a.sharding().unreduced_axes() : std::vector<int>{});
}

/// a = op(a, b moved to a's layout), then (only when the op cannot keep a partial sum, as integer
/// division) back to a's sharding.
template <class T, class Op>
DistArray<T>& assign_in_layout(DistArray<T>& a, const DistArray<T>& b, const char* name, bool additive, Op op) {
  const NamedSharding target = compound_operand_sharding(name, a, b.shape(), b.sharding(), additive);
  // reshard (not moved_to): under autodiff the moves are part of the recorded computation.
  check_operand_layout(b, target, name);
  const DistArray<T> result = op(a, b.sharding() == target ? b : reshard(b, target));
  a = result.sharding() == a.sharding() ? result : reshard(result, a.sharding());
  return a;
}

/// x under sharding s, moved by a recorded reshard if it must move.
template <class T>
DistArray<T> keep_layout(const DistArray<T>& x, const NamedSharding& s) {
  return x.sharding() == s ? x : reshard(x, s);
}

}  // namespace detail

template <class T>
DistArray<T>& operator+=(DistArray<T>& a, const DistArray<T>& b) {
  return detail::assign_in_layout(a, b, "+=", true, [](const auto& x, const auto& y) { return x + y; });
}
template <class T>
DistArray<T>& operator-=(DistArray<T>& a, const DistArray<T>& b) {
  return detail::assign_in_layout(a, b, "-=", true, [](const auto& x, const auto& y) { return x - y; });
}
template <class T>
DistArray<T>& operator*=(DistArray<T>& a, const DistArray<T>& b) {
  return detail::assign_in_layout(a, b, "*=", false, [](const auto& x, const auto& y) { return x * y; });
}
template <class T>
DistArray<T>& operator/=(DistArray<T>& a, const DistArray<T>& b) {
  return detail::assign_in_layout(a, b, "/=", false, [](const auto& x, const auto& y) { return x / y; });
}

// With a scalar the op already runs on a's pieces; only a partial sum plus a scalar (reduced
// first by the op) goes back to a's sharding.
template <class T, class S> requires Scalar<T, S>
DistArray<T>& operator+=(DistArray<T>& a, S s) { return a = detail::keep_layout(a + s, a.sharding()); }
template <class T, class S> requires Scalar<T, S>
DistArray<T>& operator-=(DistArray<T>& a, S s) { return a = detail::keep_layout(a - s, a.sharding()); }
template <class T, class S> requires Scalar<T, S>
DistArray<T>& operator*=(DistArray<T>& a, S s) { return a = detail::keep_layout(a * s, a.sharding()); }
template <class T, class S> requires Scalar<T, S>
DistArray<T>& operator/=(DistArray<T>& a, S s) { return a = detail::keep_layout(a / s, a.sharding()); }

}  // namespace dax
