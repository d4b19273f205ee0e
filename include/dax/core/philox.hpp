// Philox-4x32-10 (Salmon et al., SC'11): a counter-based generator, so the random bits of element
// i depend only on (key, i). dax's random arrays are therefore identical for every sharding and
// rank count, and (with the same function in kernels) on CPU and GPU alike.
#pragma once

#include <array>
#include <cstdint>

#include <dax/core/macros.hpp>

namespace dax::detail {

DAX_HOST_DEVICE inline void mulhilo32(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

struct Philox4x32 {
  uint32_t c[4];
};

/// Ten rounds of Philox-4x32 on `counter` with `key`.
DAX_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(0xD2511F53u, counter.c[0], hi0, lo0);
    mulhilo32(0xCD9E8D57u, counter.c[2], hi1, lo1);
    counter = Philox4x32{{hi1 ^ counter.c[1] ^ k0, lo1, hi0 ^ counter.c[3] ^ k1, lo0}};
  }
  return counter;
}

}  // namespace dax::detail
