// The geometry of a fused normalization over rows (dax::layer_norm's and dax::rms_norm's kernels,
// backend/cpu/norm.hpp and backend/cuda/norm.cuh): rows of `length` contiguous values (the last
// dimension, whole on the device), each normalized by its own statistics, then scaled by gamma
// and (layer_norm) shifted by beta, both of `length` values.
#pragma once

#include <cstdint>

namespace dax::detail {

struct NormRows {
  int64_t rows = 0, length = 0;
  double eps = 1e-5;     // converted to the compute type in the kernels
  bool centered = true;  // layer_norm: subtract the row's mean; rms_norm: not (0, neither kept nor read)
};

}  // namespace dax::detail
