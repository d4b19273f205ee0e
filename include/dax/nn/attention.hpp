// dax::dot_product_attention: softmax(scale q k^T) v over (batch..., length, heads, head_dim)
// arrays, JAX's jax.nn.dot_product_attention (the same layout, `scale`, `is_causal`, and an
// `implementation` choice), PyTorch's F.scaled_dot_product_attention with the heads after the
// length. The fused implementation is FlashAttention: one kernel forward, keeping only each
// query's log-sum-exp beside the output, and one backward that recomputes the probabilities from
// it; no (length x length) scores exist in memory either way. The composite one is the ops a user
// would write (two einsums around dax::causal_softmax), differentiated by the tape.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include <dax/array/creation.hpp>
#include <dax/autodiff/custom_vjp.hpp>
#include <dax/backend/attention_shape.hpp>
#include <dax/nn/attention_mask.hpp>
#include <dax/nn/normalization.hpp>
#include <dax/ops/einsum.hpp>
#include <dax/ops/reduction.hpp>
#include <dax/ops/shape.hpp>
#include <dax/sharding/build.hpp>

namespace dax {

/// How dot_product_attention computes (JAX's `implementation` argument).
enum class AttentionImplementation {
  automatic,  // fused where the backend has a fast kernel for the type and head_dim, else composite
  fused,      // the fused kernels (on CUDA without tensor cores for the case: a warp per row, slow)
  composite,  // einsum, causal_softmax / softmax, einsum: the (length x length) scores in memory
};

struct AttentionOptions {
  bool is_causal = false;        // query i sees keys j <= i + (k_len - q_len)
  std::optional<double> scale = std::nullopt;  // default 1 / sqrt(head_dim)
  AttentionImplementation implementation = AttentionImplementation::automatic;
};

namespace detail {

/// The layout the fused kernels run in: q's sharding with the length and head_dim dimensions
/// whole (batch and heads split as q has them), without pending sums.
inline NamedSharding attention_layout(const NamedSharding& q, size_t ndim) {
  return unsplit(unsplit(with_unreduced_axes(q, ndim, {}), ndim, ndim - 3), ndim, ndim - 1);
}

/// The local kernels' geometry for this device's piece of q (in `layout`) and of k.
template <class T>
AttentionShape attention_geometry(const DistArray<T>& q, const DistArray<T>& k, double scale, bool causal) {
  const size_t n = q.ndim();
  AttentionShape geo;
  geo.q_len = q.shape()[n - 3];
  geo.k_len = k.shape()[n - 3];
  geo.head_dim = q.shape()[n - 1];
  geo.scale = scale;
  geo.causal = causal;
  const Box index = q.sharding().device_indices(Runtime::current().rank(), q.shape());
  geo.heads = index[n - 2].size();
  geo.batch = 1;
  for (size_t d = 0; d + 3 < n; ++d) geo.batch *= index[d].size();
  return geo;
}

/// lse's layout: (batch..., heads, q_len) split as q's batch and head dimensions.
inline NamedSharding lse_layout(const NamedSharding& q, size_t ndim) {
  std::vector<std::vector<int>> dims(ndim - 1);  // q_len, the last, whole
  for (size_t d = 0; d + 3 < ndim; ++d) dims[d] = q.dim_axes(d);
  dims[ndim - 3] = q.dim_axes(ndim - 2);
  return make_sharding(q.mesh(), dims, {});
}

template <class T>
struct AttentionSaved {
  DistArray<T> q, k, v, o;
  DistArray<compute_t<T>> lse;
  double scale;
  bool causal;
};

template <class T>
std::pair<DistArray<T>, AttentionSaved<T>> fused_attention_forward(const DistArray<T>& query, const DistArray<T>& key,
                                                                   const DistArray<T>& value, double scale,
                                                                   bool causal) {
  using C = compute_t<T>;
  const size_t n = query.ndim();
  const NamedSharding layout = attention_layout(query.sharding(), n);
  DistArray<T> q = operand_to(nn_reduced(query, "dot_product_attention"), layout, "dot_product_attention");
  DistArray<T> k = operand_to(nn_reduced(key, "dot_product_attention"), layout, "dot_product_attention");
  DistArray<T> v = operand_to(nn_reduced(value, "dot_product_attention"), layout, "dot_product_attention");
  const ProfiledOp profiled("dot_product_attention", q, k, v);
  Shape lse_shape(q.shape().begin(), q.shape().end() - 3);
  lse_shape.push_back(q.shape()[n - 2]);
  lse_shape.push_back(q.shape()[n - 3]);
  const NamedSharding lse_sharding = lse_layout(layout, n);
  if (!layout.mesh().contains(Runtime::current().rank())) {
    DistArray<T> o(q.shape(), layout, nullptr);
    DistArray<C> lse(lse_shape, lse_sharding, nullptr);
    return {o, AttentionSaved<T>{q, k, v, o, lse, scale, causal}};
  }
  const AttentionShape geo = attention_geometry(q, k, scale, causal);
  auto o_buffer = dev::allocate(static_cast<size_t>(geo.batch * geo.q_len * geo.row_stride()) * sizeof(T));
  auto lse_buffer = dev::allocate(static_cast<size_t>(geo.batch * geo.heads * geo.q_len) * sizeof(C));
  dev::attention_forward(q.local_data().data(), k.local_data().data(), v.local_data().data(), geo,
                         static_cast<T*>(o_buffer->data()), static_cast<C*>(lse_buffer->data()));
  DistArray<T> o(q.shape(), layout, std::move(o_buffer));
  DistArray<C> lse(lse_shape, lse_sharding, std::move(lse_buffer));
  return {o, AttentionSaved<T>{std::move(q), std::move(k), std::move(v), o, std::move(lse), scale, causal}};
}

template <class T>
std::tuple<DistArray<T>, DistArray<T>, DistArray<T>> fused_attention_backward(const AttentionSaved<T>& s,
                                                                              const DistArray<T>& cotangent) {
  const DistArray<T> g = reshard(nn_reduced(cotangent, "dot_product_attention"), s.o.sharding());
  const ProfiledOp profiled("dot_product_attention_grad", s.q, s.k, s.v, g);
  const NamedSharding& layout = s.q.sharding();
  if (!layout.mesh().contains(Runtime::current().rank()))
    return {DistArray<T>(s.q.shape(), layout, nullptr), DistArray<T>(s.k.shape(), layout, nullptr),
            DistArray<T>(s.v.shape(), layout, nullptr)};
  const AttentionShape geo = attention_geometry(s.q, s.k, s.scale, s.causal);
  const size_t q_bytes = static_cast<size_t>(geo.batch * geo.q_len * geo.row_stride()) * sizeof(T);
  const size_t k_bytes = static_cast<size_t>(geo.batch * geo.k_len * geo.row_stride()) * sizeof(T);
  auto dq = dev::allocate(q_bytes), dk = dev::allocate(k_bytes), dv = dev::allocate(k_bytes);
  dev::attention_backward(s.q.local_data().data(), s.k.local_data().data(), s.v.local_data().data(),
                          s.o.local_data().data(), s.lse.local_data().data(), g.local_data().data(), geo,
                          static_cast<T*>(dq->data()), static_cast<T*>(dk->data()), static_cast<T*>(dv->data()));
  return {DistArray<T>(s.q.shape(), layout, std::move(dq)), DistArray<T>(s.k.shape(), layout, std::move(dk)),
          DistArray<T>(s.v.shape(), layout, std::move(dv))};
}

/// The composite: scores (batch..., heads, q_len, k_len) by einsum, their (causal) softmax, and
/// the weighted values.
template <class T>
DistArray<T> composite_attention(const DistArray<T>& q, const DistArray<T>& k, const DistArray<T>& v, double scale,
                                 bool causal) {
  std::string batch;
  for (int d = 0; d + 3 < q.ndim(); ++d) batch += static_cast<char>('A' + d);  // capitals: never q, k, n, e
  const DistArray<T> scores = einsum(batch + "qne," + batch + "kne->" + batch + "nqk", q, k);
  const DistArray<T> probs = causal ? causal_softmax(scores, scale) : softmax(scores * scale, -1);
  return einsum(batch + "nqk," + batch + "kne->" + batch + "qne", probs, v);
}

}  // namespace detail

/// softmax(scale q k^T) v for q (batch..., q_len, heads, head_dim) and k, v (batch..., k_len,
/// heads, head_dim) of a floating type: JAX's layout, the result shaped as q. Batch and head
/// dimensions may be split over any mesh axes (k and v are brought to q's); the fused kernels
/// need each head's whole sequence and head dimension on a device, so those dimensions are
/// gathered first when split (context parallelism is dax::parallel::ring_attention). Gradients
/// flow to q, k and v.
template <class T>
  requires detail::is_floating_v<T>
DistArray<T> dot_product_attention(const DistArray<T>& q, const DistArray<T>& k, const DistArray<T>& v,
                                   const AttentionOptions& options = {}) {
  const size_t n = static_cast<size_t>(q.ndim());
  DAX_CHECK(n >= 3, "dot_product_attention: q must be (batch..., length, heads, head_dim), got shape ",
            to_string(q.shape()));
  DAX_CHECK(static_cast<size_t>(k.ndim()) == n && k.shape() == v.shape(), "dot_product_attention: k and v must have one shape of q's rank (",
            n, "), got ", to_string(k.shape()), " and ", to_string(v.shape()));
  for (size_t d = 0; d < n; ++d)
    DAX_CHECK(d == n - 3 || q.shape()[d] == k.shape()[d], "dot_product_attention: q ", to_string(q.shape()),
              " and k ", to_string(k.shape()), " must agree in every dimension but the length (dimension ", n - 3, ")");
  const int64_t q_len = q.shape()[n - 3], k_len = k.shape()[n - 3];
  DAX_CHECK(k_len > 0, "dot_product_attention: no keys (k has shape ", to_string(k.shape()), ")");
  DAX_CHECK(!options.is_causal || q_len <= k_len, "dot_product_attention: causal attention needs q_len <= k_len, got ",
            q_len, " queries and ", k_len, " keys");
  const double scale = options.scale ? *options.scale : 1.0 / std::sqrt(static_cast<double>(q.shape()[n - 1]));
  const bool fused = options.implementation == AttentionImplementation::fused ||
                     (options.implementation == AttentionImplementation::automatic &&
                      detail::dev::fused_attention_is_fast<T>(q.shape()[n - 1]));
  if (!fused) return detail::composite_attention(q, k, v, scale, options.is_causal);
  const auto f = custom_vjp(
      "dot_product_attention",
      [scale, causal = options.is_causal](const DistArray<T>& query, const DistArray<T>& key, const DistArray<T>& value) {
        return detail::fused_attention_forward(query, key, value, scale, causal);
      },
      [](const detail::AttentionSaved<T>& saved, const DistArray<T>& g) {
        return detail::fused_attention_backward(saved, g);
      });
  return f(q, k, v);
}

}  // namespace dax
