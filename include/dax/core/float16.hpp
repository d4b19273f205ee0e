// The 16-bit floating element types, dax::half (IEEE binary16) and dax::bfloat16, and the type
// their arithmetic runs in. They are Eigen's types: the CPU GEMM multiplies them, their bits are
// those of CUDA's __half / __nv_bfloat16 (what cuBLAS and NCCL read), and their conversions are
// callable in CUDA kernels. Every op computes on them in float and rounds once to the result, as
// XLA does; sums accumulate in float.
#pragma once

#include <Eigen/Core>

#include <type_traits>

namespace dax {

using half = Eigen::half;
using bfloat16 = Eigen::bfloat16;

namespace detail {

template <class T>
inline constexpr bool is_float16_v = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

/// Floating point in dax's sense: float, double and the two 16-bit types.
template <class T>
inline constexpr bool is_floating_v = std::is_floating_point_v<T> || is_float16_v<T>;

/// The type an op computes T in: float for the 16-bit types, T itself otherwise.
template <class T>
using compute_t = std::conditional_t<is_float16_v<T>, float, T>;

}  // namespace detail
}  // namespace dax
