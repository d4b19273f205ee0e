// Wide loads and stores for memory-bound kernels: V consecutive elements of any trivially
// copyable type moved as one aligned access (16 bytes for 4 floats: one LDG.128 instead of four
// LDG.32), and a warp shuffle for any value of up to 8 bytes. Callers check alignment on the host
// (aligned_for) and fall back to V = 1 where it does not hold.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace dax::detail::cuda {

/// V elements of T as one aligned unit.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

/// Elements per 16-byte access of T.
template <class T>
inline constexpr int pack_width = sizeof(T) >= 16 ? 1 : static_cast<int>(16 / sizeof(T));

/// Whether `p` may be read or written as Pack<T, V>.
template <class T, int V>
inline bool aligned_for(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % (sizeof(T) * V) == 0;
}

#if defined(__CUDACC__)
template <class T, int V>
__device__ inline Pack<T, V> load_pack(const T* p) {
  if constexpr (V == 1) {
    return Pack<T, 1>{{*p}};
  } else {
    return *reinterpret_cast<const Pack<T, V>*>(p);
  }
}

template <class T, int V>
__device__ inline void store_pack(T* p, const Pack<T, V>& x) {
  if constexpr (V == 1) {
    *p = x.v[0];
  } else {
    *reinterpret_cast<Pack<T, V>*>(p) = x;
  }
}

/// __shfl_down_sync for any trivially copyable value of up to 8 bytes (a bool, a short, a double).
template <class T>
__device__ inline T shuffle_down(const T& value, int delta) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffle_down: up to 8 trivially copyable bytes");
  unsigned words[2] = {0u, 0u};
  memcpy(words, &value, sizeof(T));
  words[0] = __shfl_down_sync(0xffffffffu, words[0], delta);
  if constexpr (sizeof(T) > 4) words[1] = __shfl_down_sync(0xffffffffu, words[1], delta);
  T out = value;
  memcpy(&out, words, sizeof(T));
  return out;
}
#endif

}  // namespace dax::detail::cuda
