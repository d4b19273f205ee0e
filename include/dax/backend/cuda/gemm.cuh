// Local GEMM on the GPU through cuBLAS, batched with broadcasting batch dimensions (same contract
// as backend/cpu/gemm.hpp), and a plain kernel for integer types, which cuBLAS does not multiply.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/layout.cuh>
#include <dax/backend/matmul_precision.hpp>
#include <dax/core/error.hpp>
#include <dax/core/float16.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail::cuda {

/// How cuBLAS stores T, and the type of alpha and beta; undefined for types cuBLAS cannot multiply.
template <class T>
struct BlasType;
template <>
struct BlasType<float> {
  static constexpr cudaDataType_t data = CUDA_R_32F;
  using Scalar = float;
};
template <>
struct BlasType<double> {
  static constexpr cudaDataType_t data = CUDA_R_64F;
  using Scalar = double;
};
template <>
struct BlasType<dax::half> {  // the bits of __half
  static constexpr cudaDataType_t data = CUDA_R_16F;
  using Scalar = float;  // accumulated in float32
};
template <>
struct BlasType<dax::bfloat16> {  // the bits of __nv_bfloat16
  static constexpr cudaDataType_t data = CUDA_R_16BF;
  using Scalar = float;
};

template <class T>
concept BlasElement = requires {
  BlasType<T>::data;
};

template <class T>
cublasComputeType_t compute_type(MatmulPrecision precision) {
  if constexpr (std::is_same_v<T, double>) {
    return CUBLAS_COMPUTE_64F;
  } else if constexpr (std::is_same_v<T, float>) {
    return precision == MatmulPrecision::high ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  } else {
    return CUBLAS_COMPUTE_32F;
  }
}

/// c = a @ b over the batch `dims` (operands a, b, c; strides in elements). Row-major C = A B is
/// column-major C^T = B^T A^T, so cuBLAS gets (n, m, k) with B first; an operand stored transposed
/// (trans_a / trans_b) is the same matrix read with CUBLAS_OP_T and its other leading dimension. The
/// innermost merged batch dimension is one strided-batched call; the host loops over the rest
/// (none when the batch dims are equal or one side is broadcast over all of them).
template <class T>
void blas_gemm(const T* a, bool trans_a, const T* b, bool trans_b, T* c, int64_t m, int64_t n, int64_t k,
               const Dims<3>& dims) {
  DAX_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "batched_gemm: cuBLAS takes int dimensions; got m = ", m,
            ", n = ", n, ", k = ", k);
  using Scalar = typename BlasType<T>::Scalar;
  const Scalar alpha = 1, beta = 0;
  const cudaDataType_t type = BlasType<T>::data;
  const MatmulPrecision precision = matmul_precision();
  const cublasComputeType_t compute = compute_type<T>(precision);
  const cublasHandle_t handle = context().blas();
  DAX_CUBLAS_CHECK(cublasSetMathMode(handle, DeviceContext::math_mode(precision == MatmulPrecision::highest)));
  const int m32 = static_cast<int>(m), n32 = static_cast<int>(n), k32 = static_cast<int>(k);
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = trans_a ? m32 : k32, ldb = trans_b ? k32 : n32;

  const int rank = dims.rank();
  const int64_t inner = rank > 0 ? dims.extent[rank - 1] : 1;
  const std::array<int64_t, 3> step = rank > 0 ? dims.stride[rank - 1] : std::array<int64_t, 3>{0, 0, 0};
  int64_t outer = 1;
  for (int d = 0; d + 1 < rank; ++d) outer *= dims.extent[d];
  std::vector<int64_t> idx(rank > 1 ? rank - 1 : 0, 0);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t oa = 0, ob = 0, oc = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      oa += idx[d] * dims.stride[d][0];
      ob += idx[d] * dims.stride[d][1];
      oc += idx[d] * dims.stride[d][2];
    }
    for (int64_t first = 0; first < inner; first += INT_MAX) {  // batchCount is an int too
      const int count = static_cast<int>(std::min<int64_t>(inner - first, INT_MAX));
      const T* pa = a + oa + first * step[0];
      const T* pb = b + ob + first * step[1];
      T* pc = c + oc + first * step[2];
      if (count == 1) {
        DAX_CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, n32, m32, k32, &alpha, pb, type, ldb, pa, type, lda, &beta,
                                      pc, type, n32, compute, CUBLAS_GEMM_DEFAULT));
      } else {
        DAX_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, op_b, op_a, n32, m32, k32, &alpha, pb, type, ldb, step[1],
                                                    pa, type, lda, step[0], &beta, pc, type, n32, step[2], count,
                                                    compute, CUBLAS_GEMM_DEFAULT));
      }
    }
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < dims.extent[d]) break;
      idx[d] = 0;
    }
  }
}

/// Integer products: one thread per output element, accumulating in T (wrapping like the CPU's).
template <class Index, class T>
__global__ void gemm_integer_kernel(const T* a, const T* b, T* c, Layout<3> batch, int64_t count, int64_t m, int64_t n,
                                    int64_t k, bool trans_a, bool trans_b) {
  for (int64_t o = grid_first(); o < count; o += grid_step()) {
    const int64_t bi = o / (m * n), rest = o - bi * m * n, i = rest / n, j = rest - i * n;
    int64_t off[3] = {0, 0, 0};
    add_offsets(batch, static_cast<Index>(bi), off);
    // A[i][kk] and B[kk][j], each read from its stored layout.
    const T* row = a + off[0] + (trans_a ? i : i * k);
    const T* col = b + off[1] + (trans_b ? j * k : j);
    const int64_t a_step = trans_a ? m : 1, b_step = trans_b ? 1 : n;
    T acc = T(0);
    for (int64_t kk = 0; kk < k; ++kk) acc = static_cast<T>(acc + row[kk * a_step] * col[kk * b_step]);
    c[off[2] + i * n + j] = acc;
  }
}

/// Batched: a (batch_a..., m, k), b (batch_b..., k, n), c (batch..., m, n), all row-major device
/// memory, batch dims broadcast; k == 0 gives zeros. The shapes are logical: an operand whose flag
/// is set is stored with its last two dimensions swapped. Queued on the stream. float products
/// follow dax::set_matmul_precision; half and bfloat16 accumulate in float32.
template <class T>
void batched_gemm(const T* a, const Shape& a_shape, const T* b, const Shape& b_shape, T* c, const Shape& c_shape,
                  bool trans_a = false, bool trans_b = false) {
  const size_t ra = a_shape.size(), rb = b_shape.size(), rc = c_shape.size();
  DAX_CHECK(ra >= 2 && rb >= 2 && rc >= 2 && ra <= rc && rb <= rc && a_shape[ra - 2] == c_shape[rc - 2] &&
                b_shape[rb - 1] == c_shape[rc - 1] && a_shape[ra - 1] == b_shape[rb - 2],
            "batched_gemm: shapes ", dax::to_string(a_shape), " @ ", dax::to_string(b_shape), " do not make ",
            dax::to_string(c_shape));
  const int64_t m = c_shape[rc - 2], n = c_shape[rc - 1], k = a_shape[ra - 1];
  const Shape batch(c_shape.begin(), c_shape.end() - 2);
  const int64_t batches = numel(batch);
  if (batches == 0 || m == 0 || n == 0) return;
  const cudaStream_t stream = context().stream();
  if (k == 0) {  // all-zero bits are zero in every element type
    DAX_CUDA_CHECK(cudaMemsetAsync(c, 0, static_cast<size_t>(batches * m * n) * sizeof(T), stream));
    return;
  }
  // Each operand's batch strides, counted in matrices (0 where it is broadcast), then in elements.
  std::array<std::vector<int64_t>, 3> strides{broadcast_strides(Shape(a_shape.begin(), a_shape.end() - 2), batch),
                                              broadcast_strides(Shape(b_shape.begin(), b_shape.end() - 2), batch),
                                              row_major_strides(batch)};
  for (size_t d = 0; d < batch.size(); ++d) {
    strides[0][d] *= m * k;
    strides[1][d] *= k * n;
    strides[2][d] *= m * n;
  }
  const Dims<3> dims = coalesce<3>(batch, strides);
  if constexpr (BlasElement<T>) {
    blas_gemm(a, trans_a, b, trans_b, c, m, n, k, dims);
  } else {
    static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>, "batched_gemm: no GEMM for this element type");
    const Layout<3> layout = make_layout(dims, "batched_gemm (batch dimensions)");
    const int64_t count = batches * m * n;
    if (count <= std::numeric_limits<uint32_t>::max())
      gemm_integer_kernel<uint32_t><<<grid_blocks(count), block_threads, 0, stream>>>(a, b, c, layout, count, m, n, k, trans_a, trans_b);
    else
      gemm_integer_kernel<int64_t><<<grid_blocks(count), block_threads, 0, stream>>>(a, b, c, layout, count, m, n, k, trans_a, trans_b);
    check_launch("gemm_integer_kernel");
  }
}

}  // namespace dax::detail::cuda
