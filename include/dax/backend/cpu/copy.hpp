// Copying (or adding) a rectangular region between two row-major pieces of a global array: the
// one pass that packs and unpacks strided pieces for resharding. Trailing dimensions that are full
// in both pieces merge into one contiguous run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <dax/backend/copy_mode.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail::cpu {

/// dst[region] (=|+=) src[region], where src holds the piece `src_block` of the global array and
/// dst the piece `dst_block`, both row-major; `region` lies inside both.
template <class T>
void copy_region(const T* src, const Box& src_block, T* dst, const Box& dst_block, const Box& region,
                 CopyMode mode = CopyMode::assign) {
  const size_t n = region.size();
  if (numel(region) == 0) return;
  if (n == 0) {
    *dst = mode == CopyMode::add ? *dst + *src : *src;
    return;
  }
  std::vector<int64_t> src_stride(n), dst_stride(n), extent(n);
  int64_t s = 1, d = 1, src_off = 0, dst_off = 0;
  for (size_t i = n; i-- > 0;) {
    src_stride[i] = s;
    dst_stride[i] = d;
    extent[i] = region[i].size();
    src_off += (region[i].start - src_block[i].start) * s;
    dst_off += (region[i].start - dst_block[i].start) * d;
    s *= src_block[i].size();
    d *= dst_block[i].size();
  }
  // Merge trailing dimensions that are full in both pieces into one contiguous run.
  size_t inner = n - 1;
  int64_t run = extent[inner];
  while (inner > 0 && extent[inner] == src_block[inner].size() && extent[inner] == dst_block[inner].size()) {
    --inner;
    run *= extent[inner];
  }
  std::vector<int64_t> index(inner, 0);
  const T* from = src + src_off;
  T* to = dst + dst_off;
  while (true) {
    int64_t so = 0, dof = 0;
    for (size_t i = 0; i < inner; ++i) {
      so += index[i] * src_stride[i];
      dof += index[i] * dst_stride[i];
    }
    if (mode == CopyMode::assign) {
      std::copy(from + so, from + so + run, to + dof);
    } else {
      for (int64_t k = 0; k < run; ++k) to[dof + k] += from[so + k];
    }
    size_t i = inner;
    while (i > 0 && ++index[i - 1] == extent[i - 1]) index[--i] = 0;
    if (i == 0) break;
  }
}

template <class T>
void fill(T* data, int64_t count, T value) {
  std::fill(data, data + count, value);
}

}  // namespace dax::detail::cpu
