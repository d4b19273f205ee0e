// Reductions across a warp's 32 lanes, shared by the row kernels (attention, normalization).
#pragma once

#include <cuda_runtime.h>

namespace dax::detail::cuda {

/// The sum of x over the warp, in every lane.
template <class C>
__device__ inline C warp_sum(C x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

}  // namespace dax::detail::cuda
