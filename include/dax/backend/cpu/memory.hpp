// Host memory for the CPU backend: 64-byte aligned blocks behind the caching allocator.
#pragma once

#include <cstdlib>
#include <memory>
#include <new>

#include <dax/backend/buffer.hpp>
#include <dax/core/error.hpp>

namespace dax::detail::cpu {

struct HostMemory {
  static constexpr size_t alignment = 64;
  void* allocate(size_t bytes) {
    void* p = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    DAX_CHECK(p != nullptr, "CPU backend: out of host memory allocating ", bytes, " bytes");
    return p;
  }
  void deallocate(void* p, size_t) { std::free(p); }
};

using HostAllocator = CachingAllocator<HostMemory>;

/// The process's host allocator (kept alive by every buffer it handed out).
inline const std::shared_ptr<HostAllocator>& host_allocator() {
  static const auto allocator = std::make_shared<HostAllocator>();
  return allocator;
}

inline std::shared_ptr<Buffer> allocate(size_t bytes) { return make_buffer(host_allocator(), bytes); }

}  // namespace dax::detail::cpu
