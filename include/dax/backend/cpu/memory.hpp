// Host memory for the CPU backend: 64-byte aligned blocks behind the caching allocator; blocks of
// 4 MiB and more are aligned to 2 MiB and asked to be backed by transparent huge pages. Receive
// pieces of strided exchanges come from blocks the node's other processes can map.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <dax/backend/buffer.hpp>
#include <dax/comm/node_shared_memory.hpp>
#include <dax/core/env.hpp>
#include <dax/core/error.hpp>

namespace dax::detail::cpu {

/// Whether large host blocks ask for huge pages: on unless DAX_HUGE_PAGES=0. Read once.
///
/// Why: a shared-memory MPI moves a large message with one kernel copy (CMA) that first pins
/// every page of the peer's buffer. With 4 KiB pages that pinning is about half of the transfer's
/// time on the machines we measured; with 2 MiB pages the same MPI_Alltoall / MPI_Allgather runs
/// about twice as fast (docs/performance.md, "Host memory and the copies of a reshard"). Strided copies and GEMMs on large
/// pieces also take fewer TLB misses. No memory is added: the block is mapped on its own, starting
/// on a 2 MiB boundary, and is as long as what was asked for (rounded to 4 KiB).
inline bool huge_pages_enabled() {
  static const bool enabled = !env_turned_off("DAX_HUGE_PAGES");
  return enabled;
}

struct HostMemory {
  static constexpr size_t alignment = 64;
  static constexpr size_t huge_page = size_t(2) << 20;
  static constexpr size_t huge_from = 2 * huge_page;  // smaller blocks keep 64-byte alignment
  static constexpr size_t page = 4096;

  static size_t rounded(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }
  static bool huge(size_t bytes) { return bytes >= huge_from && huge_pages_enabled(); }

  void* allocate(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Straight from mmap, so the advice ends with the block (a block from malloc's heap would leave
    // it on memory that later small allocations reuse).
    if (huge(bytes)) {
      const size_t length = rounded(bytes, page);
      void* raw = mmap(nullptr, length + huge_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (raw == MAP_FAILED) fail_out_of_memory("CPU backend: out of host memory allocating ", bytes, " bytes");
      const uintptr_t first = reinterpret_cast<uintptr_t>(raw), start = rounded(first, huge_page);
      if (start > first) munmap(raw, start - first);  // the gap before the boundary
      if (const size_t tail = first + length + huge_page - (start + length); tail > 0)
        munmap(reinterpret_cast<void*>(start + length), tail);
      void* p = reinterpret_cast<void*>(start);
      // Advice only: where transparent huge pages are off ("never") the block keeps 4 KiB pages,
      // and a last partial 2 MiB stretch always does.
      madvise(p, bytes / huge_page * huge_page, MADV_HUGEPAGE);
      return p;
    }
#endif
    void* p = nullptr;
    if (posix_memalign(&p, alignment, bytes == 0 ? alignment : bytes) != 0) p = nullptr;
    if (p == nullptr) fail_out_of_memory("CPU backend: out of host memory allocating ", bytes, " bytes");
    return p;
  }
  void deallocate(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge(bytes)) {
      munmap(p, rounded(bytes, page));
      return;
    }
#endif
    std::free(p);
  }

  /// A block the node's other processes can map (comm/node_shared_memory.hpp): a strided
  /// exchange's receive piece, which the senders write into directly. Ordinary memory where the
  /// system offers no such block.
  void* allocate_shared(size_t bytes) {
    if (void* p = NodeSharedBlocks::process().create(bytes)) return p;
    return allocate(bytes);
  }
  void deallocate_shared(void* p, size_t bytes) {
    if (!NodeSharedBlocks::process().destroy(p)) deallocate(p, bytes);
  }
};

using HostAllocator = CachingAllocator<HostMemory>;

/// The process's host allocator (kept alive by every buffer it handed out).
inline const std::shared_ptr<HostAllocator>& host_allocator() {
  static const auto allocator = std::make_shared<HostAllocator>();
  return allocator;
}

inline std::shared_ptr<Buffer> allocate(size_t bytes) { return make_buffer(host_allocator(), bytes); }

/// A block the node's other processes can write into (see HostMemory::allocate_shared).
inline std::shared_ptr<Buffer> allocate_for_peers(size_t bytes) { return make_shared_buffer(host_allocator(), bytes); }

}  // namespace dax::detail::cpu
