// The sharding rule of reductions (pure): each device reduces its piece; mesh axes that split a
// reduced dimension leave partial results. For sums those are unreduced values, which the final
// reshard turns into what the caller asked (by default a reduced array: all-reduce; a target split
// over those axes: reduce-scatter; or kept unreduced). For max, min and prod they are combined by
// an all-reduce with that operation over exactly those axes.
#pragma once

#include <algorithm>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/sharding/build.hpp>

namespace dax::detail {

struct ReductionRule {
  Shape out_shape;
  std::vector<bool> reduced;      // per input dimension
  NamedSharding input;            // the sharding the input is brought to first
  NamedSharding partial;          // the local results' sharding (sums: unreduced over `axes`)
  std::vector<int> axes;          // mesh axes that split a reduced dimension
};

/// Normalizes `dims` (negative counts from the end; empty: all) into flags per dimension.
inline std::vector<bool> reduced_dims(const Shape& shape, const std::vector<int>& dims, const char* op) {
  std::vector<bool> flags(shape.size(), dims.empty());
  for (int d : dims) {
    const int r = static_cast<int>(shape.size());
    DAX_CHECK(d >= -r && d < r, op, ": axis ", d, " is out of range for an array of rank ", r,
              " (shape ", to_string(shape), ")");
    const int k = d < 0 ? d + r : d;
    DAX_CHECK(!flags[k] || dims.empty(), op, ": axis ", d, " is given twice");
    flags[k] = true;
  }
  return flags;
}

inline ReductionRule reduction_rule(const Shape& shape, const NamedSharding& in, const std::vector<bool>& reduced,
                                    bool keepdims, bool linear) {
  ReductionRule rule{{}, reduced, in, in, {}};
  const NamedSharding input = linear ? in : with_unreduced_axes(in, shape.size(), {});
  std::vector<std::vector<int>> dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (reduced[d]) {
      for (int a : input.dim_axes(d)) rule.axes.push_back(a);
      if (keepdims) {
        rule.out_shape.push_back(1);
        dims.emplace_back();
      }
      continue;
    }
    rule.out_shape.push_back(shape[d]);
    dims.push_back(input.dim_axes(d));
  }
  std::sort(rule.axes.begin(), rule.axes.end());
  std::vector<int> unreduced = input.unreduced_axes();
  if (linear) {
    unreduced.insert(unreduced.end(), rule.axes.begin(), rule.axes.end());
    std::sort(unreduced.begin(), unreduced.end());
  }
  rule.input = input;
  rule.partial = make_sharding(in.mesh(), dims, unreduced);
  return rule;
}

}  // namespace dax::detail
