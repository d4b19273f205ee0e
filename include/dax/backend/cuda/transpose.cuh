// Permuting the dimensions of a local piece on the GPU: out[i_perm[0], i_perm[1], ...] =
// in[i_0, i_1, ...]. Same contract as backend/cpu/transpose.hpp. Swaps of the last two dimensions
// go through shared-memory tiles so that both reads and writes are coalesced.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/layout.cuh>
#include <dax/backend/cuda/memory.cuh>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail::cuda {

/// Any permutation: each thread writes one output element, read from wherever it lies in `in`.
template <class Index, class T>
__global__ void permute_kernel(const T* in, T* out, Layout<1> layout, int64_t count) {
  for (int64_t o = grid_first(); o < count; o += grid_step()) {
    int64_t off[1] = {0};
    add_offsets(layout, static_cast<Index>(o), off);
    out[o] = in[off[0]];
  }
}

inline constexpr int tile_size = 32;
inline constexpr int tile_rows = 8;  // a 32 x 8 block moves a 32 x 32 tile, 4 elements per thread

/// in (batch, rows, cols) -> out (batch, cols, rows), row-major. A block reads a tile along in's rows
/// and writes it along out's rows through shared memory (padded by one column: no bank conflicts).
/// Grid: x walks tile columns, y tile rows, z the batch; each loops past its grid dimension, which
/// block_grid keeps within CUDA's limits (65535 in y and z). Every thread of a block runs the same
/// iterations, so the __syncthreads() inside are reached by all.
template <class T>
__global__ void __launch_bounds__(tile_size* tile_rows)
    transpose_tiles_kernel(const T* in, T* out, int64_t batch, int64_t rows, int64_t cols) {
  __shared__ alignas(T) unsigned char storage[tile_size * (tile_size + 1) * sizeof(T)];
  T(*tile)[tile_size + 1] = reinterpret_cast<T(*)[tile_size + 1]>(storage);
  const int64_t tiles_r = (rows + tile_size - 1) / tile_size, tiles_c = (cols + tile_size - 1) / tile_size;
  const int x = static_cast<int>(threadIdx.x), y = static_cast<int>(threadIdx.y);
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const T* src = in + b * rows * cols;
    T* dst = out + b * rows * cols;
    for (int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
      const int64_t r0 = tr * tile_size;
      for (int64_t tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
        const int64_t c0 = tc * tile_size;
        for (int i = y; i < tile_size; i += tile_rows)
          if (r0 + i < rows && c0 + x < cols) tile[i][x] = src[(r0 + i) * cols + c0 + x];
        __syncthreads();
        for (int i = y; i < tile_size; i += tile_rows)
          if (c0 + i < cols && r0 + x < rows) dst[(c0 + i) * rows + r0 + x] = tile[x][i];
        __syncthreads();  // the tile is read before the next iteration overwrites it
      }
    }
  }
}

/// out has shape in_shape[perm[0]], in_shape[perm[1]], ...; queued on the stream.
template <class T>
void permute(const T* in, const Shape& in_shape, const std::vector<int>& perm, T* out) {
  const size_t n = in_shape.size();
  DAX_CHECK(perm.size() == n, "permute: a permutation of ", perm.size(), " dimensions for a shape of rank ", n);
  const int64_t count = numel(in_shape);
  if (count == 0) return;
  // The output walked in row-major order, each of its dimensions stepping through `in` by the
  // stride of the input dimension it came from.
  const std::vector<int64_t> in_stride = row_major_strides(in_shape);
  std::vector<int64_t> extent(n);
  std::array<std::vector<int64_t>, 1> step{std::vector<int64_t>(n)};
  for (size_t i = 0; i < n; ++i) {
    extent[i] = in_shape[perm[i]];
    step[0][i] = in_stride[perm[i]];
  }
  const Dims<1> dims = coalesce<1>(extent, step);
  const cudaStream_t stream = context().stream();
  if (dims.rank() <= 1) {  // the permutation moves nothing (the only 1-d walk of all elements has stride 1)
    copy_device(out, in, static_cast<size_t>(count) * sizeof(T));
    return;
  }
  // After merging, a swap of the last two dimensions is out (e0, e1) from in (e1, e0), or
  // out (b, e1, e2) from in (b, e2, e1). Tiles only pay when both swapped sides are wide.
  const auto& e = dims.extent;
  const auto& s = dims.stride;
  int64_t batch = 0, rows = 0, cols = 0;
  if (dims.rank() == 2 && s[0][0] == 1 && s[1][0] == e[0]) {
    batch = 1, rows = e[1], cols = e[0];
  } else if (dims.rank() == 3 && s[1][0] == 1 && s[2][0] == e[1] && s[0][0] == e[1] * e[2]) {
    batch = e[0], rows = e[2], cols = e[1];
  }
  if (batch > 0 && rows >= tile_size / 2 && cols >= tile_size / 2) {
    const GridShape grid = block_grid(ceil_div(cols, tile_size), ceil_div(rows, tile_size), batch);
    transpose_tiles_kernel<<<to_dim3(grid), dim3(tile_size, tile_rows), 0, stream>>>(in, out, batch, rows, cols);
    check_launch("transpose_tiles_kernel");
    return;
  }
  const Layout<1> layout = make_layout(dims, "permute");
  if (fits_uint32(count))
    permute_kernel<uint32_t><<<grid_blocks(count), block_threads, 0, stream>>>(in, out, layout, count);
  else
    permute_kernel<int64_t><<<grid_blocks(count), block_threads, 0, stream>>>(in, out, layout, count);
  check_launch("permute_kernel");
}

}  // namespace dax::detail::cuda
