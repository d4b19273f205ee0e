// GPU memory for the CUDA backend: device blocks and pinned host blocks behind the caching
// allocator of backend/buffer.hpp, and the copies between host and device on the context's stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include <dax/backend/buffer.hpp>
#include <dax/backend/cuda/device.cuh>
#include <dax/core/error.hpp>

namespace dax::detail::cuda {

/// Raw device memory. The caching allocator keeps freed blocks and hands them out again without
/// waiting: safe because every use of device memory is queued on the one stream of context(), so
/// the next user's work runs after the last user's. cudaFree happens only when the cache is
/// released (out of memory, shutdown), never in the steady state.
struct DeviceMemory {
  void* allocate(size_t bytes) {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it so later calls don't report it again
      int device = -1;
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaGetDevice(&device) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
        (void)cudaGetLastError();
      // CachingAllocator catches this, releases its cache and tries once more before passing it on.
      fail_out_of_memory("CUDA backend: out of device memory on GPU ", device, " allocating ", bytes, " bytes (", free_bytes,
           " free of ", total_bytes, " bytes, cudaMemGetInfo)");
    }
    check_cuda(status, "cudaMalloc");
    return p;
  }

  /// Never throws: it also runs from the allocator's destructor at exit, when the CUDA runtime may
  /// be unloading already and there is no one left to report to.
  void deallocate(void* p, size_t) noexcept {
    // cudaFree only "may" wait for queued work (driver API docs): wait explicitly, so no kernel still
    // reading or writing the block is left behind. Rare (cache release), so the wait costs nothing.
    if (cudaDeviceSynchronize() != cudaSuccess || cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
  }
};

/// Page-locked host memory: staging for MPI transfers of device buffers and fast copies. The host
/// touches these blocks directly, outside the stream, so whoever hands one back must have waited
/// for the copies that use it (copy_to_host and copy_from_host below do).
struct PinnedMemory {
  void* allocate(size_t bytes) {
    void* p = nullptr;
    const cudaError_t status = cudaMallocHost(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      fail_out_of_memory("CUDA backend: out of pinned host memory allocating ", bytes, " bytes (cudaMallocHost)");
    }
    check_cuda(status, "cudaMallocHost");
    return p;
  }

  void deallocate(void* p, size_t) noexcept {
    if (cudaDeviceSynchronize() != cudaSuccess || cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
  }
};

using DeviceAllocator = CachingAllocator<DeviceMemory>;
using PinnedAllocator = CachingAllocator<PinnedMemory>;

/// The process's device allocator (kept alive by every buffer it handed out).
inline const std::shared_ptr<DeviceAllocator>& device_allocator() {
  static const auto allocator = std::make_shared<DeviceAllocator>();
  return allocator;
}

inline const std::shared_ptr<PinnedAllocator>& pinned_allocator() {
  static const auto allocator = std::make_shared<PinnedAllocator>();
  return allocator;
}

/// A device buffer of `bytes` bytes on the current GPU.
inline std::shared_ptr<Buffer> allocate(size_t bytes) { return make_buffer(device_allocator(), bytes); }

/// A page-locked host buffer of `bytes` bytes.
inline std::shared_ptr<Buffer> allocate_pinned(size_t bytes) { return make_buffer(pinned_allocator(), bytes); }

/// Device (or pinned) memory to host memory; returns once the host holds the values.
inline void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const cudaStream_t stream = context().stream();
  DAX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  context().synchronize("a copy from the GPU to the host");
}

/// Host memory to device memory. Waits for the copy: `src` may be pageable memory that the caller
/// frees or overwrites as soon as this returns (a pinned source could skip the wait; not worth a
/// second path while uploads are rare next to kernels).
inline void copy_from_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const cudaStream_t stream = context().stream();
  DAX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  context().synchronize("a copy from the host to the GPU");
}

/// Device to device, queued on the stream. Either side may also be pinned host memory (unified
/// addressing tells the copy engine which is which); then the host must synchronize() before it
/// touches that pinned block.
inline void copy_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  DAX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, context().stream()));
}

/// Throws unless `p` (non-null) is memory a GPU kernel may touch; `who` names the transport in the
/// error. NCCL moves device memory only, and at one rank an in-place call copies nothing at all, so
/// a host buffer handed to it would go unnoticed there and fault or mislead at more ranks: host
/// values (sizes, flags, checksums) go through Communicator::host(). One cudaPointerGetAttributes
/// call, a lookup in the driver.
inline void require_device_memory(const void* p, const char* call, const char* who = "NCCL transport") {
  if (p == nullptr) return;
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, p);
  if (status != cudaSuccess) (void)cudaGetLastError();
  const bool device = status == cudaSuccess &&
                      (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged);
  DAX_CHECK(device, who, ": ", call, " was given host memory (", p,
            "); device communicators move device memory only: send host values through the group's host() "
            "communicator");
}

}  // namespace dax::detail::cuda
