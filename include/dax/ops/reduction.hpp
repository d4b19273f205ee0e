// Reductions over any set of dimensions (keepdims optional): sum, mean, max, min, prod. Each
// device folds its piece; partial results are combined as the reduction rule says. mean divides
// the sum by the global count, so it is exact on uneven pieces.
#pragma once

#include <limits>
#include <optional>

#include <dax/array/reshard.hpp>
#include <dax/array/profile_hook.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/ops/reduction_rule.hpp>
#include <dax/ops/rule_cache.hpp>
#include <dax/ops/elementwise.hpp>
#include <dax/ops/shape.hpp>

namespace dax {
namespace detail {

inline RuleCache<ReductionRule>& reduction_rules() {
  static RuleCache<ReductionRule> cache;
  return cache;
}

/// The identity of max (lowest) or min (highest): infinities for floating types.
template <class T>
T lowest_value() {
  if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::lowest();
}
template <class T>
T highest_value() {
  if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::max();
}

/// Throws (on every rank alike: shapes are metadata) when a reduction without an identity would
/// fold nothing.
inline void check_not_empty(const Shape& shape, const std::vector<bool>& flags, const char* name) {
  for (size_t d = 0; d < shape.size(); ++d)
    DAX_CHECK(!flags[d] || shape[d] > 0, name, ": zero-size dimension ", d, " of ", to_string(shape),
              " has no ", name, " (the reduction has no identity)");
}

template <class T, class Op>
DistArray<T> reduce(const DistArray<T>& x, const std::vector<int>& dims, bool keepdims, ReduceOp kind, T identity,
                    Op op, const char* name) {
  static_assert(!std::is_same_v<T, bool>, "dax: reduce a DistArray<bool> after astype to an integer type");
  const ProfiledOp profiled(name, x);
  const bool linear = kind == ReduceOp::sum;
  const std::vector<bool> flags = reduced_dims(x.shape(), dims, name);
  if (kind == ReduceOp::max || kind == ReduceOp::min) check_not_empty(x.shape(), flags, name);
  std::vector<int64_t> params{static_cast<int64_t>(kind), keepdims};
  for (bool f : flags) params.push_back(f);
  const ReductionRule& rule = reduction_rules().get(
      RuleKey{1000, {x.shape()}, {x.sharding()}, params},
      [&] { return reduction_rule(x.shape(), x.sharding(), flags, keepdims, linear); });
  const DistArray<T> in = operand_to(x, rule.input, name);
  Runtime& rt = Runtime::current();
  if (!in.is_addressable()) return DistArray<T>(rule.out_shape, rule.partial, nullptr);
  const Shape local = box_shape(rule.partial.device_indices(rt.rank(), rule.out_shape));
  const int64_t count = numel(local);
  auto buffer = dev::allocate(count * sizeof(T));
  T* out = static_cast<T*>(buffer->data());
  using Acc = compute_t<T>;
  if constexpr (std::is_same_v<Acc, T>) {
    dev::fill(out, count, identity);
    dev::reduce_dims(in.local_data().data(), in.local_shape(), rule.reduced, out, op);
  } else {  // 16-bit elements fold in float; the result is rounded once
    const auto folded = dev::allocate(count * sizeof(Acc));
    Acc* acc = static_cast<Acc*>(folded->data());
    dev::fill(acc, count, static_cast<Acc>(identity));
    dev::reduce_dims(in.local_data().data(), in.local_shape(), rule.reduced, acc, op);
    dev::broadcast_map(out, local, {row_major_strides(local)}, fn::Cast<T>{}, static_cast<const Acc*>(acc));
  }
  if (!linear && !rule.axes.empty()) {
    const OpLabel label([&] { return cat(name, " of ", to_string(x.shape()), " ", to_string(x.sharding().spec())); });
    auto& comm = rt.group(rule.partial.mesh(), rule.axes);
    const int64_t started = collective_start();
    comm.all_reduce(nullptr, out, count, dtype_v<T>, kind);
    count_collective("all_reduce", axes_text(rule.partial.mesh(), rule.axes),
                     all_reduce_received(count, comm.size()) * int64_t(sizeof(T)), started, comm.size());
  }
  return DistArray<T>(rule.out_shape, rule.partial, std::move(buffer));
}

template <class T>
DistArray<T> sum_to(const DistArray<T>& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const size_t lead = g.shape().size() - shape.size();
  std::vector<int> dims;
  for (size_t d = 0; d < g.shape().size(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) dims.push_back(static_cast<int>(d));
  DistArray<T> r = reduce(g, dims, true, ReduceOp::sum, T(0), fn::Add{}, "sum");  // partial sums stay
  for (size_t d = 0; d < lead; ++d) r = drop_unit_dim(r, 0);
  return r;
}

/// The cotangent of a reduction's result stretched back over the reduced dimensions of an input
/// `x` (its shape and sharding): `g` has the reduced dimensions (keepdims) or not.
template <class T>
DistArray<T> unreduce(const DistArray<T>& g, const DistArray<T>& x, const std::vector<bool>& flags, bool keepdims) {
  DistArray<T> k = g;
  if (!keepdims)
    for (size_t d = 0; d < flags.size(); ++d)
      if (flags[d]) k = insert_unit_dim(k, d);
  return broadcast_in(k, x.shape(), x.sharding());
}

/// The reduced version of a partial result: `out` if given, else the same layout without
/// unreduced axes.
template <class T>
DistArray<T> finish(const DistArray<T>& partial, const std::optional<NamedSharding>& out) {
  return reshard(partial, out ? *out : with_unreduced_axes(partial.sharding(), partial.ndim(), {}));
}

/// max / min: the cotangent goes to the elements equal to the result, split evenly among ties.
template <class T>
void record_chooser(const char* name, DistArray<T>& out, const DistArray<T>& x, const std::vector<int>& dims,
                    bool keepdims) {
  record(name, out, [&](auto) {
    return [x, dims, keepdims, out](const DistArray<T>& g) {
      const auto flags = reduced_dims(x.shape(), dims, "max");
      const DistArray<T> at = astype<T>(equal(x, unreduce(out, x, flags, keepdims)));
      const DistArray<T> count = reduce(at, dims, true, ReduceOp::sum, T(0), fn::Add{}, "sum");
      return Cotangents{AnyArray(unreduce(g, x, flags, keepdims) * at / finish(count, std::nullopt))};
    };
  }, x);
}

}  // namespace detail

/// Sum over `dims` (all when empty). `out` picks the result's sharding: by default reduced and laid
/// out like the input; a sharding that splits a dimension over the reduced axes makes it a
/// reduce-scatter; one that keeps them unreduced communicates nothing.
template <class T>
DistArray<T> sum(const DistArray<T>& x, const std::vector<int>& dims = {}, bool keepdims = false,
                 const std::optional<NamedSharding>& out = std::nullopt) {
  auto r = detail::finish(detail::reduce(x, dims, keepdims, detail::ReduceOp::sum, T(0), detail::fn::Add{}, "sum"),
                          out);
  // The cotangent is stretched back with no communication (DESIGN §6).
  detail::record("sum", r, [&](auto) {
    return [x, dims, keepdims](const DistArray<T>& g) {
      return detail::Cotangents{
          detail::AnyArray(detail::unreduce(g, x, detail::reduced_dims(x.shape(), dims, "sum"), keepdims))};
    };
  }, x);
  return r;
}

/// The average over `dims`. 16-bit arrays are averaged in float and rounded once (as jnp.mean),
/// since their sum may not fit: half's largest value is 65504.
template <class T>
DistArray<T> mean(const DistArray<T>& x, const std::vector<int>& dims = {}, bool keepdims = false,
                  const std::optional<NamedSharding>& out = std::nullopt) {
  if constexpr (detail::is_float16_v<T>) {
    return astype<T>(mean(astype<float>(x), dims, keepdims, out));
  } else {
    const auto flags = detail::reduced_dims(x.shape(), dims, "mean");
    int64_t count = 1;
    for (size_t d = 0; d < flags.size(); ++d)
      if (flags[d]) count *= x.shape()[d];
    if constexpr (!detail::is_floating_v<T>) detail::check_not_empty(x.shape(), flags, "mean");
    return sum(x, dims, keepdims, out) / T(count);
  }
}

template <class T>
DistArray<T> max(const DistArray<T>& x, const std::vector<int>& dims = {}, bool keepdims = false) {
  auto r = detail::reduce(x, dims, keepdims, detail::ReduceOp::max, detail::lowest_value<T>(),
                          detail::fn::Maximum{}, "max");
  detail::record_chooser("max", r, x, dims, keepdims);
  return r;
}

template <class T>
DistArray<T> min(const DistArray<T>& x, const std::vector<int>& dims = {}, bool keepdims = false) {
  auto r = detail::reduce(x, dims, keepdims, detail::ReduceOp::min, detail::highest_value<T>(),
                          detail::fn::Minimum{}, "min");
  detail::record_chooser("min", r, x, dims, keepdims);
  return r;
}

template <class T>
DistArray<T> prod(const DistArray<T>& x, const std::vector<int>& dims = {}, bool keepdims = false) {
  detail::no_gradient("prod", x);
  return detail::reduce(x, dims, keepdims, detail::ReduceOp::prod, T(1), detail::fn::Multiply{},
                        "prod");
}

}  // namespace dax

namespace dax {

/// log(sum(exp(x))) over `dims`, computed stably (the max is taken out first).
template <class T>
DistArray<T> logsumexp(const DistArray<T>& x, const std::vector<int>& dims = {}, bool keepdims = false) {
  const DistArray<T> m = stop_gradient(max(x, dims, true));  // its gradient terms cancel exactly
  DistArray<T> r = m + log(sum(exp(x - m), dims, true));
  if (keepdims) return r;
  std::vector<int> drop;
  const auto flags = detail::reduced_dims(x.shape(), dims, "logsumexp");
  for (size_t d = 0; d < flags.size(); ++d)
    if (flags[d]) drop.push_back(static_cast<int>(d));
  return squeeze(r, drop);
}

/// exp(x) / sum(exp(x)) along `axis`, stably.
template <class T>
DistArray<T> softmax(const DistArray<T>& x, int axis = -1) {
  const DistArray<T> e = exp(x - stop_gradient(max(x, {axis}, true)));
  return e / sum(e, {axis}, true);
}

/// x - logsumexp(x) along `axis`.
template <class T>
DistArray<T> log_softmax(const DistArray<T>& x, int axis = -1) {
  return x - logsumexp(x, {axis}, true);
}

}  // namespace dax
