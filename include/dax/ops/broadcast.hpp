// NumPy broadcasting of shapes: dimensions align from the right; a dimension of 1 stretches.
#pragma once

#include <algorithm>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail {

inline Shape broadcast_shapes(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const auto& s : shapes) {
    const size_t off = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[off + i];
      if (s[i] == o || s[i] == 1) continue;
      DAX_CHECK(o == 1, "broadcast: shapes ", to_string(shapes[0]), shapes.size() > 1 ? " and " : "",
                shapes.size() > 1 ? to_string(shapes[1]) : "", " do not broadcast: dimension ", off + i,
                " is ", o, " in one and ", s[i], " in another");
      o = s[i];
    }
  }
  return out;
}

/// Whether dimension `dim` of an operand of `shape` is stretched in the output `out`.
inline bool is_broadcast_dim(const Shape& shape, const Shape& out, size_t dim) {
  return shape[dim] != out[out.size() - shape.size() + dim];
}

}  // namespace dax::detail
