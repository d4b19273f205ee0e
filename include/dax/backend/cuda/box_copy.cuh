// Copies one box-shaped region between two buffers laid out alike (a row-major piece covering the
// same block, one on the GPU and one in pinned host memory) as the strided copies that
// backend/box_copy_plan.hpp plans: the staged MPI transport moves only the regions a member sends
// or receives this way, never whole pieces.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include <dax/backend/box_copy_plan.hpp>
#include <dax/backend/cuda/device.cuh>
#include <dax/core/shape.hpp>

namespace dax::detail::cuda {

/// Queues the copies of `box`'s elements from `src` to `dst` (pieces of `block`, `item` bytes per
/// element) on the stream.
inline void copy_box(void* dst, const void* src, const Box& block, const Box& box, int64_t item, cudaMemcpyKind kind) {
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  const cudaStream_t stream = context().stream();
  for (const StridedCopy& c : box_copy_plan(block, box, item)) {
    if (c.rows == 1 || c.pitch >= (int64_t{1} << 31)) {  // cudaMemcpy2D takes pitches below 2^31 (memPitch)
      for (int64_t r = 0; r < c.rows; ++r)
        DAX_CUDA_CHECK(cudaMemcpyAsync(out + c.offset + r * c.pitch, in + c.offset + r * c.pitch,
                                       static_cast<size_t>(c.run), kind, stream));
    } else {
      DAX_CUDA_CHECK(cudaMemcpy2DAsync(out + c.offset, static_cast<size_t>(c.pitch), in + c.offset,
                                       static_cast<size_t>(c.pitch), static_cast<size_t>(c.run),
                                       static_cast<size_t>(c.rows), kind, stream));
    }
  }
}

}  // namespace dax::detail::cuda
