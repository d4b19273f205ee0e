// Fused attention on the CPU (the contract of backend/attention_shape.hpp): for each batch and
// head, blocks of queries at a time, the block's scores against the keys it sees (one GEMM), their
// softmax, and its output (one GEMM). Memory beyond the operands is one block of scores, never the
// (q_len x k_len) matrix. The backward recomputes each block's probabilities from the saved
// log-sum-exp and runs four GEMMs a block (FlashAttention's backward with the loops exchanged, so
// dq needs no accumulation across blocks). Everything computes in compute_t<T> (float for the
// 16-bit types: the scores and probabilities never round to 16 bits), each head's operands
// converted once.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <dax/backend/attention_shape.hpp>
#include <dax/backend/cpu/gemm.hpp>
#include <dax/core/float16.hpp>

namespace dax::detail::cpu {
namespace attention_detail {

/// Queries a block: a (64 x k_len) block of float scores is 256 KB at k_len 1024 (cache-sized).
inline constexpr int64_t query_block = 64;

/// One head's (len x head_dim) rows of x (stride row_stride) as a contiguous compute-type matrix.
template <class T, class C>
void load_head(const T* x, int64_t len, const AttentionShape& geo, std::vector<C>& out) {
  const int64_t d = geo.head_dim, stride = geo.row_stride();
  out.resize(static_cast<size_t>(len * d));
  for (int64_t i = 0; i < len; ++i)
    for (int64_t h = 0; h < d; ++h) out[i * d + h] = static_cast<C>(x[i * stride + h]);
}

template <class T, class C>
void store_head(const std::vector<C>& in, int64_t len, const AttentionShape& geo, T* x) {
  const int64_t d = geo.head_dim, stride = geo.row_stride();
  for (int64_t i = 0; i < len; ++i)
    for (int64_t h = 0; h < d; ++h) x[i * stride + h] = static_cast<T>(in[i * d + h]);
}

/// Rows [i0, i0 + rows) of the scores (rows x kmax, scale applied) turned into probabilities:
/// exp(s - lse) where visible, 0 beyond. With `lse_out` the rows' log-sum-exp is computed and
/// written there (forward); otherwise read from `lse_in` (backward).
template <class C>
void probabilities(C* s, int64_t i0, int64_t rows, int64_t kmax, const AttentionShape& geo, C* lse_out,
                   const C* lse_in) {
  const C scale = static_cast<C>(geo.scale);
  for (int64_t r = 0; r < rows; ++r) {
    C* row = s + r * kmax;
    const int64_t v = geo.visible(i0 + r);
    C l;
    if (lse_out) {
      C m = -std::numeric_limits<C>::infinity();
      for (int64_t j = 0; j < v; ++j) m = std::max(m, row[j] * scale);
      C sum = 0;
      for (int64_t j = 0; j < v; ++j) sum += std::exp(row[j] * scale - m);
      l = m + std::log(sum);
      lse_out[r] = l;
    } else {
      l = lse_in[r];
    }
    for (int64_t j = 0; j < v; ++j) row[j] = std::exp(row[j] * scale - l);
    std::fill(row + v, row + kmax, C(0));
  }
}

}  // namespace attention_detail

/// o = softmax(scale q k^T) v per batch and head (causal: each query's visible keys); lse the
/// log-sum-exp of each query's scaled scores, (batch, heads, q_len).
template <class T, class C>
void attention_forward(const T* q, const T* k, const T* v, const AttentionShape& geo, T* o, C* lse) {
  using namespace attention_detail;
  const int64_t d = geo.head_dim;
  std::vector<C> qh, kh, vh, oh(static_cast<size_t>(geo.q_len * d)), s;
  for (int64_t b = 0; b < geo.batch; ++b) {
    for (int64_t n = 0; n < geo.heads; ++n) {
      load_head(q + geo.q_offset(b, n), geo.q_len, geo, qh);
      load_head(k + geo.k_offset(b, n), geo.k_len, geo, kh);
      load_head(v + geo.k_offset(b, n), geo.k_len, geo, vh);
      C* lse_head = lse + (b * geo.heads + n) * geo.q_len;
      for (int64_t i0 = 0; i0 < geo.q_len; i0 += query_block) {
        const int64_t rows = std::min(query_block, geo.q_len - i0), kmax = geo.visible(i0 + rows - 1);
        s.resize(static_cast<size_t>(rows * kmax));
        gemm<C>(qh.data() + i0 * d, false, kh.data(), true, s.data(), rows, d, kmax);
        probabilities<C>(s.data(), i0, rows, kmax, geo, lse_head + i0, nullptr);
        gemm<C>(s.data(), false, vh.data(), false, oh.data() + i0 * d, rows, kmax, d);
      }
      store_head(oh, geo.q_len, geo, o + geo.q_offset(b, n));
    }
  }
}

/// The gradients of attention_forward for the output's cotangent g: dq, dk, dv (like q, k, v),
/// from the saved o and lse.
template <class T, class C>
void attention_backward(const T* q, const T* k, const T* v, const T* o, const C* lse, const T* g,
                        const AttentionShape& geo, T* dq, T* dk, T* dv) {
  using namespace attention_detail;
  const int64_t d = geo.head_dim;
  const C scale = static_cast<C>(geo.scale);
  std::vector<C> qh, kh, vh, oh, gh, delta(static_cast<size_t>(geo.q_len)), p, dp, part;
  std::vector<C> dqh(static_cast<size_t>(geo.q_len * d)), dkh(static_cast<size_t>(geo.k_len * d)),
      dvh(static_cast<size_t>(geo.k_len * d));
  const auto add_into = [&](std::vector<C>& acc, int64_t count) {
    for (int64_t i = 0; i < count; ++i) acc[i] += part[i];
  };
  for (int64_t b = 0; b < geo.batch; ++b) {
    for (int64_t n = 0; n < geo.heads; ++n) {
      load_head(q + geo.q_offset(b, n), geo.q_len, geo, qh);
      load_head(k + geo.k_offset(b, n), geo.k_len, geo, kh);
      load_head(v + geo.k_offset(b, n), geo.k_len, geo, vh);
      load_head(o + geo.q_offset(b, n), geo.q_len, geo, oh);
      load_head(g + geo.q_offset(b, n), geo.q_len, geo, gh);
      for (int64_t i = 0; i < geo.q_len; ++i) {  // delta_i = g_i . o_i = sum_j p_ij (g_i . v_j)
        C sum = 0;
        for (int64_t h = 0; h < d; ++h) sum += gh[i * d + h] * oh[i * d + h];
        delta[i] = sum;
      }
      std::fill(dkh.begin(), dkh.end(), C(0));
      std::fill(dvh.begin(), dvh.end(), C(0));
      const C* lse_head = lse + (b * geo.heads + n) * geo.q_len;
      for (int64_t i0 = 0; i0 < geo.q_len; i0 += query_block) {
        const int64_t rows = std::min(query_block, geo.q_len - i0), kmax = geo.visible(i0 + rows - 1);
        const C* qb = qh.data() + i0 * d;
        const C* gb = gh.data() + i0 * d;
        p.resize(static_cast<size_t>(rows * kmax));
        dp.resize(p.size());
        part.resize(static_cast<size_t>(kmax * d));
        gemm<C>(qb, false, kh.data(), true, p.data(), rows, d, kmax);
        probabilities<C>(p.data(), i0, rows, kmax, geo, nullptr, lse_head + i0);
        gemm<C>(p.data(), true, gb, false, part.data(), kmax, rows, d);  // dv += p^T g
        add_into(dvh, kmax * d);
        gemm<C>(gb, false, vh.data(), true, dp.data(), rows, d, kmax);  // dp = g v^T
        for (int64_t r = 0; r < rows; ++r)  // ds = p (dp - delta), scaled: the scores' gradient
          for (int64_t j = 0; j < kmax; ++j) dp[r * kmax + j] = scale * p[r * kmax + j] * (dp[r * kmax + j] - delta[i0 + r]);
        gemm<C>(dp.data(), false, kh.data(), false, dqh.data() + i0 * d, rows, kmax, d);  // dq = ds k
        gemm<C>(dp.data(), true, qb, false, part.data(), kmax, rows, d);                  // dk += ds^T q
        add_into(dkh, kmax * d);
      }
      store_head(dqh, geo.q_len, geo, dq + geo.q_offset(b, n));
      store_head(dkh, geo.k_len, geo, dk + geo.k_offset(b, n));
      store_head(dvh, geo.k_len, geo, dv + geo.k_offset(b, n));
    }
  }
}

}  // namespace dax::detail::cpu
