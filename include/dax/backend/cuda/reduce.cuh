// Reductions on the GPU: fold the elements of a local piece along some of its dimensions. Same
// contract as backend/cpu/reduce.hpp. Deterministic: every output folds its elements in an order
// fixed by the shape alone (no atomics), so a result never depends on timing.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/layout.cuh>
#include <dax/backend/cuda/memory.cuh>
#include <dax/backend/cuda/reduce_contiguous.cuh>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail::cuda {

/// A reduction seen as out_count outputs of reduce_count elements each: `kept` maps an output's
/// index to the input offset of its first element, `reduced` an element's index to its offset
/// from there.
struct ReduceLayout {
  Layout<1> kept;
  Layout<1> reduced;
  int64_t out_count = 1;
  int64_t reduce_count = 1;
};

// Work items are (part p, output j), item w = p * out_count + j: output j's elements
// [p * chunk, min((p + 1) * chunk, reduce_count)). With one part, the fold lands in out[j] as
// op(out[j], fold); with several, each item writes its fold to partial[w], a (parts, out_count)
// row-major array folded again afterwards.

DAX_HOST_DEVICE inline int64_t smaller(int64_t a, int64_t b) { return a < b ? a : b; }

template <class Index, class T>
__device__ inline const T* element(const T* in, const ReduceLayout& layout, Index j, Index r) {
  int64_t kept[1] = {0}, reduced[1] = {0};
  add_offsets(layout.kept, j, kept);
  add_offsets(layout.reduced, r, reduced);
  return in + kept[0] + reduced[0];
}

/// One thread per item, folding its elements in order. For reductions whose innermost dimension
/// is kept (neighbouring threads read neighbouring elements) or too short to keep a block busy.
template <bool Accumulate, class Index, class In, class Acc, class Op>
__global__ void reduce_per_thread_kernel(const In* in, ReduceLayout layout, int64_t chunk, int64_t parts, Acc* out,
                                         Op op) {
  const int64_t items = layout.out_count * parts;
  for (int64_t w = grid_first(); w < items; w += grid_step()) {
    const int64_t p = w / layout.out_count, j = w - p * layout.out_count;
    const int64_t begin = p * chunk, end = smaller(begin + chunk, layout.reduce_count);
    Acc acc = static_cast<Acc>(*element(in, layout, static_cast<Index>(j), static_cast<Index>(begin)));
    for (int64_t r = begin + 1; r < end; ++r)
      acc = op(acc, static_cast<Acc>(*element(in, layout, static_cast<Index>(j), static_cast<Index>(r))));
    if constexpr (Accumulate) {
      out[j] = op(out[j], acc);
    } else {
      out[w] = acc;
    }
  }
}

/// One block per item: thread t folds elements t, t + block, ... in order, then the block folds the
/// threads' results in a fixed tree. For reductions whose innermost dimension is reduced:
/// neighbouring threads read neighbouring elements.
template <bool Accumulate, class Index, class In, class Acc, class Op>
__global__ void __launch_bounds__(block_threads)
    reduce_per_block_kernel(const In* in, ReduceLayout layout, int64_t chunk, int64_t parts, Acc* out, Op op) {
  // Raw storage: Acc may have constructors, which __shared__ variables cannot run.
  __shared__ alignas(Acc) unsigned char storage[block_threads * sizeof(Acc)];
  Acc* partial = reinterpret_cast<Acc*>(storage);
  const int t = static_cast<int>(threadIdx.x);
  const int64_t items = layout.out_count * parts;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const int64_t p = w / layout.out_count, j = w - p * layout.out_count;
    const int64_t begin = p * chunk, end = smaller(begin + chunk, layout.reduce_count);
    if (begin + t < end) {
      Acc acc = static_cast<Acc>(*element(in, layout, static_cast<Index>(j), static_cast<Index>(begin + t)));
      for (int64_t r = begin + t + block_threads; r < end; r += block_threads)
        acc = op(acc, static_cast<Acc>(*element(in, layout, static_cast<Index>(j), static_cast<Index>(r))));
      partial[t] = acc;
    }
    __syncthreads();
    // Threads [0, valid) hold a value; each step folds the upper half of them onto the lower.
    int64_t valid = smaller(end - begin, static_cast<int64_t>(block_threads));
    for (int half = block_threads / 2; half > 0; half /= 2) {
      if (t < half && t + half < valid) partial[t] = op(partial[t], partial[t + half]);
      __syncthreads();
      valid = smaller(valid, static_cast<int64_t>(half));
    }
    if (t == 0) {
      if constexpr (Accumulate) {
        out[j] = op(out[j], partial[0]);
      } else {
        out[w] = partial[0];
      }
    }
    __syncthreads();  // partial[0] is read before the next item overwrites it
  }
}

template <bool Accumulate, class Index, class In, class Acc, class Op>
void launch_reduce_with(const In* in, const ReduceLayout& layout, bool per_block, int64_t chunk, int64_t parts,
                        Acc* out, const Op& op) {
  const int64_t items = layout.out_count * parts;
  const cudaStream_t stream = context().stream();
  if (per_block) {
    reduce_per_block_kernel<Accumulate, Index>
        <<<grid_blocks(items, 1), block_threads, 0, stream>>>(in, layout, chunk, parts, out, op);
    check_launch("reduce_per_block_kernel");
  } else {
    reduce_per_thread_kernel<Accumulate, Index>
        <<<grid_blocks(items), block_threads, 0, stream>>>(in, layout, chunk, parts, out, op);
    check_launch("reduce_per_thread_kernel");
  }
}

template <bool Accumulate, class In, class Acc, class Op>
void launch_reduce(const In* in, const ReduceLayout& layout, bool per_block, int64_t chunk, int64_t parts, Acc* out,
                   const Op& op) {
  if (fits_uint32(layout.out_count * layout.reduce_count))
    launch_reduce_with<Accumulate, uint32_t>(in, layout, per_block, chunk, parts, out, op);
  else
    launch_reduce_with<Accumulate, int64_t>(in, layout, per_block, chunk, parts, out, op);
}

/// Folds with out[j] = op(out[j], fold of output j's elements). A block per output where the
/// innermost dimension is reduced and long enough to keep a block busy, else a thread per output.
/// Few outputs with many elements each would leave most of the GPU idle, so their elements are
/// split into parts first: one pass folds each part, a second (this function again, on the parts)
/// folds the parts in order. Every choice depends only on the sizes: the same bits on every run.
template <class In, class Acc, class Op>
void reduce_layout(const In* in, const ReduceLayout& layout, bool innermost_reduced, Acc* out, const Op& op) {
  const int64_t outputs = layout.out_count, length = layout.reduce_count;
  const bool per_block = innermost_reduced && length > 64;
  // Aim for ~1024 busy blocks or ~65536 busy threads, and give every part enough elements that
  // the extra pass stays small next to the first.
  const int64_t parts_wanted = per_block ? std::min(ceil_div(length, 4096), ceil_div(1024, outputs))
                                         : std::min(ceil_div(length, 256), ceil_div(65536, outputs));
  const int64_t chunk = ceil_div(length, std::max<int64_t>(parts_wanted, 1));
  const int64_t parts = ceil_div(length, chunk);  // every part non-empty
  if (parts == 1) {
    launch_reduce<true>(in, layout, per_block, length, 1, out, op);
    return;
  }
  // The partial folds live in a cached block; handing it back right after queuing its last reader
  // is safe because every later user of the block queues on the same stream.
  const auto scratch = allocate(static_cast<size_t>(parts * outputs) * sizeof(Acc));
  Acc* partial = static_cast<Acc*>(scratch->data());
  launch_reduce<false>(in, layout, per_block, chunk, parts, partial, op);
  ReduceLayout second;  // partial is (parts, outputs) row-major: fold over the parts
  second.out_count = outputs;
  second.reduce_count = parts;
  if (outputs > 1) {
    second.kept.rank = 1;
    second.kept.extent[0] = outputs;
    second.kept.stride[0][0] = 1;
  }
  second.reduced.rank = 1;
  second.reduced.extent[0] = parts;
  second.reduced.stride[0][0] = outputs;
  reduce_layout(static_cast<const Acc*>(partial), second, outputs == 1, out, op);
}

/// A (rows, length) row-major piece folded along its rows: out[j] = op(out[j], fold of row j).
/// Rows of 64 elements or fewer get a thread each; 2048 or more rows of at most 4096 a warp
/// each. Other rows get a block each, and few long rows
/// (a sum of everything is one row) are cut into parts so that about 2048 blocks are busy, each
/// with at least 8192 elements; a second pass folds each row's parts in order.
template <class In, class Acc, class Op>
void reduce_rows(const In* in, int64_t rows, int64_t length, Acc* out, const Op& op) {
  const cudaStream_t stream = context().stream();
  if (length <= 64) {
    reduce_short_rows_kernel<<<grid_blocks(rows), block_threads, 0, stream>>>(in, rows, length, out, op);
    check_launch("reduce_short_rows_kernel");
    return;
  }
  constexpr int V = pack_width<In>;
  const bool wide = V > 1 && length % V == 0 && aligned_for<In, V>(in);
  if (length <= 4096 && rows >= 2048) {  // a warp per row (a block per row of 768 floats idled a quarter of it)
    const dim3 grid = grid_blocks(rows * 32);
    if (wide)
      reduce_rows_warp_kernel<V><<<grid, block_threads, 0, stream>>>(in, rows, length, out, op);
    else
      reduce_rows_warp_kernel<1><<<grid, block_threads, 0, stream>>>(in, rows, length, out, op);
    check_launch("reduce_rows_warp_kernel");
    return;
  }
  const int64_t step = wide ? V : 1;
  const int64_t parts_wanted = std::max<int64_t>(1, std::min(ceil_div(length, 8192), ceil_div(2048, rows)));
  const int64_t chunk = ceil_div(ceil_div(length, parts_wanted), step) * step;
  const int64_t parts = ceil_div(length, chunk);
  const auto launch = [&](auto accumulate, Acc* target) {
    constexpr bool A = decltype(accumulate)::value;
    const dim3 grid = grid_blocks(rows * parts, 1);
    if (wide)
      reduce_rows_kernel<A, V><<<grid, block_threads, 0, stream>>>(in, rows, length, chunk, parts, target, op);
    else
      reduce_rows_kernel<A, 1><<<grid, block_threads, 0, stream>>>(in, rows, length, chunk, parts, target, op);
    check_launch("reduce_rows_kernel");
  };
  if (parts == 1) {
    launch(std::true_type{}, out);
    return;
  }
  // Safe to hand back right after queuing its reader: later users queue on the same stream.
  const auto scratch = allocate(static_cast<size_t>(rows * parts) * sizeof(Acc));
  Acc* partial = static_cast<Acc*>(scratch->data());
  launch(std::false_type{}, partial);
  reduce_rows(static_cast<const Acc*>(partial), rows, parts, out, op);
}

/// A (length, width) row-major piece folded along its columns: out[c] = op(out[c], fold of column
/// c). A thread per V neighbouring columns; long columns are cut into parts so that about 128k
/// threads are busy, each with at least 64 rows, and a second pass folds the parts in order.
template <class In, class Acc, class Op>
void reduce_columns(const In* in, int64_t length, int64_t width, Acc* out, const Op& op) {
  const cudaStream_t stream = context().stream();
  constexpr int V = pack_width<In>;
  const bool wide = V > 1 && width % V == 0 && aligned_for<In, V>(in);
  const int64_t groups = wide ? width / V : width;
  const int64_t parts_wanted = std::max<int64_t>(1, std::min(ceil_div(length, 64), ceil_div(131072, groups)));
  const int64_t chunk = ceil_div(length, parts_wanted);
  const int64_t parts = ceil_div(length, chunk);
  const auto launch = [&](auto accumulate, Acc* target) {
    constexpr bool A = decltype(accumulate)::value;
    const dim3 grid = grid_blocks(groups * parts);
    if (wide)
      reduce_columns_kernel<A, V><<<grid, block_threads, 0, stream>>>(in, length, width, chunk, parts, target, op);
    else
      reduce_columns_kernel<A, 1><<<grid, block_threads, 0, stream>>>(in, length, width, chunk, parts, target, op);
    check_launch("reduce_columns_kernel");
  };
  if (parts == 1) {
    launch(std::true_type{}, out);
    return;
  }
  const auto scratch = allocate(static_cast<size_t>(parts * width) * sizeof(Acc));
  Acc* partial = static_cast<Acc*>(scratch->data());
  launch(std::false_type{}, partial);
  reduce_columns(static_cast<const Acc*>(partial), parts, width, out, op);
}

/// out[j] = op(out[j], Acc(in[i])) for every element i of a piece of shape `shape`, j its index with
/// the dimensions flagged in `reduced` dropped. `out` must hold the identity of op. `op` is copied
/// to the GPU: a trivially copyable functor with a DAX_HOST_DEVICE `Acc operator()(Acc, Acc)`,
/// associative (elements are grouped differently than on the CPU; floating-point sums differ in
/// rounding). Queued on the stream.
template <class In, class Acc, class Op>
void reduce_dims(const In* in, const Shape& shape, const std::vector<bool>& reduced, Acc* out, Op&& op) {
  using Fn = std::decay_t<Op>;
  static_assert(std::is_trivially_copyable_v<Fn>, "reduce_dims: the functor is copied to the GPU by value");
  DAX_CHECK(reduced.size() == shape.size(), "reduce_dims: ", reduced.size(), " reduced flags for a shape of rank ",
            shape.size());
  if (numel(shape) == 0) return;
  // Dimensions of size 1 change nothing; neighbours both kept or both reduced merge into one.
  std::vector<int64_t> extent;
  std::vector<bool> flag;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!flag.empty() && flag.back() == reduced[d]) {
      extent.back() *= shape[d];
    } else {
      extent.push_back(shape[d]);
      flag.push_back(reduced[d]);
    }
  }
  // The common layouts get kernels of their own: everything or the trailing dimensions folded
  // (rows), the leading dimensions folded with at least a warp's width of columns kept (columns).
  if (flag.size() == 1 && flag[0]) return reduce_rows(in, 1, extent[0], out, Fn(op));
  if (flag.size() == 2 && !flag[0] && flag[1]) return reduce_rows(in, extent[0], extent[1], out, Fn(op));
  if (flag.size() == 2 && flag[0] && !flag[1] && extent[1] >= 32)
    return reduce_columns(in, extent[0], extent[1], out, Fn(op));
  const std::vector<int64_t> stride = row_major_strides(extent);
  Dims<1> kept, folded;
  for (size_t d = 0; d < extent.size(); ++d) {
    Dims<1>& dims = flag[d] ? folded : kept;
    dims.extent.push_back(extent[d]);
    dims.stride.push_back({stride[d]});
  }
  ReduceLayout layout;
  layout.kept = make_layout(kept, "reduce_dims (kept dimensions)");
  layout.reduced = make_layout(folded, "reduce_dims (reduced dimensions)");
  for (int64_t e : kept.extent) layout.out_count *= e;
  for (int64_t e : folded.extent) layout.reduce_count *= e;
  reduce_layout(in, layout, !flag.empty() && flag.back(), out, Fn(op));
}

}  // namespace dax::detail::cuda
