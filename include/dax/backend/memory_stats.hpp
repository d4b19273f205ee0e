// dax::memory_stats: the bytes this rank's device holds in dax buffers now and at its peak (the
// counterpart of jax's Device.memory_stats() "bytes_in_use" / "peak_bytes_in_use"), counted by the
// backend's caching allocator as buffers are handed out and given back. Every array piece and every
// temporary a kernel or a reshard allocates is counted; host std::vectors and MPI's own buffers
// are not. On the meta backend (simulated devices) the buffers hold no data but are counted the same.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <dax/backend/buffer.hpp>
#include <dax/backend/device_ops.hpp>

namespace dax {

/// One memory part's bytes (backend/memory_parts.hpp): in use now, and when the peak was reached.
struct MemoryPartBytes {
  std::string name;
  int64_t bytes_in_use = 0;
  int64_t at_peak = 0;
  friend bool operator==(const MemoryPartBytes&, const MemoryPartBytes&) = default;
};

struct MemoryStats {
  int64_t bytes_in_use = 0;       // live buffers, in the bytes asked for
  int64_t peak_bytes_in_use = 0;  // the most bytes_in_use since the start or reset_peak_memory()
  int64_t bytes_reserved = 0;     // held by the allocator: live blocks rounded to size classes + cached free ones
  int64_t num_allocs = 0;         // buffers handed out since the start
  std::vector<MemoryPartBytes> parts;  // bytes_in_use and the peak by part, "other" first; they sum to both
};

namespace detail {

inline AllocatorStats device_allocator_stats() {
  if (dev::on_meta()) return meta::allocator()->stats();
#if DAX_CUDA_BACKEND
  if (dev::on_gpu()) return cuda::device_allocator()->stats();
#endif
  return cpu::host_allocator()->stats();
}

/// memory_stats().bytes_in_use alone, without the parts' names (the profiler reads it per op).
inline int64_t bytes_in_use() { return device_allocator_stats().bytes_requested; }

}  // namespace detail

/// This rank's device memory as dax's allocator sees it (the CPU backend: host memory of dax
/// buffers; CUDA: device memory, staging in pinned host memory left out).
inline MemoryStats memory_stats() {
  const detail::AllocatorStats s = detail::device_allocator_stats();
  MemoryStats m{s.bytes_requested, s.peak_bytes_requested, s.bytes_in_use + s.bytes_cached, s.requests, {}};
  for (int i = 0; i < detail::memory_part_count(); ++i)
    m.parts.push_back({detail::memory_part_name(i), s.part_bytes[size_t(i)], s.part_bytes_at_peak[size_t(i)]});
  return m;
}

/// Starts a new peak from the bytes in use now (torch.cuda.reset_peak_memory_stats).
inline void reset_peak_memory() {
  if (detail::dev::on_meta()) return detail::meta::allocator()->reset_peak();
#if DAX_CUDA_BACKEND
  if (detail::dev::on_gpu()) return detail::cuda::device_allocator()->reset_peak();
#endif
  detail::cpu::host_allocator()->reset_peak();
}

}  // namespace dax
