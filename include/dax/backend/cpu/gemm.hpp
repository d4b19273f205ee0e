// Local GEMM through Eigen (which hands float, double and complex products to an optimized BLAS when the
// program defines EIGEN_USE_BLAS), batched with broadcasting batch dimensions.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <dax/backend/cpu/elementwise.hpp>
#include <dax/core/float16.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail::cpu {

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

#if defined(EIGEN_USE_BLAS)
/// Row-major c (m x n) = op(a) @ op(b) as one column-major BLAS call: c^T = op(b)^T @ op(a)^T, where
/// a row-major (r x s) matrix is the column-major (s x r) one, its transpose.
template <class T>
void blas_gemm(const T* a, bool trans_a, const T* b, bool trans_b, T* c, int m, int k, int n) {
  const char op_a = trans_a ? 'T' : 'N', op_b = trans_b ? 'T' : 'N';
  const int lda = trans_a ? m : k, ldb = trans_b ? k : n;
  const T one = 1, zero = 0;
  if constexpr (std::is_same_v<T, float>) {
    sgemm_(&op_b, &op_a, &n, &m, &k, &one, b, &ldb, a, &lda, &zero, c, &n);
  } else if constexpr (std::is_same_v<T, double>) {
    dgemm_(&op_b, &op_a, &n, &m, &k, &one, b, &ldb, a, &lda, &zero, c, &n);
  } else {  // complex: BLAS takes the (real, imaginary) pairs as arrays of the component type
    using R = typename T::value_type;
    const auto* one_r = reinterpret_cast<const R*>(&one);
    const auto* zero_r = reinterpret_cast<const R*>(&zero);
    const auto *a_r = reinterpret_cast<const R*>(a), *b_r = reinterpret_cast<const R*>(b);
    auto* c_r = reinterpret_cast<R*>(c);
    if constexpr (std::is_same_v<R, float>) cgemm_(&op_b, &op_a, &n, &m, &k, one_r, b_r, &ldb, a_r, &lda, zero_r, c_r, &n);
    else zgemm_(&op_b, &op_a, &n, &m, &k, one_r, b_r, &ldb, a_r, &lda, zero_r, c_r, &n);
  }
}
#endif

/// c = op(a) @ op(b) for row-major c (m x n); a is stored row-major as (m x k), or as (k x m)
/// when `trans_a` (likewise b: (k x n), or (n x k) when `trans_b`). With BLAS, float and double go
/// to it with transpose flags (no copy). Otherwise a transposed operand is copied first and every
/// product is the same Eigen expression: one Eigen GEMM per element type rather than one per pair
/// of flags, each with its own packing, GEMV and small-size paths (70 KB of code and 2 s of every
/// header-only build, docs/building.md), for a copy of O(m k) beside O(m n k) work. The 16-bit
/// types multiply and accumulate in float (float's product, or BLAS: Debian's OpenBLAS has no
/// sbgemm) and round once, as cuBLAS does with float compute.
template <class T>
void gemm(const T* a, bool trans_a, const T* b, bool trans_b, T* c, int64_t m, int64_t k, int64_t n) {
  Eigen::Map<RowMajor<T>> cm(c, m, n);
  if (k == 0) {
    cm.setZero();
    return;
  }
#if defined(EIGEN_USE_BLAS)
  // Straight to BLAS with beta = 0: Eigen's product clears the result before a beta = 1 GEMM, a
  // pass over the output (and its first touch) that costs 3% of a large split-K product.
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::complex<float>> ||
                std::is_same_v<T, std::complex<double>>) {
    if (m > 0 && n > 0 && m + k + n >= 20 && m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX) {
      return blas_gemm(a, trans_a, b, trans_b, c, static_cast<int>(m), static_cast<int>(k), static_cast<int>(n));
    }
  }
#endif
  if constexpr (is_float16_v<T>) {
    // Converted to float a tile of the result at a time (both operands' rows and columns of the
    // tile, then float's product, or BLAS), never a whole operand: float copies of at most
    // (256 + 1024) x k + 256 x 1024 elements, A's rows converted once per 1024 columns of the
    // result (n / 1024 times), beside the 2 m n k flops of the product.
    constexpr int64_t tile_rows = 256, tile_cols = 1024;
    RowMajor<float> at, bt, ct;
    for (int64_t j = 0; j < n; j += tile_cols) {
      const int64_t nb = std::min(tile_cols, n - j);
      if (trans_b) bt = Eigen::Map<const RowMajor<T>>(b, n, k).middleRows(j, nb).transpose().template cast<float>();
      else bt = Eigen::Map<const RowMajor<T>>(b, k, n).middleCols(j, nb).template cast<float>();
      for (int64_t i = 0; i < m; i += tile_rows) {
        const int64_t mb = std::min(tile_rows, m - i);
        if (trans_a) at = Eigen::Map<const RowMajor<T>>(a, k, m).middleCols(i, mb).transpose().template cast<float>();
        else at = Eigen::Map<const RowMajor<T>>(a, m, k).middleRows(i, mb).template cast<float>();
        ct.resize(mb, nb);
        gemm<float>(at.data(), false, bt.data(), false, ct.data(), mb, k, nb);
        cm.block(i, j, mb, nb) = ct.template cast<T>();
      }
    }
  } else {
    // A transposed operand copied row-major, so that the product is the same expression.
    RowMajor<T> a_copy, b_copy;
    if (trans_a) a_copy = Eigen::Map<const RowMajor<T>>(a, k, m).transpose();
    if (trans_b) b_copy = Eigen::Map<const RowMajor<T>>(b, n, k).transpose();
    cm.noalias() = Eigen::Map<const RowMajor<T>>(trans_a ? a_copy.data() : a, m, k) *
                   Eigen::Map<const RowMajor<T>>(trans_b ? b_copy.data() : b, k, n);
  }
}

/// Batched: a (batch_a..., m, k), b (batch_b..., k, n), c (batch..., m, n), batch dims broadcast;
/// the shapes are the operands' logical ones, each matrix stored transposed when its flag is set.
template <class T>
void batched_gemm(const T* a, const Shape& a_shape, const T* b, const Shape& b_shape, T* c, const Shape& c_shape,
                  bool trans_a = false, bool trans_b = false) {
  const size_t ra = a_shape.size(), rc = c_shape.size();
  const int64_t m = c_shape[rc - 2], n = c_shape[rc - 1], k = a_shape[ra - 1];
  const Shape batch(c_shape.begin(), c_shape.end() - 2);
  const Shape a_batch(a_shape.begin(), a_shape.end() - 2), b_batch(b_shape.begin(), b_shape.end() - 2);
  const auto sa = broadcast_strides(a_batch, batch), sb = broadcast_strides(b_batch, batch);
  const int64_t count = numel(batch);
  std::vector<int64_t> idx(batch.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    gemm(a + oa * m * k, trans_a, b + ob * k * n, trans_b, c + i * m * n, m, k, n);
    for (size_t d = batch.size(); d-- > 0;) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace dax::detail::cpu
