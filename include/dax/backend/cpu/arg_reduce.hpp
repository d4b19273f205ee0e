// argmax/argmin kernel: the best element along one dimension of a local piece, seen as
// (outer, len, inner) row-major.
#pragma once

#include <cstdint>

#include <dax/backend/arg_prefers.hpp>

namespace dax::detail::cpu {

/// For every (o, i): index[o * inner + i] = the j in [0, len) whose element in[(o * len + j) * inner
/// + i] ranks above every other by prefers(better, ...) (a NaN above any number; the first on
/// ties), value[...] = that element; index -1 (value T()) when len == 0.
template <class T, class Better>
void arg_reduce(const T* in, int64_t outer, int64_t len, int64_t inner, Better better, T* value, int64_t* index) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const T* row = in + o * len * inner + i;
      int64_t best = len > 0 ? 0 : -1;
      for (int64_t j = 1; j < len; ++j)
        if (prefers(better, row[j * inner], row[best * inner])) best = j;
      index[o * inner + i] = best;
      value[o * inner + i] = best >= 0 ? row[best * inner] : T();
    }
}

}  // namespace dax::detail::cpu
