// transpose(x, perm) and x.T(): dimensions reordered, the spec moving with them, so no data
// crosses devices; each device permutes its own piece. Swapping only the last two dimensions (the
// transposes before a GEMM) copies nothing: the result views the piece as stored and matmul passes
// a transpose flag to BLAS / cuBLAS; other readers get a row-major copy on first read.
#pragma once

#include <numeric>
#include <vector>

#include <dax/array/dist_array.hpp>
#include <dax/array/trace.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/sharding/build.hpp>

namespace dax {
namespace detail {

/// Whether `perm` keeps every dimension but the last two, which it swaps.
inline bool swaps_last_two(const std::vector<int>& perm) {
  const size_t n = perm.size();
  if (n < 2) return false;
  for (size_t i = 0; i + 2 < n; ++i)
    if (perm[i] != static_cast<int>(i)) return false;
  return perm[n - 2] == static_cast<int>(n - 1) && perm[n - 1] == static_cast<int>(n - 2);
}

}  // namespace detail

/// x with dimension i of the result taken from dimension perm[i] of x (reversed when perm is empty).
template <class T>
DistArray<T> transpose(const DistArray<T>& x, std::vector<int> perm = {}) {
  const int n = x.ndim();
  if (perm.empty()) {
    perm.resize(n);
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  std::vector<bool> seen(n, false);
  DAX_CHECK(static_cast<int>(perm.size()) == n, "transpose: perm has ", perm.size(), " entries for an array of rank ", n);
  for (int& p : perm) {
    DAX_CHECK(p >= -n && p < n && !seen[p < 0 ? p + n : p], "transpose: perm is not a permutation of 0..", n - 1);
    p = p < 0 ? p + n : p;
    seen[p] = true;
  }
  Shape shape(n);
  std::vector<std::vector<int>> dims(n);
  for (int i = 0; i < n; ++i) {
    shape[i] = x.shape()[perm[i]];
    dims[i] = x.sharding().dim_axes(perm[i]);
  }
  const NamedSharding sharding = detail::make_sharding(x.sharding().mesh(), dims, x.sharding().unreduced_axes());
  DistArray<T> out = [&] {
    if (!x.is_addressable()) return DistArray<T>(shape, sharding, nullptr);
    if (detail::swaps_last_two(perm)) {
      if (x.stores_swapped()) return DistArray<T>(shape, sharding, x.stored_buffer());  // transposed back
      return DistArray<T>::swapped_view(shape, sharding, x.buffer());
    }
    auto buffer = detail::dev::allocate(x.local_size() * sizeof(T));
    detail::dev::permute(x.local_data().data(), x.local_shape(), perm, static_cast<T*>(buffer->data()));
    return DistArray<T>(shape, sharding, std::move(buffer));
  }();
  detail::record("transpose", out, [&](auto) {  // the cotangent goes back through the inverse permutation
    std::vector<int> inverse(n);
    for (int i = 0; i < n; ++i) inverse[perm[i]] = i;
    return [inverse](const DistArray<T>& g) { return detail::Cotangents{detail::AnyArray(transpose(g, inverse))}; };
  }, x);
  return out;
}

template <class Elem>
DistArray<Elem> DistArray<Elem>::T() const {
  return transpose(*this);
}

}  // namespace dax

namespace dax::detail {

/// x with its last two dimensions swapped: a view (see transpose), for GEMM operands.
template <class T>
DistArray<T> transpose_last_two(const DistArray<T>& x) {
  std::vector<int> perm(x.ndim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(x, perm);
}

}  // namespace dax::detail
