// Elementwise kernels with broadcasting on the GPU: out[i] = f(in_0[...], in_1[...], ...) over the
// output's local piece, each operand read through its own strides (0 along stretched dimensions).
// Same contract as backend/cpu/elementwise.hpp; the dispatcher computes the strides.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/layout.cuh>
#include <dax/backend/cuda/vector_access.cuh>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail::cuda {

/// V elements of an operand starting at element i: one wide access where it is laid out like the
/// output, its one element repeated where it is a broadcast scalar.
template <int V, class T>
__device__ inline Pack<T, V> load_operand(const T* p, int64_t i, bool dense) {
  if (dense) return load_pack<T, V>(p + i);
  Pack<T, V> x;
  const T value = *p;
#pragma unroll
  for (int e = 0; e < V; ++e) x.v[e] = value;
  return x;
}

/// Every operand laid out like the output or a single broadcast value (dense[k] says which):
/// V outputs per thread per pass with one wide access per dense operand, then the last
/// count % V outputs one by one.
template <int V, class Out, class F, class... In, size_t... K>
__device__ inline void map_flat(Out* out, int64_t count, F& f, const bool* dense, std::index_sequence<K...>,
                                const In*... in) {
  const int64_t packs = count / V;
  for (int64_t q = grid_first(); q < packs; q += grid_step()) {
    const int64_t i = q * V;
    Pack<Out, V> o;
    [&](const Pack<In, V>&... x) {
#pragma unroll
      for (int e = 0; e < V; ++e) o.v[e] = f(x.v[e]...);
    }(load_operand<V>(in, i, dense[K])...);
    store_pack<Out, V>(out + i, o);
  }
  for (int64_t i = packs * V + grid_first(); i < count; i += grid_step()) out[i] = f(in[dense[K] ? i : 0]...);
}

template <int V, class Out, class F, class... In>
__global__ void map_flat_kernel(Out* out, int64_t count, F f, std::array<bool, sizeof...(In)> dense, const In*... in) {
  map_flat<V>(out, count, f, dense.data(), std::index_sequence_for<In...>{}, in...);
}

/// Outputs per thread per pass of the flat kernel: 16 bytes of the widest element type.
template <class Out, class... In>
inline constexpr int flat_width = static_cast<int>(16 / std::max({sizeof(Out), sizeof(In)...})) > 0
                                      ? static_cast<int>(16 / std::max({sizeof(Out), sizeof(In)...}))
                                      : 1;

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
  // Every operand laid out like the output (dense) or one value broadcast everywhere (a scalar,
  // strides all 0): one flat loop with wide accesses and no index arithmetic, where the pointers
  // allow 16-byte accesses. Anything else walks its strides.
  const std::vector<int64_t> row_major = row_major_strides(shape);
  constexpr int V = flat_width<Out, In...>;
  std::array<bool, arity> dense{};
  bool flat = aligned_for<Out, V>(out);
  for (int k = 0; k < arity; ++k) {
    DAX_CHECK(strides[k].size() == shape.size(), "broadcast_map: operand ", k, " has ", strides[k].size(),
              " strides for an output of rank ", shape.size());
    bool like_out = true, scalar = true;
    for (size_t d = 0; d < shape.size(); ++d) {
      like_out = like_out && (shape[d] == 1 || strides[k][d] == row_major[d]);
      scalar = scalar && (shape[d] == 1 || strides[k][d] == 0);
    }
    dense[k] = like_out;
    flat = flat && (like_out || scalar);
  }
  if constexpr (arity > 0) {
    const std::array<const void*, arity> pointers{in...};
    constexpr std::array<size_t, arity> sizes{sizeof(In)...};
    for (int k = 0; k < arity; ++k)
      flat = flat && (!dense[k] || reinterpret_cast<std::uintptr_t>(pointers[k]) % (sizes[k] * V) == 0);
  }
  const cudaStream_t stream = context().stream();
  if (flat) {
    map_flat_kernel<V, Out, Fn, In...>
        <<<grid_blocks(ceil_div(count, V)), block_threads, 0, stream>>>(out, count, Fn(f), dense, in...);
    check_launch("map_flat_kernel");
    return;
  }
  if constexpr (arity == 0) {  // an output that does not allow 16-byte stores: one element at a time
    map_flat_kernel<1, Out, Fn><<<grid_blocks(count), block_threads, 0, stream>>>(out, count, Fn(f), dense);
    check_launch("map_flat_kernel");
  }
  const dim3 grid = grid_blocks(count);
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
