// Host memory that the other processes of a node can map, so one process can write straight into
// another's buffer with ordinary (streaming) stores instead of a kernel copy. Why: a strided
// exchange's kernel copy (process_vm_writev / readv, comm/cma_exchange.hpp) moves one run after
// another and reaches about 0.7 of a contiguous copy on 2 KiB runs, while the same runs written in
// user space, two side by side with streaming stores, keep up with raw MPI on contiguous bytes
// (docs/performance.md, "Host memory and the copies of a reshard").
//
// Each block is its own memfd (Linux), mapped shared. A peer maps it by opening the owner's
// /proc/<pid>/fd/<fd> (ptrace read permission, which Yama does not restrict: wherever cross-memory
// attach works, this does), checks that the file it opened is the block (inode and size), and
// keeps the mapping in a small cache keyed by (process, block number); block numbers are never
// reused within a process.
// When the owner gives a block back to the system it punches the file empty first, so a peer's
// stale mapping holds no memory, only address space, until the cache lets it go. Only the
// exchange's receive pieces come from here (the backend's allocator asks for them): shared memory
// gets 4 KiB pages on most systems (shmem transparent huge pages are off by default), which would
// slow MPI's own large transfers for every other buffer.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#if defined(__linux__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

#include <dax/core/env.hpp>

namespace dax::detail {

/// Whether exchanges may write into peers' receive pieces through shared mappings: on unless
/// DAX_PEER_WRITES=0 (then strided exchanges on a node keep the kernel copy). Read once.
inline bool peer_writes_enabled() {
  static const bool enabled = !env_turned_off("DAX_PEER_WRITES");
  return enabled;
}

/// Where a pointer lies in one of this process's shareable blocks.
struct SharedPlace {
  int64_t block = 0;   // the block's number in this process (never reused)
  int64_t fd = -1;     // its memfd here
  int64_t length = 0;  // its mapped length
  int64_t inode = 0;   // its file's inode, which a peer checks after opening it
  int64_t offset = 0;  // of the pointer from the block's start
};

/// This process's shareable blocks: made, found by address, and given back.
class NodeSharedBlocks {
 public:
  static NodeSharedBlocks& process() {
    static auto* blocks = new NodeSharedBlocks();  // never destroyed: buffers may outlive statics
    return *blocks;
  }

  /// A new block of at least `bytes` (whole pages), or nullptr where the system has no memfd or
  /// refuses one (the caller falls back to private memory).
  void* create(size_t bytes) {
#if defined(__linux__) && defined(MFD_CLOEXEC)
    {
      std::lock_guard lock(mutex_);
      if (blocks_.size() + being_made_ >= kMostBlocks) return nullptr;
      ++being_made_;
    }
    struct Done {  // the slot taken above, given up however this returns
      NodeSharedBlocks& self;
      ~Done() {
        std::lock_guard lock(self.mutex_);
        --self.being_made_;
      }
    } done{*this};
    const size_t length = (bytes + kPage - 1) / kPage * kPage;
    const int fd = memfd_create("dax-host-block", MFD_CLOEXEC);
    if (fd < 0) return nullptr;
    struct stat file {};
    if (ftruncate(fd, static_cast<off_t>(length)) != 0 || fstat(fd, &file) != 0) {
      close(fd);
      return nullptr;
    }
    // Populated now: the pages are the block's for its life (the caching allocator reuses it), and
    // one batch of faults is cheaper than faulting 4 KiB pages one by one in the first exchange.
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      close(fd);
      return nullptr;
    }
    std::lock_guard lock(mutex_);
    blocks_[reinterpret_cast<uintptr_t>(p)] = {++made_, fd, static_cast<int64_t>(length),
                                               static_cast<int64_t>(file.st_ino), 0};
    return p;
#else
    (void)bytes;
    return nullptr;
#endif
  }

  /// Gives a block from create() back to the system; false when `p` is not one.
  bool destroy(void* p) {
#if defined(__linux__) && defined(MFD_CLOEXEC)
    SharedPlace place;
    {
      std::lock_guard lock(mutex_);
      auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
      if (it == blocks_.end()) return false;
      place = it->second;
      blocks_.erase(it);
    }
    // Empty the file first: a peer that still maps it then holds no memory through it.
    fallocate(static_cast<int>(place.fd), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, place.length);
    munmap(p, static_cast<size_t>(place.length));
    close(static_cast<int>(place.fd));
    return true;
#else
    (void)p;
    return false;
#endif
  }

  /// The block holding [p, p + bytes), if one of this process's shareable blocks does.
  std::optional<SharedPlace> find(const void* p, size_t bytes) const {
    const auto at = reinterpret_cast<uintptr_t>(p);
    std::lock_guard lock(mutex_);
    auto it = blocks_.upper_bound(at);
    if (it == blocks_.begin()) return std::nullopt;
    --it;
    const uintptr_t start = it->first;
    if (at + bytes > start + static_cast<uintptr_t>(it->second.length)) return std::nullopt;
    SharedPlace place = it->second;
    place.offset = static_cast<int64_t>(at - start);
    return place;
  }

  int64_t live() const {
    std::lock_guard lock(mutex_);
    return static_cast<int64_t>(blocks_.size());
  }

 private:
  static constexpr size_t kPage = 4096;
  // Each block holds a file descriptor for its life; past this many, receive pieces are ordinary
  // memory (the kernel copies into them) rather than crowd the process's descriptor limit.
  static constexpr size_t kMostBlocks = 256;
  mutable std::mutex mutex_;
  std::map<uintptr_t, SharedPlace> blocks_;  // by start address; offset unused here
  size_t being_made_ = 0;                    // slots taken by create() calls under way
  int64_t made_ = 0;
};

/// Other processes' shareable blocks mapped into this one, most recently used first. A block is
/// mapped on its first use and kept: the caching allocators on both sides reuse blocks, so a loop
/// of the same exchanges maps nothing after its first step. map() never unmaps (an exchange holds
/// the pointers it got until its copies are done); trim() does, after them.
class PeerMappings {
 public:
  static constexpr size_t kKept = 64;  // mappings kept past trim(), beyond those last used

  static PeerMappings& process() {
    static auto* mappings = new PeerMappings();
    return *mappings;
  }

  /// The start of process `pid`'s block (`place`: its number, its memfd there, length and inode)
  /// in this process, or nullptr when it cannot be mapped (the caller copies another way). Only
  /// called while the owner keeps the block alive and its memfd open (inside an exchange it takes
  /// part in).
  char* map(int64_t pid, const SharedPlace& place) {
#if defined(__linux__)
    std::lock_guard lock(mutex_);
    const Key key{pid, place.block};
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->key != key) continue;
      kept_.splice(kept_.begin(), kept_, it);
      return kept_.front().start;
    }
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(place.fd);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return nullptr;
    // The file must be the block: a /proc of another pid namespace could name another process.
    struct stat file {};
    void* p = MAP_FAILED;
    if (fstat(fd, &file) == 0 && static_cast<int64_t>(file.st_ino) == place.inode && file.st_size >= place.length)
      p = mmap(nullptr, static_cast<size_t>(place.length), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);  // the mapping keeps the file
    if (p == MAP_FAILED) return nullptr;
    kept_.push_front({key, static_cast<char*>(p), static_cast<size_t>(place.length)});
    ++made_;
    return kept_.front().start;
#else
    (void)pid, (void)place;
    return nullptr;
#endif
  }

  /// Unmaps the least recently used mappings beyond the `in_use` most recent ones (what the
  /// caller has just used) and kKept more.
  void trim(size_t in_use) {
#if defined(__linux__)
    std::lock_guard lock(mutex_);
    while (kept_.size() > in_use + kKept) {
      munmap(kept_.back().start, kept_.back().length);
      kept_.pop_back();
    }
#else
    (void)in_use;
#endif
  }

  int64_t made() const { return made_; }  // mappings made so far (for tests)
  size_t kept() const {
    std::lock_guard lock(mutex_);
    return kept_.size();
  }

 private:
  using Key = std::pair<int64_t, int64_t>;
  struct Mapping {
    Key key;
    char* start;
    size_t length;
  };
  mutable std::mutex mutex_;
  std::list<Mapping> kept_;
  int64_t made_ = 0;
};

}  // namespace dax::detail
