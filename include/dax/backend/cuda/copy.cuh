// Copying (or adding) a rectangular region between two row-major pieces of a global array on the
// GPU: the pack and unpack of resharding, one kernel per call, plus fill. Same contract as
// backend/cpu/copy.hpp.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

#include <dax/backend/copy_mode.hpp>
#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/layout.cuh>
#include <dax/core/shape.hpp>

namespace dax::detail::cuda {

/// Walks the region; operand 0 is the source, 1 the destination.
template <bool Add, class Index, class T>
__global__ void copy_region_kernel(const T* src, T* dst, Layout<2> layout, int64_t count) {
  for (int64_t i = grid_first(); i < count; i += grid_step()) {
    int64_t off[2] = {0, 0};
    add_offsets(layout, static_cast<Index>(i), off);
    if constexpr (Add) {
      dst[off[1]] = dst[off[1]] + src[off[0]];
    } else {
      dst[off[1]] = src[off[0]];
    }
  }
}

template <class T>
__global__ void fill_kernel(T* data, int64_t count, T value) {
  for (int64_t i = grid_first(); i < count; i += grid_step()) data[i] = value;
}

/// dst[region] (=|+=) src[region], where src holds the piece `src_block` of the global array and
/// dst the piece `dst_block`, both row-major device memory; `region` lies inside both. Queued on
/// the stream.
template <class T>
void copy_region(const T* src, const Box& src_block, T* dst, const Box& dst_block, const Box& region,
                 CopyMode mode = CopyMode::assign) {
  const int64_t count = numel(region);
  if (count == 0) return;
  const Layout<2> layout = make_layout(
      coalesce<2>(box_shape(region), {row_major_strides(box_shape(src_block)), row_major_strides(box_shape(dst_block))}),
      "copy_region");
  src += offset_in(src_block, region);
  dst += offset_in(dst_block, region);
  const bool one_run = layout.rank == 0 || (layout.rank == 1 && layout.stride[0][0] == 1 && layout.stride[1][0] == 1);
  if (mode == CopyMode::assign && one_run) {  // contiguous in both pieces: the copy engine does it
    DAX_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(count) * sizeof(T), cudaMemcpyDeviceToDevice,
                                   context().stream()));
    return;
  }
  const dim3 grid = grid_blocks(count);
  const cudaStream_t stream = context().stream();
  const bool small = fits_uint32(count);
  if (mode == CopyMode::add) {
    if (small)
      copy_region_kernel<true, uint32_t><<<grid, block_threads, 0, stream>>>(src, dst, layout, count);
    else
      copy_region_kernel<true, int64_t><<<grid, block_threads, 0, stream>>>(src, dst, layout, count);
  } else {
    if (small)
      copy_region_kernel<false, uint32_t><<<grid, block_threads, 0, stream>>>(src, dst, layout, count);
    else
      copy_region_kernel<false, int64_t><<<grid, block_threads, 0, stream>>>(src, dst, layout, count);
  }
  check_launch("copy_region_kernel");
}

/// data[0, count) = value, queued on the stream.
template <class T>
void fill(T* data, int64_t count, T value) {
  if (count <= 0) return;
  fill_kernel<<<grid_blocks(count), block_threads, 0, context().stream()>>>(data, count, value);
  check_launch("fill_kernel");
}

}  // namespace dax::detail::cuda
