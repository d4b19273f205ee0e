// Host memory for the CPU backend: 64-byte aligned blocks behind the caching allocator; blocks of
// 4 MiB and more are aligned to 2 MiB and asked to be backed by transparent huge pages.
#pragma once

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <dax/backend/buffer.hpp>
#include <dax/core/error.hpp>

namespace dax::detail::cpu {

/// Whether large host blocks ask for huge pages: on unless DAX_HUGE_PAGES=0. Read once.
///
/// Why: a shared-memory MPI moves a large message with one kernel copy (CMA) that first pins
/// every page of the peer's buffer. With 4 KiB pages that pinning is about half of the transfer's
/// time on the machines we measured; with 2 MiB pages the same MPI_Alltoall / MPI_Allgather runs
/// about twice as fast (docs/performance.md, "Huge pages"). Strided copies and GEMMs on large
/// pieces also take fewer TLB misses. No memory is added: the block starts on a 2 MiB boundary
/// (the gap before it is address space, never touched) and its size is what was asked for.
inline bool huge_pages_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("DAX_HUGE_PAGES");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return enabled;
}

struct HostMemory {
  static constexpr size_t alignment = 64;
  static constexpr size_t huge_page = size_t(2) << 20;
  static constexpr size_t huge_from = 2 * huge_page;  // smaller blocks keep 64-byte alignment

  void* allocate(size_t bytes) {
    const bool huge = bytes >= huge_from && huge_pages_enabled();
    void* p = nullptr;
    if (posix_memalign(&p, huge ? huge_page : alignment, bytes == 0 ? alignment : bytes) != 0) p = nullptr;
    DAX_CHECK(p != nullptr, "CPU backend: out of host memory allocating ", bytes, " bytes");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Advice only: where transparent huge pages are off ("never") the block keeps 4 KiB pages,
    // and a last partial 2 MiB stretch always does.
    if (huge) madvise(p, bytes / huge_page * huge_page, MADV_HUGEPAGE);
#endif
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
