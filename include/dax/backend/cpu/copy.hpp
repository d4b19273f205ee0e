// Copying (or adding) a rectangular region between two row-major pieces of a global array: the
// one pass that packs and unpacks strided pieces for resharding. Trailing dimensions that are full
// in both pieces merge into one contiguous run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <dax/backend/copy_mode.hpp>
#include <dax/core/shape.hpp>
#include <dax/core/stream_copy.hpp>

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
  // Streaming only for large copies of runs of a cache line or more. Runs that follow on in the
  // source are read one after another (one stream already); strided ones (one run here, the next
  // a row further on) side by side.
  const int64_t run_bytes = run * static_cast<int64_t>(sizeof(T));
  const bool streaming = std::is_trivially_copyable_v<T> && mode == CopyMode::assign && run_bytes >= 64 &&
                         numel(region) * static_cast<int64_t>(sizeof(T)) >= kStreamingCopyFrom;
  const bool side_by_side = streaming && inner > 0 && src_stride[inner - 1] != run;
  char* group_dst[kRunsSideBySide];
  const char* group_src[kRunsSideBySide];
  int grouped = 0;
  while (true) {
    int64_t so = 0, dof = 0;
    for (size_t i = 0; i < inner; ++i) {
      so += index[i] * src_stride[i];
      dof += index[i] * dst_stride[i];
    }
    if (side_by_side) {
      group_dst[grouped] = reinterpret_cast<char*>(to + dof);
      group_src[grouped] = reinterpret_cast<const char*>(from + so);
      if (++grouped == kRunsSideBySide) {
        stream_copy_side_by_side(group_dst, group_src, grouped, static_cast<size_t>(run_bytes));
        grouped = 0;
      }
    } else if (streaming) {
      stream_copy(to + dof, from + so, static_cast<size_t>(run_bytes));
    } else if (mode == CopyMode::assign) {
      std::copy(from + so, from + so + run, to + dof);
    } else {
      for (int64_t k = 0; k < run; ++k) to[dof + k] += from[so + k];
    }
    size_t i = inner;
    while (i > 0 && ++index[i - 1] == extent[i - 1]) index[--i] = 0;
    if (i == 0) break;
  }
  if (grouped > 0) stream_copy_side_by_side(group_dst, group_src, grouped, static_cast<size_t>(run_bytes));
  if (streaming) stream_fence();
}

template <class T>
void fill(T* data, int64_t count, T value) {
  std::fill(data, data + count, value);
}

}  // namespace dax::detail::cpu
