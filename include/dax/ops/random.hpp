// dax::random: JAX-style keys and counter-based sampling. Element i of a random array takes the
// Philox-4x32-10 output of counter (i, stream...) under the key, so values do not depend on the
// sharding, the rank count or the backend. Each device fills its own piece; nothing moves.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <dax/array/creation.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/core/float16.hpp>
#include <dax/core/macros.hpp>
#include <dax/core/philox.hpp>

namespace dax::random {

/// A generator state: two 32-bit words, as jax.random.key.
struct Key {
  uint32_t k0 = 0, k1 = 0;
  friend bool operator==(const Key&, const Key&) = default;
};

inline Key key(uint64_t seed) { return Key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}; }

/// `n` independent keys derived from `k` (counter space 0xFFFFFFFF, disjoint from sampling).
inline std::vector<Key> split(const Key& k, int n = 2) {
  std::vector<Key> out;
  for (int i = 0; i < n; ++i) {
    const auto r = detail::philox4x32_10({{static_cast<uint32_t>(i), 0, 0, 0xFFFFFFFFu}}, k.k0, k.k1);
    out.push_back(Key{r.c[0], r.c[1]});
  }
  return out;
}

/// A new key from `k` and the integer `data` (jax.random.fold_in): the same (key, data) gives the
/// same key on every rank, different data give independent keys. Its counter (data, 0, 0,
/// 0xFFFFFFFE) lies outside both split's counters (word 3 = 0xFFFFFFFF) and sampling's (word 3 = 0
/// for every element index below 2^64), so a folded key never repeats a split key's or a sample's
/// Philox block. Typical use: one key per step or per rank, fold_in(key, step).
inline Key fold_in(const Key& k, uint32_t data) {
  const auto r = detail::philox4x32_10({{data, 0, 0, 0xFFFFFFFEu}}, k.k0, k.k1);
  return Key{r.c[0], r.c[1]};
}

namespace detail {

/// The four words for global element `index`.
DAX_HOST_DEVICE inline dax::detail::Philox4x32 bits(const Key& k, uint64_t index) {
  return dax::detail::philox4x32_10(
      {{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, 0}}, k.k0, k.k1);
}

/// Uniform in [0, 1) from one word (half: 11 bits, bfloat16: 8, float: 24) or two (double: 53
/// bits): as many bits as T's significand holds, so every value is exact and below 1.
template <class T>
DAX_HOST_DEVICE dax::detail::compute_t<T> unit(const dax::detail::Philox4x32& r, int word) {
  if constexpr (std::is_same_v<T, half>) {
    return static_cast<float>(r.c[word] >> 21) * (1.0f / 2048.0f);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return static_cast<float>(r.c[word] >> 24) * (1.0f / 256.0f);
  } else if constexpr (sizeof(T) == 4) {
    return static_cast<T>(r.c[word] >> 8) * static_cast<T>(1.0 / 16777216.0);
  } else {
    const uint64_t x = (static_cast<uint64_t>(r.c[word]) << 21) ^ (r.c[word + 1] >> 11);
    return static_cast<T>(static_cast<double>(x & ((1ULL << 53) - 1)) * (1.0 / 9007199254740992.0));
  }
}

/// Fills this rank's piece with f(global element index), on its backend.
template <class T, class F>
DistArray<T> sample(const Shape& shape, const NamedSharding& sharding, F f) {
  return dax::detail::make_local<T>(shape, sharding, [&](T* data, const Box& index) {
    dax::detail::dev::generate(data, shape, index, f);
  });
}

// One function object per distribution (kernels take them by value).
template <class T>
struct Uniform {
  Key key;
  T lo, hi;
  DAX_HOST_DEVICE T operator()(uint64_t i) const {
    using C = dax::detail::compute_t<T>;
    const C low = static_cast<C>(lo), high = static_cast<C>(hi);
    return static_cast<T>(low + (high - low) * unit<T>(bits(key, i), 0));
  }
};

/// Box-Muller on the element's own words.
template <class T>
struct Normal {
  Key key;
  T mean, stddev;
  DAX_HOST_DEVICE T operator()(uint64_t i) const {
    const auto r = bits(key, i);
    const double u1 = 1.0 - unit<double>(r, 0), u2 = unit<double>(r, 2);
    return static_cast<T>(static_cast<double>(mean) + static_cast<double>(stddev) * std::sqrt(-2.0 * std::log(u1)) *
                                                         std::cos(6.283185307179586 * u2));
  }
};

struct Bernoulli {
  Key key;
  double p;
  DAX_HOST_DEVICE bool operator()(uint64_t i) const { return unit<double>(bits(key, i), 0) < p; }
};

}  // namespace detail

/// Uniform in [lo, hi).
template <class T>
DistArray<T> uniform(const Key& k, const Shape& shape, const NamedSharding& sharding, T lo = T(0), T hi = T(1)) {
  return detail::sample<T>(shape, sharding, detail::Uniform<T>{k, lo, hi});
}

/// Standard normal (Box-Muller on the element's own words), times `stddev`, plus `mean`.
template <class T>
DistArray<T> normal(const Key& k, const Shape& shape, const NamedSharding& sharding, T mean = T(0), T stddev = T(1)) {
  return detail::sample<T>(shape, sharding, detail::Normal<T>{k, mean, stddev});
}

/// True with probability p.
inline DistArray<bool> bernoulli(const Key& k, double p, const Shape& shape, const NamedSharding& sharding) {
  return detail::sample<bool>(shape, sharding, detail::Bernoulli{k, p});
}

}  // namespace dax::random
