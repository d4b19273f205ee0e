// Strided walks shared by the CUDA kernels: an iteration space's dimensions with one stride per
// operand, merged on the host into as few dimensions as possible and handed to kernels by value,
// which turn a flat row-major index into each operand's offset.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/core/macros.hpp>

namespace dax::detail::cuda {

/// The most dimensions a kernel walks (after merging); more is a dax::Error.
inline constexpr int max_rank = 8;

/// Dimensions, outermost first, each with one stride per operand (host side).
template <int N>
struct Dims {
  std::vector<int64_t> extent;
  std::vector<std::array<int64_t, N>> stride;
  int rank() const { return static_cast<int>(extent.size()); }
};

/// The same walk over fewer dimensions: drops dimensions of extent 1 and merges a dimension into
/// the next inner one wherever every operand steps over the inner one exactly (stride = inner
/// stride * inner extent), as PyTorch's TensorIterator does. Offsets and their order are unchanged.
template <int N>
Dims<N> coalesce(const std::vector<int64_t>& extent, const std::array<std::vector<int64_t>, N>& strides) {
  Dims<N> dims;  // built innermost first, reversed at the end
  for (size_t d = extent.size(); d-- > 0;) {
    if (extent[d] == 1) continue;
    std::array<int64_t, N> s{};
    for (int k = 0; k < N; ++k) s[k] = strides[k][d];
    bool merges = !dims.extent.empty();
    for (int k = 0; k < N && merges; ++k) merges = s[k] == dims.stride.back()[k] * dims.extent.back();
    if (merges) {
      dims.extent.back() *= extent[d];
    } else {
      dims.extent.push_back(extent[d]);
      dims.stride.push_back(s);
    }
  }
  std::reverse(dims.extent.begin(), dims.extent.end());
  std::reverse(dims.stride.begin(), dims.stride.end());
  return dims;
}

/// What a kernel receives: up to max_rank dimensions, by value (a few hundred bytes of parameters).
template <int N>
struct Layout {
  int rank = 0;
  int64_t extent[max_rank] = {};
  int64_t stride[N][max_rank] = {};
};

template <int N>
Layout<N> make_layout(const Dims<N>& dims, const char* what) {
  DAX_CHECK(dims.rank() <= max_rank, "CUDA backend: ", what, " needs ", dims.rank(),
            " dimensions after merging the contiguous ones; its kernels walk at most ", max_rank);
  Layout<N> layout;
  layout.rank = dims.rank();
  for (int d = 0; d < dims.rank(); ++d) {
    layout.extent[d] = dims.extent[d];
    for (int k = 0; k < N; ++k) layout.stride[k][d] = dims.stride[d][k];
  }
  return layout;
}

/// Adds to off[k] the offset, in operand k, of the i-th element of the walk (row-major order).
/// Index is uint32_t when the whole walk fits in it: 32-bit division is several times cheaper.
template <class Index, int N>
DAX_HOST_DEVICE inline void add_offsets(const Layout<N>& layout, Index i, int64_t (&off)[N]) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int d = max_rank - 1; d >= 0; --d) {
    if (d >= layout.rank) continue;
    Index idx = i;  // the outermost dimension takes what is left, no division
    if (d > 0) {
      const Index extent = static_cast<Index>(layout.extent[d]);
      const Index q = i / extent;
      idx = i - q * extent;
      i = q;
    }
    for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(idx) * layout.stride[k][d];
  }
}


}  // namespace dax::detail::cuda
