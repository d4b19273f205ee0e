// The checkpoint checksum: a sum mod 2^64, over every element of the array, of splitmix64's
// finalizer applied to (the element's raw bits + its global row-major index * a golden-ratio step).
// Each rank sums the terms of its own piece and one MPI_Allreduce adds the pieces, so a checkpoint
// is verified without gathering it, whatever its sharding. Vector kernels (AVX2, AVX-512, chosen at
// run time on x86-64) compute exactly the same sum as the scalar definition. Pure: no MPI.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <dax/core/shape.hpp>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define DAX_CHECKSUM_X86 1
#endif

namespace dax::detail::checkpoint {

/// The splitmix64 finalizer (Stafford's mix 13): a bijection of 64-bit words in which every input
/// bit flips each output bit with probability close to 1/2.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Consecutive indices land far apart before mixing (2^64 / golden ratio, odd).
inline constexpr uint64_t index_step = 0x9e3779b97f4a7c15ull;

/// One element's term of the checksum. mix64 is a bijection, so changing any bits of one element
/// always changes the sum; the index keeps moved or swapped elements from cancelling out.
constexpr uint64_t element_term(uint64_t flat_index, uint64_t bits) { return mix64(bits + flat_index * index_step); }

/// The raw bits of a value, zero-extended (floats are not converted: -0.0, NaN payloads count).
/// A 16-byte value (complex128) folds its high half in through mix64: a change to either half alone
/// always changes the result, one to both escapes with probability 2^-64.
template <class T>
uint64_t bits_of(const T& value) {
  static_assert(sizeof(T) <= 8 || sizeof(T) == 16);
  if constexpr (sizeof(T) == 16) {
    uint64_t b[2];
    std::memcpy(b, &value, 16);
    return b[0] + mix64(b[1]);
  } else if constexpr (sizeof(T) == 8) {
    uint64_t b;
    std::memcpy(&b, &value, 8);
    return b;
  } else if constexpr (sizeof(T) == 4) {
    uint32_t b;
    std::memcpy(&b, &value, 4);
    return b;
  } else if constexpr (sizeof(T) == 2) {
    uint16_t b;
    std::memcpy(&b, &value, 2);
    return b;
  } else {
    uint8_t b;
    std::memcpy(&b, &value, 1);
    return b;
  }
}

/// The checksum's terms for `count` elements at consecutive global flat indices from `first`:
/// the definition, one element at a time.
template <class T>
uint64_t run_checksum_scalar(const T* data, int64_t count, int64_t first) {
  uint64_t sum = 0, key = static_cast<uint64_t>(first) * index_step;
  for (int64_t k = 0; k < count; ++k, key += index_step) sum += mix64(bits_of(data[k]) + key);
  return sum;
}

#ifdef DAX_CHECKSUM_X86
// Eight (AVX-512) or four (AVX2) elements per step, in 64-bit lanes of the compiler's vector
// extensions (GCC's and clang's), not <immintrin.h>: its 36k lines were read by every program that
// includes dax. The lanes' body is inlined into the two functions below, whose target attributes
// let the compiler use the wide instructions (on AVX2 it builds the 64-bit multiply from 32-bit
// halves). No vector is passed by value, so no ABI depends on the target.
typedef uint64_t checksum_u64x4 __attribute__((vector_size(32)));
typedef uint64_t checksum_u64x8 __attribute__((vector_size(64)));

/// splitmix64's finalizer on each lane, in place (by reference: no vector passed by value).
template <class Words>
[[gnu::always_inline]] inline void mix_lanes(Words& z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
}

template <int Lanes, class T>
[[gnu::always_inline]] inline uint64_t run_checksum_lanes(const T* data, int64_t count, int64_t first) {
  using Words = std::conditional_t<Lanes == 8, checksum_u64x8, checksum_u64x4>;
  constexpr int Bytes = sizeof(T);
  // 8-byte elements: one per lane. 4-byte elements: two per 64-bit word, the even-indexed one in
  // the low half (little-endian), split apart with a mask and a shift rather than widened.
  constexpr int PerStep = Bytes == 4 ? 2 * Lanes : Lanes;
  constexpr uint64_t stride = Bytes == 4 ? 2 : 1;
  Words key = {}, acc = {};
  for (int lane = 0; lane < Lanes; ++lane) key[lane] = (static_cast<uint64_t>(first) + stride * lane) * index_step;
  const uint64_t step = PerStep * index_step;
  const char* p = reinterpret_cast<const char*>(data);
  int64_t k = 0;
  for (; k + PerStep <= count; k += PerStep, p += PerStep * Bytes) {
    Words z;
    std::memcpy(&z, p, sizeof z);
    if constexpr (Bytes == 4) {
      Words even = (z & 0xffffffffull) + key, odd = (z >> 32) + (key + index_step);
      mix_lanes(even);
      mix_lanes(odd);
      acc += even + odd;
    } else {
      z += key;
      mix_lanes(z);
      acc += z;
    }
    key += step;
  }
  uint64_t sum = 0;
  for (int lane = 0; lane < Lanes; ++lane) sum += acc[lane];
  return sum + run_checksum_scalar(data + k, count - k, first + k);
}

template <class T>
__attribute__((target("avx512f,avx512dq"))) inline uint64_t run_checksum_avx512(const T* data, int64_t count,
                                                                              int64_t first) {
  return run_checksum_lanes<8>(data, count, first);
}

template <class T>
__attribute__((target("avx2"))) inline uint64_t run_checksum_avx2(const T* data, int64_t count, int64_t first) {
  return run_checksum_lanes<4>(data, count, first);
}

/// The widest kernel this CPU runs: 2 = AVX-512 (F and DQ), 1 = AVX2, 0 = scalar.
inline int checksum_kernel() {
  static const int kernel = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") ? 2
                            : __builtin_cpu_supports("avx2")                                          ? 1
                                                                                                      : 0;
  return kernel;
}
#endif

/// The checksum's terms for `count` elements at consecutive global flat indices from `first`.
template <class T>
uint64_t run_checksum(const T* data, int64_t count, int64_t first) {
#ifdef DAX_CHECKSUM_X86
  if constexpr (sizeof(T) == 4 || sizeof(T) == 8) {
    switch (checksum_kernel()) {
      case 2: return run_checksum_avx512(data, count, first);
      case 1: return run_checksum_avx2(data, count, first);
      default: break;
    }
  }
#endif
  return run_checksum_scalar(data, count, first);
}

/// The checksum's terms for one piece: `data` is the row-major region `box` of a global array of
/// `shape`. Summed mod 2^64 over pieces that tile the array (each element once), it is the
/// checksum of the whole array, whatever the tiling.
template <class T>
uint64_t piece_checksum(const T* data, const Shape& shape, const Box& box) {
  if (numel(box) == 0) return 0;
  const size_t n = shape.size();
  if (n == 0) return element_term(0, bits_of(data[0]));
  // The longest contiguous run: the last dimension, and the ones before it while those after are full.
  size_t d = n - 1;
  int64_t run = box[d].size();
  while (d > 0 && box[d].start == 0 && box[d].stop == shape[d]) {
    --d;
    run *= box[d].size();
  }
  int64_t stride = 1;  // elements per index of dimension d
  for (size_t i = d + 1; i < n; ++i) stride *= shape[i];
  std::vector<int64_t> idx(d);
  for (size_t i = 0; i < d; ++i) idx[i] = box[i].start;
  uint64_t sum = 0;
  const T* p = data;
  while (true) {
    int64_t flat = 0;
    for (size_t i = 0; i < d; ++i) flat = flat * shape[i] + idx[i];
    flat = (flat * shape[d] + box[d].start) * stride;
    sum += run_checksum(p, run, flat);
    p += run;
    size_t i = d;
    while (i > 0 && ++idx[i - 1] == box[i - 1].stop) {
      idx[i - 1] = box[i - 1].start;
      --i;
    }
    if (i == 0) break;
  }
  return sum;
}

}  // namespace dax::detail::checkpoint
