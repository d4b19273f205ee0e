// The geometry of a fused softmax over rows (dax::causal_softmax's kernels, backend/cpu/softmax.hpp
// and backend/cuda/softmax.cuh): rows of `length` contiguous values (the last dimension, whole
// on the device), the logits scaled by `scale`, and with `causal` only the keys a query may see.
#pragma once

#include <cstdint>

#include <dax/core/macros.hpp>

namespace dax::detail {

struct SoftmaxRows {
  int64_t rows = 0, length = 0;
  double scale = 1;  // converted to the compute type in the kernels
  /// Row r is query q_first + r % q_count of q_total (the piece holds queries [q_first,
  /// q_first + q_count) of every leading index); it sees keys j <= query + (length - q_total),
  /// the causal mask's lower triangle aligned to the last key.
  bool causal = false;
  int64_t q_count = 1, q_first = 0, q_total = 1;

  /// The keys row r sees: [0, visible(r)). A row that sees none comes out uniform.
  DAX_HOST_DEVICE int64_t visible(int64_t r) const {
    if (!causal) return length;
    const int64_t v = q_first + r % q_count + (length - q_total) + 1;
    return v < 0 ? 0 : (v > length ? length : v);
  }
};

}  // namespace dax::detail
