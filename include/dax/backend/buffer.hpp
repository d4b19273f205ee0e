// Device buffers: a block of a backend's memory, shared by the arrays that view it and handed back
// to its caching allocator when the last one lets go. The caching policy is the same for every
// backend; a backend supplies only how to get and return raw memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <new>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <dax/backend/memory_parts.hpp>
#include <dax/core/error.hpp>

namespace dax::detail {

struct AllocatorStats {
  int64_t system_allocations = 0;  // blocks obtained from the backend's raw memory
  int64_t system_frees = 0;
  int64_t requests = 0;            // blocks handed out, cached or not
  int64_t bytes_in_use = 0;        // by size class
  int64_t bytes_cached = 0;
  int64_t bytes_requested = 0;     // live blocks, in the bytes asked for (dax::memory_stats)
  int64_t peak_bytes_requested = 0;  // the most bytes_requested since the start or reset_peak()
  std::array<int64_t, kMemoryParts> part_bytes{};          // bytes_requested by part (memory_parts.hpp)
  std::array<int64_t, kMemoryParts> part_bytes_at_peak{};  // the same when the peak was reached
};

/// Keeps freed blocks by size class and hands them out again, so a steady-state loop of the same
/// operations allocates nothing new. `Raw` provides allocate(bytes) and deallocate(ptr, bytes).
template <class Raw>
class CachingAllocator : public std::enable_shared_from_this<CachingAllocator<Raw>> {
 public:
  explicit CachingAllocator(Raw raw = Raw()) : raw_(std::move(raw)) {}
  ~CachingAllocator() { release_cached(); }

  /// Size classes: multiples of 256 bytes up to 64 KiB, then sixteenths of a power of two (at most
  /// 6.25% slack), so recurring sizes land in the same class.
  static size_t size_class(size_t bytes) {
    if (bytes <= 65536) return (bytes + 255) / 256 * 256;
    size_t power = 1;
    while (power < bytes) power <<= 1;
    const size_t step = power / 16;
    return (bytes + step - 1) / step * step;
  }

  /// A block of at least `bytes`. `shared`: one the node's other processes can map (for a
  /// backend whose raw memory offers it, allocate_shared; otherwise an ordinary block). Shared and
  /// ordinary blocks are cached apart.
  /// `part`: the memory part it counts under (memory_parts.hpp).
  void* allocate(size_t bytes, bool shared = false, int part = 0) {
    const size_t size = size_class(bytes == 0 ? 1 : bytes);
    std::lock_guard lock(mutex_);
    // Whatever can throw runs before the counters move, so a caller that catches an allocation's
    // error finds them as they were.
    auto& free_list = free_[{shared, size}];
    void* p = nullptr;
    if (!free_list.empty()) {
      p = free_list.back();
      free_list.pop_back();
      stats_.bytes_cached -= static_cast<int64_t>(size);
    } else {
      p = allocate_from_system(size, shared);
      ++stats_.system_allocations;
    }
    ++stats_.requests;
    stats_.bytes_in_use += static_cast<int64_t>(size);
    stats_.bytes_requested += static_cast<int64_t>(bytes);
    stats_.part_bytes[static_cast<size_t>(part)] += static_cast<int64_t>(bytes);
    if (stats_.bytes_requested > stats_.peak_bytes_requested) {
      stats_.peak_bytes_requested = stats_.bytes_requested;
      stats_.part_bytes_at_peak = stats_.part_bytes;
    }
    return p;
  }

  /// Never throws (it runs from Buffer's destructor): a block the cache has no room to keep goes
  /// back to the system at once.
  void deallocate(void* p, size_t bytes, bool shared = false, int part = 0) noexcept {
    const size_t size = size_class(bytes == 0 ? 1 : bytes);
    std::lock_guard lock(mutex_);
    stats_.bytes_in_use -= static_cast<int64_t>(size);
    stats_.bytes_requested -= static_cast<int64_t>(bytes);
    stats_.part_bytes[static_cast<size_t>(part)] -= static_cast<int64_t>(bytes);
    try {
      free_[{shared, size}].push_back(p);
      stats_.bytes_cached += static_cast<int64_t>(size);
    } catch (...) {
      raw_deallocate(p, size, shared);
      ++stats_.system_frees;
    }
  }

  /// Returns every cached block to the system.
  void release_cached() {
    std::lock_guard lock(mutex_);
    release_cached_locked();
  }

  /// Moves a live block's bytes from one part to another (dax::label_memory).
  void relabel(size_t bytes, int from, int to) {
    std::lock_guard lock(mutex_);
    stats_.part_bytes[static_cast<size_t>(from)] -= static_cast<int64_t>(bytes);
    stats_.part_bytes[static_cast<size_t>(to)] += static_cast<int64_t>(bytes);
  }

  /// Starts a new peak from the bytes in use now.
  void reset_peak() {
    std::lock_guard lock(mutex_);
    stats_.peak_bytes_requested = stats_.bytes_requested;
    stats_.part_bytes_at_peak = stats_.part_bytes;
  }

  AllocatorStats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  void* raw_allocate(size_t size, bool shared) {
    if constexpr (requires(Raw& r) { r.allocate_shared(size); })
      if (shared) return raw_.allocate_shared(size);
    return raw_.allocate(size);
  }
  void raw_deallocate(void* p, size_t size, bool shared) {
    if constexpr (requires(Raw& r) { r.deallocate_shared(p, size); })
      if (shared) return raw_.deallocate_shared(p, size);
    raw_.deallocate(p, size);
  }

  /// A new block from the backend. Out of memory (the backend's OutOfMemoryError, or std::bad_alloc),
  /// it returns every cached block and tries once more; the error then says what dax itself held:
  /// a leak or a cache shows there, another library's memory does not. Any other failure passes
  /// through as it came, the cache kept.
  void* allocate_from_system(size_t size, bool shared) {
    try {
      return raw_allocate(size, shared);
    } catch (const OutOfMemoryError&) {
    } catch (const std::bad_alloc&) {
    }
    const int64_t cached = stats_.bytes_cached;
    release_cached_locked();
    std::string what;
    try {
      return raw_allocate(size, shared);
    } catch (const OutOfMemoryError& e) {
      what = e.what();
    } catch (const std::bad_alloc& e) {
      what = cat("out of memory allocating ", size, " bytes (", e.what(), ")");
    }
    throw OutOfMemoryError(cat(what, "; dax held ", stats_.bytes_in_use, " bytes in use here (peak ",
                               stats_.peak_bytes_requested, " requested) and returned its cache of ", cached,
                               " bytes before trying again"));
  }

  void release_cached_locked() {
    for (auto& [key, list] : free_) {
      const auto [shared, size] = key;
      for (void* p : list) {
        raw_deallocate(p, size, shared);
        ++stats_.system_frees;
      }
      stats_.bytes_cached -= static_cast<int64_t>(size * list.size());
      list.clear();
    }
  }

  Raw raw_;
  mutable std::mutex mutex_;
  std::map<std::pair<bool, size_t>, std::vector<void*>> free_;  // by (shared, size class)
  AllocatorStats stats_;
};

/// A block of device memory holding one local shard (or a staging area). Returns the block to
/// its allocator on destruction.
class Buffer {
 public:
  using Release = void (*)(void* owner, void* ptr, size_t bytes, int part);
  using Relabel = void (*)(void* owner, size_t bytes, int from, int to);
  Buffer(void* ptr, size_t bytes, std::shared_ptr<void> owner, Release release, int part = 0,
         Relabel relabel = nullptr)
      : ptr_(ptr), bytes_(bytes), owner_(std::move(owner)), release_(release), relabel_(relabel), part_(part) {}
  ~Buffer() {
    if (ptr_) release_(owner_.get(), ptr_, bytes_, part_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  int part() const { return part_; }
  /// Whether this block lies inside another buffer (make_view): writing it writes that buffer,
  /// so no one may update it in place on the grounds that its handle is the only one.
  bool is_view() const { return view_; }
  /// Counts the block under `part` from now on (a view stays with its parent's part).
  void relabel(int part) {
    if (!relabel_ || part == part_) return;
    relabel_(owner_.get(), bytes_, part_, part);
    part_ = part;
  }

 private:
  void* ptr_;
  size_t bytes_;
  std::shared_ptr<void> owner_;  // keeps the allocator alive while the block is out
  Release release_;
  Relabel relabel_;
  int part_;
  bool view_ = false;
  friend std::shared_ptr<Buffer> make_view(const std::shared_ptr<Buffer>&, size_t, size_t);
};

/// A buffer from `allocator` that goes back to it when released, counted under this thread's
/// memory part; `Shared`: in memory the node's other processes can map (see allocate).
template <bool Shared, class Allocator>
std::shared_ptr<Buffer> make_block(const std::shared_ptr<Allocator>& allocator, size_t bytes) {
  const int part = current_memory_part();
  void* p = allocator->allocate(bytes, Shared, part);
  return std::make_shared<Buffer>(
      p, bytes, allocator,
      [](void* owner, void* ptr, size_t n, int part) { static_cast<Allocator*>(owner)->deallocate(ptr, n, Shared, part); },
      part, [](void* owner, size_t n, int from, int to) { static_cast<Allocator*>(owner)->relabel(n, from, to); });
}

template <class Allocator>
std::shared_ptr<Buffer> make_buffer(const std::shared_ptr<Allocator>& allocator, size_t bytes) {
  return make_block<false>(allocator, bytes);
}

template <class Allocator>
std::shared_ptr<Buffer> make_shared_buffer(const std::shared_ptr<Allocator>& allocator, size_t bytes) {
  return make_block<true>(allocator, bytes);
}

/// A view of `bytes` bytes at `offset` inside `parent`, keeping it alive; frees nothing itself.
inline std::shared_ptr<Buffer> make_view(const std::shared_ptr<Buffer>& parent, size_t offset, size_t bytes) {
  auto view = std::make_shared<Buffer>(static_cast<char*>(parent->data()) + offset, bytes, parent,
                                       [](void*, void*, size_t, int) {});
  view->view_ = true;
  return view;
}

}  // namespace dax::detail
