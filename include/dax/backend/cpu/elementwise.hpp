// Elementwise kernels with broadcasting: out[i] = f(in_0[i], in_1[i], ...) over the output's local
// piece, each operand read through its own strides (0 along stretched dimensions).
#pragma once

#include <array>
#include <utility>
#include <cstdint>
#include <vector>

#include <dax/core/shape.hpp>

namespace dax::detail::cpu {

template <class Out, class F, class... In>
void broadcast_map(Out* out, const Shape& shape, const std::array<std::vector<int64_t>, sizeof...(In)>& strides,
                   F&& f, const In*... in) {
  const int64_t count = numel(shape);
  if (count == 0) return;
  constexpr size_t arity = sizeof...(In);
  // Same shape everywhere: one flat loop the compiler can vectorize.
  bool flat = true;
  for (size_t k = 0; k < arity; ++k) {
    int64_t expect = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      flat = flat && strides[k][i] == expect;
      expect *= shape[i];
    }
  }
  if (flat) {
    for (int64_t i = 0; i < count; ++i) out[i] = f(in[i]...);
    return;
  }
  const size_t n = shape.size();
  const int64_t inner = shape[n - 1];
  std::array<int64_t, arity> step{};
  for (size_t k = 0; k < arity; ++k) step[k] = strides[k][n - 1];
  std::vector<int64_t> idx(n - 1, 0);
  for (int64_t o = 0; o < count; o += inner) {
    std::array<int64_t, arity> base{};
    for (size_t k = 0; k < arity; ++k)
      for (size_t i = 0; i + 1 < n; ++i) base[k] += idx[i] * strides[k][i];
    [&]<size_t... I>(std::index_sequence<I...>) {
      for (int64_t j = 0; j < inner; ++j) out[o + j] = f(in[base[I] + j * step[I]]...);
    }(std::index_sequence_for<In...>{});
    for (size_t i = n - 1; i-- > 0;) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
}

}  // namespace dax::detail::cpu
