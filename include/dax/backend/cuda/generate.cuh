// Filling a local piece from each element's global index: data[k] = f(flat) for the k-th element of
// a box of the global array, flat its global row-major index. With a counter-based generator (Philox)
// as f, random arrays come out bit-identical to the CPU's (for_each_in_box) for every sharding.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/layout.cuh>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail::cuda {

template <class Index, class T, class F>
__global__ void generate_kernel(T* data, int64_t count, Layout<1> layout, int64_t base, F f) {
  for (int64_t k = grid_first(); k < count; k += grid_step()) {
    int64_t off[1] = {base};
    add_offsets(layout, static_cast<Index>(k), off);
    data[k] = f(static_cast<uint64_t>(off[0]));
  }
}

/// data[k] = f(uint64_t flat) for the k-th element (row-major) of the box `index` of the global
/// array of shape `shape`, flat its row-major index in the global array. `f` is copied to the GPU:
/// a trivially copyable functor with a DAX_HOST_DEVICE operator(). Queued on the stream.
template <class T, class F>
void generate(T* data, const Shape& shape, const Box& index, F f) {
  static_assert(std::is_trivially_copyable_v<F>, "generate: the functor is copied to the GPU by value");
  DAX_CHECK(index.size() == shape.size(), "generate: a box of rank ", index.size(), " in a shape of rank ",
            shape.size());
  const int64_t count = numel(index);
  if (count == 0) return;
  const int64_t base = offset_in(full_box(shape), index);  // flat index of the box's first element
  const Layout<1> layout = make_layout(coalesce<1>(box_shape(index), {row_major_strides(shape)}), "generate");
  const cudaStream_t stream = context().stream();
  if (fits_uint32(count))
    generate_kernel<uint32_t><<<grid_blocks(count), block_threads, 0, stream>>>(data, count, layout, base, f);
  else
    generate_kernel<int64_t><<<grid_blocks(count), block_threads, 0, stream>>>(data, count, layout, base, f);
  check_launch("generate_kernel");
}

}  // namespace dax::detail::cuda
