// Elementwise kernels with broadcasting on the GPU: out[i] = f(in_0[...], in_1[...], ...) over the
// output's local piece, each operand read through its own strides (0 along stretched dimensions).
// Same contract as backend/cpu/elementwise.hpp; the dispatcher computes the strides.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/layout.cuh>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail::cuda {

template <class Out, class F, class... In>
__global__ void map_contiguous_kernel(Out* out, int64_t count, F f, const In*... in) {
  for (int64_t i = grid_first(); i < count; i += grid_step()) out[i] = f(in[i]...);
}

template <class Out, class F, class... In, size_t... K>
__device__ inline void map_store(Out* out, int64_t i, const int64_t* off, F& f, std::index_sequence<K...>,
                                 const In*... in) {
  out[i] = f(in[off[K]]...);
}

template <class Index, class Out, class F, class... In>
__global__ void map_strided_kernel(Out* out, int64_t count, Layout<sizeof...(In)> layout, F f, const In*... in) {
  for (int64_t i = grid_first(); i < count; i += grid_step()) {
    int64_t off[sizeof...(In)] = {};
    add_offsets(layout, static_cast<Index>(i), off);
    map_store(out, i, off, f, std::index_sequence_for<In...>{}, in...);
  }
}

/// out[i] = f(in_k[offset_k(i)]...), offset_k(i) = the row-major multi-index of i in `shape` dotted
/// with strides[k]. `f` is copied to the device: a trivially copyable functor whose operator() is
/// DAX_HOST_DEVICE (or an nvcc __device__ lambda). Queued on the stream.
template <class Out, class F, class... In>
void broadcast_map(Out* out, const Shape& shape, const std::array<std::vector<int64_t>, sizeof...(In)>& strides, F&& f,
                   const In*... in) {
  using Fn = std::decay_t<F>;
  static_assert(std::is_trivially_copyable_v<Fn>, "broadcast_map: the functor is copied to the GPU by value");
  constexpr int arity = static_cast<int>(sizeof...(In));
  const int64_t count = numel(shape);
  if (count == 0) return;
  // Every operand laid out like the output: one flat loop, no index arithmetic.
  const std::vector<int64_t> dense = row_major_strides(shape);
  bool flat = true;
  for (int k = 0; k < arity; ++k) {
    DAX_CHECK(strides[k].size() == shape.size(), "broadcast_map: operand ", k, " has ", strides[k].size(),
              " strides for an output of rank ", shape.size());
    for (size_t d = 0; d < shape.size(); ++d) flat = flat && (shape[d] == 1 || strides[k][d] == dense[d]);
  }
  const cudaStream_t stream = context().stream();
  const dim3 grid = grid_blocks(count);
  if (flat) {
    map_contiguous_kernel<Out, Fn, In...><<<grid, block_threads, 0, stream>>>(out, count, Fn(f), in...);
    check_launch("map_contiguous_kernel");
    return;
  }
  if constexpr (arity > 0) {
    // The output is row-major, so only the operands' strides decide which dimensions merge.
    const Layout<arity> layout = make_layout(coalesce<arity>(shape, strides), "broadcast_map");
    if (fits_uint32(count))
      map_strided_kernel<uint32_t, Out, Fn, In...>
          <<<grid, block_threads, 0, stream>>>(out, count, layout, Fn(f), in...);
    else
      map_strided_kernel<int64_t, Out, Fn, In...><<<grid, block_threads, 0, stream>>>(out, count, layout, Fn(f), in...);
    check_launch("map_strided_kernel");
  }
}

}  // namespace dax::detail::cuda
