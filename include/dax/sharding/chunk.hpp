// The ceil-chunk rule for splitting one dimension (XLA inside jit, torch.chunk): n split k ways
// has chunk = ceil(n / k) and piece i = [min(i*chunk, n), min((i+1)*chunk, n)).
#pragma once

#include <cstdint>

#include <dax/core/macros.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail {

DAX_HOST_DEVICE inline Slice chunk_piece(int64_t n, int64_t k, int64_t i) {
  const int64_t chunk = (n + k - 1) / k;
  const int64_t lo = i * chunk < n ? i * chunk : n;
  const int64_t hi = (i + 1) * chunk < n ? (i + 1) * chunk : n;
  return {lo, hi};
}

}  // namespace dax::detail
