// Permuting the dimensions of a local piece: out[i_perm[0], i_perm[1], ...] = in[i_0, i_1, ...].
#pragma once

#include <cstdint>
#include <vector>

#include <dax/core/shape.hpp>

namespace dax::detail::cpu {

/// out has shape in_shape[perm[0]], in_shape[perm[1]], ...
template <class T>
void permute(const T* in, const Shape& in_shape, const std::vector<int>& perm, T* out) {
  const size_t n = in_shape.size();
  const int64_t count = numel(in_shape);
  if (count == 0) return;
  std::vector<int64_t> in_stride(n, 1);
  for (size_t i = n; i-- > 1;) in_stride[i - 1] = in_stride[i] * in_shape[i];
  Shape out_shape(n);
  std::vector<int64_t> step(n);  // stride in `in` of each output dimension
  for (size_t i = 0; i < n; ++i) {
    out_shape[i] = in_shape[perm[i]];
    step[i] = in_stride[perm[i]];
  }
  std::vector<int64_t> idx(n, 0);
  int64_t src = 0;
  for (int64_t o = 0; o < count; ++o) {
    out[o] = in[src];
    for (size_t d = n; d-- > 0;) {
      src += step[d];
      if (++idx[d] < out_shape[d]) break;
      src -= step[d] * idx[d];
      idx[d] = 0;
    }
  }
}

}  // namespace dax::detail::cpu
