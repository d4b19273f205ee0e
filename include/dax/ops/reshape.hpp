// reshape: the array's row-major data under a new shape. Input and output dimensions fall into
// groups with equal products; a group keeps its split, with no communication, when only its first
// (major) input dimension is split and both that dimension and the group's first output dimension
// divide evenly by the piece count: then every device's piece is the same run of the data under
// either shape, and the buffer is reused as is. Any other split in a group is gathered first.
#pragma once

#include <string>
#include <vector>

#include <dax/array/reshard.hpp>
#include <dax/array/trace.hpp>
#include <dax/reshard/explain.hpp>
#include <dax/sharding/build.hpp>

namespace dax {
namespace detail {

struct ReshapeRule {
  NamedSharding input;   // the input's sharding after the gathers the reshape needs
  NamedSharding output;  // the result's sharding
  bool moves = false;
};

inline ReshapeRule reshape_rule(const Shape& in, const NamedSharding& s, const Shape& out) {
  const Mesh& mesh = s.mesh();
  auto in_dims = dims_of(s, in.size());
  std::vector<std::vector<int>> out_dims(out.size());
  if (numel(in) != 0) {
    size_t i = 0, j = 0;
    while (i < in.size() || j < out.size()) {
      // One group: input dims [i, i2), output dims [j, j2) with equal products.
      size_t i2 = i, j2 = j;
      int64_t pi = 1, po = 1;
      if (i2 < in.size()) pi *= in[i2++];
      if (j2 < out.size()) po *= out[j2++];
      while (pi != po) {  // the element counts agree overall, so the smaller side has more dims
        if (pi < po) pi *= in[i2++];
        else po *= out[j2++];
      }
      int64_t k = 1;
      for (int a : (i < i2 ? in_dims[i] : std::vector<int>{})) k *= mesh.axis_size(a);
      bool rest_split = false;
      for (size_t d = i + 1; d < i2; ++d) rest_split = rest_split || !in_dims[d].empty();
      const bool keep = i < i2 && j < j2 && !in_dims[i].empty() && !rest_split && in[i] % k == 0 && out[j] % k == 0;
      if (keep) out_dims[j] = in_dims[i];
      for (size_t d = keep ? i + 1 : i; d < i2; ++d) in_dims[d].clear();
      i = i2;
      j = j2;
    }
  } else {
    for (auto& d : in_dims) d.clear();
  }
  ReshapeRule rule{make_sharding(mesh, in_dims, s.unreduced_axes()), make_sharding(mesh, out_dims, s.unreduced_axes())};
  rule.moves = !(rule.input == s);
  return rule;
}

}  // namespace detail

namespace detail {

/// `shape` with its -1 entry (if any) inferred so it holds `count` elements; checked.
inline Shape resolve_shape(const Shape& from, Shape shape) {
  int64_t known = 1, infer = -1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      DAX_CHECK(infer < 0, "reshape: only one dimension may be -1, got ", to_string(shape));
      infer = static_cast<int64_t>(d);
    } else {
      DAX_CHECK(shape[d] >= 0, "reshape: negative dimension in ", to_string(shape));
      known *= shape[d];
    }
  }
  if (infer >= 0) shape[infer] = known > 0 ? numel(from) / known : 0;
  DAX_CHECK(numel(shape) == numel(from), "reshape: cannot reshape ", to_string(from), " (", numel(from),
            " elements) into ", to_string(shape));
  return shape;
}

}  // namespace detail

/// x's data under `shape` (same number of elements; one entry may be -1).
template <class T>
DistArray<T> reshape(const DistArray<T>& x, Shape shape) {
  shape = detail::resolve_shape(x.shape(), std::move(shape));
  const auto rule = detail::reshape_rule(x.shape(), x.sharding(), shape);
  DistArray<T> out(shape, rule.output, detail::operand_to(x, rule.input, "reshape").buffer());
  detail::record("reshape", out, [&](auto) {
    return [from = x.shape()](const DistArray<T>& g) { return detail::Cotangents{detail::AnyArray(reshape(g, from))}; };
  }, x);
  return out;
}

/// What a reshape moves: nothing, or the reshard it needs first.
template <class T>
std::string explain_reshape(const DistArray<T>& x, Shape shape) {
  shape = detail::resolve_shape(x.shape(), std::move(shape));
  const auto rule = detail::reshape_rule(x.shape(), x.sharding(), shape);
  std::string head = "reshape " + to_string(x.shape()) + " " + to_string(x.sharding().spec()) + " -> " +
                     to_string(shape) + " " + to_string(rule.output.spec()) + ": ";
  if (!rule.moves) return head + "no communication (each device's piece keeps its data)\n";
  return head + "reshards first\n" +
         detail::explain_plan(detail::plan_reshard(x.shape(), x.sharding(), rule.input), sizeof(T));
}

}  // namespace dax
