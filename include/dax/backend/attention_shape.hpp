// The geometry of fused attention (dax::dot_product_attention's kernels, backend/cpu/attention.hpp
// and backend/cuda/attention.cuh): q and o (batch, q_len, heads, head_dim), k and v (batch, k_len,
// heads, head_dim), all row-major (JAX's layout, what a projection reshaped gives, no transposes),
// and the log-sum-exp of each query's scaled scores, lse (batch, heads, q_len), in the compute type.
#pragma once

#include <cstdint>

#include <dax/core/macros.hpp>

namespace dax::detail {

struct AttentionShape {
  int64_t batch = 0, q_len = 0, k_len = 0, heads = 0, head_dim = 0;
  double scale = 1;  // the scores are scale * q . k
  /// With `causal`, query i sees keys j <= i + (k_len - q_len): the lower triangle aligned to the
  /// last key, as dax::causal_softmax (q_len <= k_len, so every query sees at least one key).
  bool causal = false;

  /// The keys query i sees: [0, visible(i)).
  DAX_HOST_DEVICE int64_t visible(int64_t i) const {
    if (!causal) return k_len;
    const int64_t v = i + (k_len - q_len) + 1;
    return v > k_len ? k_len : v;
  }
  /// Elements between one position and the next in q, k, v and o.
  DAX_HOST_DEVICE int64_t row_stride() const { return heads * head_dim; }
  /// Where head `n` of batch `b` starts in q / o (position 0), and in k / v.
  DAX_HOST_DEVICE int64_t q_offset(int64_t b, int64_t n) const { return (b * q_len * heads + n) * head_dim; }
  DAX_HOST_DEVICE int64_t k_offset(int64_t b, int64_t n) const { return (b * k_len * heads + n) * head_dim; }
  /// The (query, key) pairs scored: batch * heads * sum over queries of visible(i).
  double pairs() const {
    double seen = 0;
    if (!causal) seen = double(q_len) * double(k_len);
    else for (int64_t i = 0; i < q_len; ++i) seen += double(visible(i));
    return double(batch) * double(heads) * seen;
  }
  /// Multiply-add FLOPs of the forward (q k^T and p v: 4 per pair and head dimension); the
  /// backward does 2.5 times as many (five such products) where it recomputes the scores once.
  double forward_flops() const { return 4.0 * pairs() * double(head_dim); }
};

}  // namespace dax::detail
