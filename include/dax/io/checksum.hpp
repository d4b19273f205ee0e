// The checkpoint checksum: a sum mod 2^64, over every element of the array, of splitmix64's
// finalizer applied to (the element's raw bits + its global row-major index * a golden-ratio step).
// Each rank sums the terms of its own piece and one MPI_Allreduce adds the pieces, so a checkpoint
// is verified without gathering it, whatever its sharding. Vector kernels (AVX2, AVX-512, chosen at
// run time on x86-64) compute exactly the same sum as the scalar definition. Pure: no MPI.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include <dax/core/shape.hpp>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define DAX_CHECKSUM_X86 1
#include <immintrin.h>
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
template <class T>
uint64_t bits_of(const T& value) {
  static_assert(sizeof(T) <= 8);
  if constexpr (sizeof(T) == 8) {
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
// Eight (AVX-512) or four (AVX2) elements per step, in 64-bit lanes; 4-byte elements are
// zero-extended as bits_of does. AVX2 has no 64-bit multiply: it is built from 32-bit halves.

template <class T>
__attribute__((target("avx512f,avx512dq"))) inline uint64_t run_checksum_avx512(const T* data, int64_t count,
                                                                              int64_t first) {
  constexpr int Bytes = sizeof(T);
  const __m512i c1 = _mm512_set1_epi64(static_cast<long long>(0xbf58476d1ce4e5b9ull));
  const __m512i c2 = _mm512_set1_epi64(static_cast<long long>(0x94d049bb133111ebull));
  const __m512i step = _mm512_set1_epi64(static_cast<long long>(8 * index_step));
  const __mmask8 all = 0xff;
  const __m512i lane_index = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
  __m512i key = _mm512_mullo_epi64(_mm512_add_epi64(_mm512_set1_epi64(first), lane_index),
                                   _mm512_set1_epi64(static_cast<long long>(index_step)));
  __m512i acc = _mm512_setzero_si512();
  const char* p = reinterpret_cast<const char*>(data);
  int64_t k = 0;
  for (; k + 8 <= count; k += 8, p += 8 * Bytes) {
    __m512i z;
    // (The maskz forms with every lane kept: GCC 12 warns of "uninitialized" values inside the
    // unmasked ones at -O1.)
    if constexpr (Bytes == 4)
      z = _mm512_maskz_cvtepu32_epi64(all, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    else z = _mm512_loadu_si512(p);
    z = _mm512_add_epi64(z, key);
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_maskz_srli_epi64(all, z, 30)), c1);
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_maskz_srli_epi64(all, z, 27)), c2);
    acc = _mm512_add_epi64(acc, _mm512_xor_si512(z, _mm512_maskz_srli_epi64(all, z, 31)));
    key = _mm512_add_epi64(key, step);
  }
  uint64_t lanes[8];
  _mm512_storeu_si512(lanes, acc);
  uint64_t sum = 0;
  for (uint64_t lane : lanes) sum += lane;
  return sum + run_checksum_scalar(data + k, count - k, first + k);
}

__attribute__((target("avx2"))) inline __m256i mul64_avx2(__m256i a, __m256i b) {
  const __m256i low = _mm256_mul_epu32(a, b);
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                         _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
  return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
}

template <class T>
__attribute__((target("avx2"))) inline uint64_t run_checksum_avx2(const T* data, int64_t count, int64_t first) {
  constexpr int Bytes = sizeof(T);
  const __m256i c1 = _mm256_set1_epi64x(static_cast<long long>(0xbf58476d1ce4e5b9ull));
  const __m256i c2 = _mm256_set1_epi64x(static_cast<long long>(0x94d049bb133111ebull));
  const __m256i step = _mm256_set1_epi64x(static_cast<long long>(4 * index_step));
  const uint64_t k0 = static_cast<uint64_t>(first) * index_step;
  __m256i key = _mm256_setr_epi64x(static_cast<long long>(k0), static_cast<long long>(k0 + index_step),
                                   static_cast<long long>(k0 + 2 * index_step),
                                   static_cast<long long>(k0 + 3 * index_step));
  __m256i acc = _mm256_setzero_si256();
  const char* p = reinterpret_cast<const char*>(data);
  int64_t k = 0;
  for (; k + 4 <= count; k += 4, p += 4 * Bytes) {
    __m256i z;
    if constexpr (Bytes == 4) z = _mm256_cvtepu32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    else z = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    z = _mm256_add_epi64(z, key);
    z = mul64_avx2(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), c1);
    z = mul64_avx2(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), c2);
    acc = _mm256_add_epi64(acc, _mm256_xor_si256(z, _mm256_srli_epi64(z, 31)));
    key = _mm256_add_epi64(key, step);
  }
  uint64_t lanes[4];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), acc);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + run_checksum_scalar(data + k, count - k, first + k);
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
