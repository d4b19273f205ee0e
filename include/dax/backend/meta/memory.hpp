// Memory of the meta backend (PyTorch's device="meta"): buffers that hold no data. Every block is
// the start of one reserved, never-written region of zero pages (mmap with MAP_NORESERVE), so a
// pointer into any block reads as zeros and costs no memory; the caching allocator above counts
// the bytes each block stands for exactly as the CPU backend's would, which is what a simulated
// device reports as its memory. Kernels do not run on this backend (backend/device_ops.hpp).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include <dax/backend/buffer.hpp>
#include <dax/core/error.hpp>

namespace dax::detail::meta {

/// The reserved region: the largest of 1 TiB, 64 GiB, 1 GiB the system grants. A block larger
/// than it is refused (no simulated device holds one buffer that large).
struct ZeroRegion {
  void* start = nullptr;
  size_t bytes = 0;

  ZeroRegion() {
    for (size_t gib : {size_t(1) << 10, size_t(64), size_t(1)}) {
      void* p = mmap(nullptr, gib << 30, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) {
        start = p, bytes = gib << 30;
        return;
      }
    }
  }
  ~ZeroRegion() {
    if (start) munmap(start, bytes);
  }
  ZeroRegion(const ZeroRegion&) = delete;
  ZeroRegion& operator=(const ZeroRegion&) = delete;

  static ZeroRegion& process() {
    static ZeroRegion region;
    return region;
  }
};

struct MetaMemory {
  void* allocate(size_t bytes) {
    ZeroRegion& region = ZeroRegion::process();
    DAX_CHECK(region.start != nullptr, "meta backend: the system refused to reserve address space for data-less "
              "buffers (mmap of 1 GiB with MAP_NORESERVE failed)");
    DAX_CHECK(bytes <= region.bytes, "meta backend: one buffer of ", bytes, " bytes is larger than the ",
              region.bytes, " bytes of address space reserved for any one buffer");
    return region.start;
  }
  void deallocate(void*, size_t) {}
};

using MetaAllocator = CachingAllocator<MetaMemory>;

/// The process's meta allocator. Its counts start from zero for every meta runtime
/// (reset_allocator), so a simulation reports only what its own step held.
inline std::shared_ptr<MetaAllocator>& allocator_slot() {
  static std::shared_ptr<MetaAllocator> allocator = std::make_shared<MetaAllocator>();
  return allocator;
}
inline const std::shared_ptr<MetaAllocator>& allocator() { return allocator_slot(); }
inline void reset_allocator() { allocator_slot() = std::make_shared<MetaAllocator>(); }

inline std::shared_ptr<Buffer> allocate(size_t bytes) { return make_buffer(allocator(), bytes); }

/// What the kernels skipped on this backend would have done: floating-point operations of the
/// products (2mnk each), counted so a simulation can estimate compute time.
struct KernelCounts {
  double gemm_flops = 0;
  int64_t kernels = 0;  // local kernels skipped, of every kind
};
inline KernelCounts& kernel_counts() {
  static KernelCounts counts;
  return counts;
}

}  // namespace dax::detail::meta
