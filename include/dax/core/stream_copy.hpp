// Copies that write with non-temporal (streaming) stores, for large copies whose destination is
// written once and read later by someone else: a reshard's local part on the CPU backend, and the
// runs one process writes into another's memory on the same node. Plain host code, no backend.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace dax::detail {

/// Copies at least this large (bytes in all) write with streaming stores: the destination is far
/// larger than a core's cache and written once, so ordinary stores would first read every line of
/// it (on this project's x86 machine 1.2-1.4x the time of the streamed copy, whether the
/// destination's runs are strided or not). glibc's memcpy switches to them only past its own
/// threshold, which virtual machines often set from a reported cache of hundreds of MiB.
inline constexpr int64_t kStreamingCopyFrom = int64_t(4) << 20;

#if defined(__SSE2__)
/// 64 bytes from `s` to `d` (16-byte aligned) with non-temporal stores.
inline void stream_64(char* d, const char* s) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
  const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
  _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
  _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
  _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
  _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
}
#endif

/// `bytes` from `src` to `dst` with non-temporal stores where the target has them: 16-byte
/// aligned blocks of 64 bytes streamed, the unaligned head and the tail copied as usual. The
/// caller fences (stream_fence) before anyone else reads `dst`.
inline void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 64; d += 64, s += 64, bytes -= 64) stream_64(d, s);
  std::memcpy(d, s, bytes);
#else
  std::memcpy(dst, src, bytes);
#endif
}

/// How many runs of a strided source copy_region streams side by side. On this project's x86
/// machine (AMD EPYC, Zen 3), single-core copies of half rows (1-16 KiB runs, 4000 B to 64 KiB
/// strides, medians of 25-31 alternated runs): two runs side by side copied 1.0-1.25x as fast as one
/// after another; three or more could collapse to 0.25-0.6 of one-after-another speed, worst at
/// power-of-two strides, where every stream's loads and streaming stores fall on the same cache
/// sets and the same low address bits. A contiguous source gains nothing: its runs follow on, one
/// stream already.
inline constexpr int kRunsSideBySide = 2;

/// Copies `count` runs of `bytes` each, src[k] to dst[k], side by side: kRunsSideBySide runs at a
/// time, 64 bytes of each in turn, with streaming stores. Read one after another, runs spread over
/// memory stall at the start of each while the prefetcher picks the new stream up; read side by
/// side, that many streams are in flight at once. Each run's head up to a cache-line boundary and
/// its tail are copied alone, so every streamed block fills one whole line. The caller fences.
inline void stream_copy_side_by_side(char* const* dst, const char* const* src, int count, size_t bytes) {
#if defined(__SSE2__)
  for (int first = 0; first < count; first += kRunsSideBySide) {
    const int group = std::min(count - first, kRunsSideBySide);
    char* const* to = dst + first;
    const char* const* from = src + first;
    size_t head[kRunsSideBySide];
    size_t blocks = bytes / 64;
    for (int k = 0; k < group; ++k) {
      head[k] = std::min(bytes, (64 - reinterpret_cast<uintptr_t>(to[k]) % 64) % 64);
      std::memcpy(to[k], from[k], head[k]);
      blocks = std::min(blocks, (bytes - head[k]) / 64);
    }
    for (size_t b = 0; b < blocks; ++b) {
      for (int k = 0; k < group; ++k) stream_64(to[k] + head[k] + 64 * b, from[k] + head[k] + 64 * b);
    }
    for (int k = 0; k < group; ++k) {
      const size_t done = head[k] + 64 * blocks;
      stream_copy(to[k] + done, from[k] + done, bytes - done);
    }
  }
#else
  for (int k = 0; k < count; ++k) std::memcpy(dst[k], src[k], bytes);
#endif
}

/// Orders earlier streaming stores before later stores (another thread or process may read next).
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

}  // namespace dax::detail
