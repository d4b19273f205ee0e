// The generic layer's view of the local kernels: one function per kernel that runs it on the
// backend of the live runtime, CPU or CUDA, with the same arguments and results. Buffers come from
// that backend's memory; host data reaches them only through to_host / from_host. In a g++ build
// only the CPU branch exists, so the dispatch costs nothing there.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include <dax/backend/adamw_update.hpp>
#include <dax/backend/buffer.hpp>
#include <dax/backend/choice.hpp>
#include <dax/backend/attention_shape.hpp>
#include <dax/backend/cpu/adamw.hpp>
#include <dax/backend/cpu/arg_reduce.hpp>
#include <dax/backend/cpu/attention.hpp>
#include <dax/backend/copy_mode.hpp>
#include <dax/backend/cpu/copy.hpp>
#include <dax/backend/cpu/elementwise.hpp>
#include <dax/backend/cpu/gather.hpp>
#include <dax/backend/cpu/gemm.hpp>
#include <dax/backend/cpu/generate.hpp>
#include <dax/backend/cpu/memory.hpp>
#include <dax/backend/cpu/norm.hpp>
#include <dax/backend/cpu/reduce.hpp>
#include <dax/backend/cpu/softmax.hpp>
#include <dax/backend/cpu/transpose.hpp>
#include <dax/backend/meta/memory.hpp>
#include <dax/core/macros.hpp>
#if DAX_CUDA_BACKEND
#include <dax/backend/cuda/backend.cuh>
#endif

namespace dax::detail::dev {

/// Whether the live runtime runs on CUDA (always false in a build without it).
inline bool on_gpu() {
#if DAX_CUDA_BACKEND
  return active_backend() == Backend::cuda;
#else
  return false;
#endif
}

/// Whether the live runtime is a meta one (simulated devices: buffers without data, kernels
/// counted and skipped; backend/meta/memory.hpp).
inline bool on_meta() { return active_backend() == Backend::meta; }

// Every kernel below returns at once on the meta backend; otherwise it runs on CUDA or the CPU.
#define DAX_SKIP_ON_META()              \
  if (on_meta()) {                      \
    ++meta::kernel_counts().kernels;    \
    return;                             \
  }
#if DAX_CUDA_BACKEND
#define DAX_DISPATCH(call) \
  DAX_SKIP_ON_META()       \
  if (on_gpu()) return cuda::call; \
  return cpu::call
#else
#define DAX_DISPATCH(call) \
  DAX_SKIP_ON_META()       \
  return cpu::call
#endif

/// A block of the backend's memory (device memory on CUDA), from its caching allocator.
inline std::shared_ptr<Buffer> allocate(size_t bytes) {
  if (on_meta()) return meta::allocate(bytes);
#if DAX_CUDA_BACKEND
  if (on_gpu()) return cuda::allocate(bytes);
#endif
  return cpu::allocate(bytes);
}

/// A block as allocate's that the node's other processes may also write into (a strided exchange's
/// receive piece; host memory only: on a GPU, an ordinary device block).
inline std::shared_ptr<Buffer> allocate_for_peers(size_t bytes) {
  if (on_meta()) return meta::allocate(bytes);
#if DAX_CUDA_BACKEND
  if (on_gpu()) return cuda::allocate(bytes);
#endif
  return cpu::allocate_for_peers(bytes);
}

template <class T>
void fill(T* data, int64_t count, T value) {
  DAX_DISPATCH(fill(data, count, value));
}

/// dst[region] (= or +=) src[region]; see backend/cpu/copy.hpp.
template <class T>
void copy_region(const T* src, const Box& src_block, T* dst, const Box& dst_block, const Box& region,
                 CopyMode mode = CopyMode::assign) {
  DAX_DISPATCH(copy_region(src, src_block, dst, dst_block, region, mode));
}

/// out[i] = f(in_k[i . strides_k]...) over the row-major index i of `shape`.
template <class Out, class F, class... In>
void broadcast_map(Out* out, const Shape& shape, const std::array<std::vector<int64_t>, sizeof...(In)>& strides,
                   F f, const In*... in) {
  DAX_DISPATCH(broadcast_map(out, shape, strides, f, in...));
}

/// out (holding op's identity) folded with `in` along the dimensions flagged in `reduced`, in Acc.
template <class In, class Acc, class Op>
void reduce_dims(const In* in, const Shape& shape, const std::vector<bool>& reduced, Acc* out, Op op) {
  DAX_DISPATCH(reduce_dims(in, shape, reduced, out, op));
}

/// Per line along the middle dimension of (outer, len, inner): the preferred element and its index.
template <class T, class Better>
void arg_reduce(const T* in, int64_t outer, int64_t len, int64_t inner, Better better, T* value, int64_t* index) {
  DAX_DISPATCH(arg_reduce(in, outer, len, inner, better, value, index));
}

template <class T>
void permute(const T* in, const Shape& in_shape, const std::vector<int>& perm, T* out) {
  DAX_DISPATCH(permute(in, in_shape, perm, out));
}

template <class T, class F>
void generate(T* data, const Shape& shape, const Box& index, F f) {
  DAX_DISPATCH(generate(data, shape, index, f));
}

/// c = a @ b, batched; a_shape and b_shape are the logical shapes, and `trans_a` / `trans_b` say
/// that operand is stored with its last two dimensions swapped (passed to BLAS as a flag).
template <class T>
void batched_gemm(const T* a, const Shape& a_shape, const T* b, const Shape& b_shape, T* c, const Shape& c_shape,
                  bool trans_a = false, bool trans_b = false) {
  if (on_meta()) meta::kernel_counts().gemm_flops += 2.0 * double(numel(c_shape)) * double(a_shape.back());
  DAX_DISPATCH(batched_gemm(a, a_shape, b, b_shape, c, c_shape, trans_a, trans_b));
}

/// out (outer, count, inner) = the rows ids[j] - first of table (outer, rows, inner), 0 where not
/// held; see backend/cpu/gather.hpp.
template <class T, class I>
void gather_rows(const T* table, int64_t outer, int64_t rows, int64_t inner, const I* ids, int64_t count,
                 int64_t first, T* out) {
  DAX_DISPATCH(gather_rows(table, outer, rows, inner, ids, count, first, out));
}

/// out (outer, rows, inner) = g (outer, count, inner) summed into the held rows ids[j] - first.
template <class T, class I>
void scatter_add_rows(const T* g, int64_t outer, int64_t count, int64_t inner, const I* ids, int64_t rows,
                      int64_t first, T* out) {
  DAX_DISPATCH(scatter_add_rows(g, outer, count, inner, ids, rows, first, out));
}

/// y = softmax(geo.scale * x) over rows, only each row's visible keys (backend/softmax_rows.hpp).
template <class T>
void softmax_rows(const T* x, const SoftmaxRows& geo, T* y) {
  DAX_DISPATCH(softmax_rows(x, geo, y));
}

/// dx = geo.scale * y * (g - sum(g * y)) per row: the gradient of softmax_rows.
template <class T>
void softmax_rows_grad(const T* y, const T* g, const SoftmaxRows& geo, T* dx) {
  DAX_DISPATCH(softmax_rows_grad(y, g, geo, dx));
}

/// Per row of `length` logits: its logsumexp and the logit at its label (0 outside [0, length)).
template <class T, class L>
void logsumexp_pick_rows(const T* x, const L* labels, int64_t rows, int64_t length, T* lse, T* picked) {
  DAX_DISPATCH(logsumexp_pick_rows(x, labels, rows, length, lse, picked));
}

/// y = each row normalized (minus its mean when geo.centered, times its rstd) * gamma (+ beta
/// when not null), and each row's rstd and (centered) mean (backend/norm_rows.hpp).
template <class T>
void norm_rows(const T* x, const T* gamma, const T* beta, const NormRows& geo, T* y, compute_t<T>* mean,
               compute_t<T>* rstd) {
  DAX_DISPATCH(norm_rows(x, gamma, beta, geo, y, mean, rstd));
}

/// norm_rows's input cotangent dx and / or g * xhat (either may be null) for the output's cotangent g.
template <class T>
void norm_rows_grad(const T* x, const T* gamma, const compute_t<T>* mean, const compute_t<T>* rstd, const T* g,
                    const NormRows& geo, T* dx, T* gx) {
  DAX_DISPATCH(norm_rows_grad(x, gamma, mean, rstd, g, geo, dx, gx));
}

/// One AdamW update of `count` tensors (backend/adamw_update.hpp), as few kernels as the backend
/// can launch them in.
template <class T, class C>
void adamw_update(const AdamWTensor<T>* tensors, int64_t count, const AdamWCoefficients<C>& k) {
  DAX_DISPATCH(adamw_update(tensors, count, k));
}

/// o = softmax(scale q k^T) v per batch and head, and each query's log-sum-exp of its scaled
/// scores (backend/attention_shape.hpp). On the meta backend it counts its products' FLOPs.
template <class T>
void attention_forward(const T* q, const T* k, const T* v, const AttentionShape& geo, T* o, compute_t<T>* lse) {
  if (on_meta()) meta::kernel_counts().gemm_flops += geo.forward_flops();
  DAX_DISPATCH(attention_forward(q, k, v, geo, o, lse));
}

/// dq, dk, dv of attention_forward for the output's cotangent g, from its o and lse.
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* o, const compute_t<T>* lse, const T* g,
                        const AttentionShape& geo, T* dq, T* dk, T* dv) {
  if (on_meta()) meta::kernel_counts().gemm_flops += 2.5 * geo.forward_flops();
  DAX_DISPATCH(attention_backward(q, k, v, o, lse, g, geo, dq, dk, dv));
}

/// Whether the live backend runs attention of T and this head dimension in a fast fused kernel:
/// the CPU always (its blocks are BLAS products), CUDA on tensor cores (16-bit, head_dim 64 or
/// 128), the meta backend as the CPU. Elsewhere dot_product_attention composes cuBLAS products.
template <class T>
bool fused_attention_is_fast([[maybe_unused]] int64_t head_dim) {
#if DAX_CUDA_BACKEND
  if (on_gpu()) return cuda::fused_attention_is_fast<T>(head_dim);
#endif
  return true;
}

#undef DAX_DISPATCH
#undef DAX_SKIP_ON_META

/// Copies `bytes` from the backend's memory to the host; returns once the host can read them.
inline void to_host(void* host, const void* src, size_t bytes) {
  if (on_meta()) {  // a buffer without data reads as zeros
    if (bytes) std::memset(host, 0, bytes);
    return;
  }
#if DAX_CUDA_BACKEND
  if (on_gpu()) return cuda::copy_to_host(host, src, bytes);
#endif
  if (bytes) std::memcpy(host, src, bytes);
}

/// Copies `bytes` of host data into the backend's memory.
inline void from_host(void* dst, const void* host, size_t bytes) {
  if (on_meta()) return;
#if DAX_CUDA_BACKEND
  if (on_gpu()) return cuda::copy_from_host(dst, host, bytes);
#endif
  if (bytes) std::memcpy(dst, host, bytes);
}

/// Copies `bytes` within the backend's memory.
inline void copy(void* dst, const void* src, size_t bytes) {
  if (on_meta()) return;
#if DAX_CUDA_BACKEND
  if (on_gpu()) return cuda::copy_device(dst, src, bytes);
#endif
  if (bytes) std::memcpy(dst, src, bytes);
}

/// Runs `write(T* host)` to produce `count` elements on the host and puts them at `data` (backend
/// memory): in place on CPU, through a host buffer and one upload on GPU.
template <class T, class Write>
void write_from_host(T* data, int64_t count, Write&& write) {
  if (on_meta()) return;  // nothing to write into
  if (!on_gpu()) return write(data);
  const auto host = std::make_unique_for_overwrite<T[]>(count);
  write(host.get());
  from_host(data, host.get(), count * sizeof(T));
}

/// A buffer holding `values` (host data) in the backend's memory.
template <class T>
std::shared_ptr<Buffer> upload(const T* values, int64_t count) {
  auto buffer = allocate(count * sizeof(T));
  from_host(buffer->data(), values, count * sizeof(T));
  return buffer;
}

/// Runs `read(const T* host)` on the `count` elements at `data` (backend memory) as the host sees
/// them: in place on CPU, through one download on GPU. Returns what `read` returns.
template <class T, class Read>
decltype(auto) read_on_host(const T* data, int64_t count, Read&& read) {
  if (!on_gpu()) return read(data);
  const auto host = std::make_unique_for_overwrite<T[]>(count);
  to_host(host.get(), data, count * sizeof(T));
  return read(static_cast<const T*>(host.get()));
}

/// `count` elements of a buffer of the backend's memory, as host values.
template <class T>
std::vector<T> download(const T* data, int64_t count) {
  if constexpr (!std::is_same_v<T, bool>) {  // from the GPU straight into the vector's storage
    if (on_gpu()) {
      std::vector<T> host(count);
      to_host(host.data(), data, count * sizeof(T));
      return host;
    }
  }
  return read_on_host(data, count, [count](const T* host) { return std::vector<T>(host, host + count); });
}

}  // namespace dax::detail::dev
