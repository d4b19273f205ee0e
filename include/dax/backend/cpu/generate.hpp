// Filling a piece from its elements' global positions: data[k] = f(flat index in the global
// array) for the k-th element of the piece. Random arrays and ranges are made this way, so their
// values depend on the global index only, never on the sharding.
#pragma once

#include <cstdint>

#include <dax/core/shape.hpp>

namespace dax::detail::cpu {

template <class T, class F>
void generate(T* data, const Shape& shape, const Box& index, F f) {
  for_each_in_box(shape, index, [&](int64_t k, int64_t flat) { data[k] = f(static_cast<uint64_t>(flat)); });
}

}  // namespace dax::detail::cpu
