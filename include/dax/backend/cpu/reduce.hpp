// Reduction kernel: folds the elements of a local piece along some of its dimensions.
#pragma once

#include <cstdint>
#include <vector>

#include <dax/core/shape.hpp>

namespace dax::detail::cpu {

/// out[j] = op(out[j], Acc(in[i])) for every element i of a piece of shape `shape`, j its index with
/// the dimensions flagged in `reduced` dropped. `out` must hold the identity of op. Acc is In, or
/// a wider type to accumulate in (float for the 16-bit types).
template <class In, class Acc, class Op>
void reduce_dims(const In* in, const Shape& shape, const std::vector<bool>& reduced, Acc* out, Op&& op) {
  const int64_t count = numel(shape);
  if (count == 0) return;
  const size_t n = shape.size();
  std::vector<int64_t> out_stride(n, 0), idx(n, 0);
  int64_t s = 1;
  for (size_t i = n; i-- > 0;) {
    if (reduced[i]) continue;
    out_stride[i] = s;
    s *= shape[i];
  }
  int64_t o = 0;
  for (int64_t i = 0; i < count; ++i) {
    out[o] = op(out[o], static_cast<Acc>(in[i]));
    for (size_t d = n; d-- > 0;) {  // next index, keeping the output offset in step
      o += out_stride[d];
      if (++idx[d] < shape[d]) break;
      o -= out_stride[d] * idx[d];
      idx[d] = 0;
    }
  }
}

}  // namespace dax::detail::cpu
