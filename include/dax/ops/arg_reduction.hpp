// argmax / argmin along one dimension: each device finds its best (value, global index) per output
// element, and when the dimension is split, the group of devices splitting it exchanges those
// pairs (a small all-gather) and keeps the best, the lowest index winning ties and a NaN winning
// over numbers, as in NumPy (backend/arg_prefers.hpp). When it is not split, the kernel's indices
// are the answer and nothing comes to the host.
#pragma once

#include <cstring>
#include <vector>

#include <dax/array/reshard.hpp>
#include <dax/array/profile_hook.hpp>
#include <dax/backend/arg_prefers.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/ops/functors.hpp>
#include <dax/ops/reduction.hpp>
#include <dax/ops/reduction_rule.hpp>
#include <dax/ops/shape.hpp>

namespace dax {
namespace detail {

/// Values travel as 64-bit words: floats widened to double bits, integers as they are.
template <class T>
int64_t to_word(T v) {
  if constexpr (is_floating_v<T>) {
    const double d = static_cast<double>(static_cast<compute_t<T>>(v));
    int64_t w;
    std::memcpy(&w, &d, sizeof w);
    return w;
  } else {
    return static_cast<int64_t>(v);
  }
}

template <class T>
T from_word(int64_t w) {
  if constexpr (is_floating_v<T>) {
    double d;
    std::memcpy(&d, &w, sizeof d);
    return static_cast<T>(d);
  } else {
    return static_cast<T>(w);
  }
}

template <class T, class Better>
DistArray<int64_t> arg_reduce(const DistArray<T>& x, int axis, bool keepdims, Better&& better, const char* name) {
  const ProfiledOp profiled(name, x);
  const int d = normalize_dim(axis, x.ndim(), name);
  std::vector<bool> flags(x.ndim(), false);
  flags[d] = true;
  check_not_empty(x.shape(), flags, name);
  const ReductionRule rule = reduction_rule(x.shape(), x.sharding(), flags, keepdims, false);
  const DistArray<T> in = operand_to(x, rule.input, name);
  Runtime& rt = Runtime::current();
  if (!in.is_addressable()) return DistArray<int64_t>(rule.out_shape, rule.partial, nullptr);
  const Shape local = in.local_shape();
  const int64_t outer = numel(Shape(local.begin(), local.begin() + d));
  const int64_t len = local[d], inner = numel(Shape(local.begin() + d + 1, local.end()));
  const int64_t start = in.local_index()[d].start;
  const int64_t outputs = outer * inner;
  const auto values = dev::allocate(outputs * sizeof(T));
  if (rule.axes.empty()) {  // every line whole on this device: its indices are global already
    DAX_CHECK(start == 0 && len == x.shape()[d], name, ": an unsplit dimension of ", x.shape()[d],
              " is held as [", start, ", ", start + len, ")");
    auto buffer = dev::allocate(outputs * sizeof(int64_t));
    dev::arg_reduce(in.local_data().data(), outer, len, inner, better, static_cast<T*>(values->data()),
                    static_cast<int64_t*>(buffer->data()));
    return DistArray<int64_t>(rule.out_shape, rule.partial, std::move(buffer));
  }
  // Per output element: (value word, global index), index -1 where this piece is empty. Each
  // backend finds its piece's best on its own memory; only the winners come to the host.
  const auto indices = dev::allocate(outputs * sizeof(int64_t));
  dev::arg_reduce(in.local_data().data(), outer, len, inner, better, static_cast<T*>(values->data()),
                  static_cast<int64_t*>(indices->data()));
  const std::vector<int64_t> index = dev::download(static_cast<const int64_t*>(indices->data()), outputs);
  const std::vector<T> value = dev::download(static_cast<const T*>(values->data()), outputs);
  std::vector<int64_t> mine(2 * outputs, -1);
  for (int64_t e = 0; e < outputs; ++e)
    if (index[e] >= 0) {
      mine[2 * e] = to_word(value[e]);
      mine[2 * e + 1] = start + index[e];
    }
  auto& comm = rt.group(rule.partial.mesh(), rule.axes);
  const int64_t started = collective_start();
  const std::vector<int64_t> all = comm.all_gather_host(mine);
  const int members = comm.size();
  count_collective("all_gather", axes_text(rule.partial.mesh(), rule.axes),
                   int64_t(mine.size() * sizeof(int64_t)) * (members - 1), started, members);
  auto buffer = dev::allocate(outer * inner * sizeof(int64_t));
  const size_t stride = mine.size();
  dev::write_from_host(static_cast<int64_t*>(buffer->data()), outer * inner, [&](int64_t* out) {
    for (int64_t e = 0; e < outer * inner; ++e) {
      int64_t idx = -1;
      T val{};
      for (int m = 0; m < members; ++m) {
        const int64_t w = all[m * stride + 2 * e], k = all[m * stride + 2 * e + 1];
        const T v = from_word<T>(w);
        if (beats(better, v, k, val, idx)) idx = k, val = v;
      }
      out[e] = idx;
    }
  });
  return DistArray<int64_t>(rule.out_shape, rule.partial, std::move(buffer));
}

}  // namespace detail

/// Index of the largest element along `axis` (the first one on ties; the first NaN if any, as NumPy).
template <class T>
DistArray<int64_t> argmax(const DistArray<T>& x, int axis, bool keepdims = false) {
  auto out = detail::arg_reduce(x, axis, keepdims, detail::fn::Greater{}, "argmax");
  detail::record_typing("argmax", out, x);
  return out;
}

/// Index of the smallest element along `axis` (the first one on ties; the first NaN if any, as NumPy).
template <class T>
DistArray<int64_t> argmin(const DistArray<T>& x, int axis, bool keepdims = false) {
  auto out = detail::arg_reduce(x, axis, keepdims, detail::fn::Less{}, "argmin");
  detail::record_typing("argmin", out, x);
  return out;
}

}  // namespace dax
