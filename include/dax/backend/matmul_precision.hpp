// How much precision float32 matrix products may trade for speed, like JAX's
// jax.default_matmul_precision and PyTorch's torch.set_float32_matmul_precision. Every backend's
// GEMM reads the setting at each call; backends without faster modes ignore it.
#pragma once

#include <atomic>
#include <string>

namespace dax {

/// highest: full float32 products (the default). high: float32 products may round their inputs to
/// TF32 (10-bit mantissa, float32 accumulation) on tensor cores that have it.
enum class MatmulPrecision { highest, high };

inline std::string to_string(MatmulPrecision p) { return p == MatmulPrecision::highest ? "highest" : "high"; }

namespace detail {

inline std::atomic<MatmulPrecision>& matmul_precision_setting() {
  static std::atomic<MatmulPrecision> setting{MatmulPrecision::highest};
  return setting;
}

inline MatmulPrecision matmul_precision() { return matmul_precision_setting().load(std::memory_order_relaxed); }

}  // namespace detail

/// Per process: call it on every rank alike, or ranks compute the same product differently.
inline void set_matmul_precision(MatmulPrecision p) {
  detail::matmul_precision_setting().store(p, std::memory_order_relaxed);
}

}  // namespace dax
