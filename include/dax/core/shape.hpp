// Shapes, slices and boxes (one [start, stop) per dimension) and the row-major arithmetic on them.
#pragma once

#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/macros.hpp>

namespace dax {

using Shape = std::vector<int64_t>;

/// A half-open range [start, stop) of one dimension.
struct Slice {
  int64_t start = 0;
  int64_t stop = 0;
  DAX_HOST_DEVICE int64_t size() const { return stop > start ? stop - start : 0; }
  friend bool operator==(const Slice&, const Slice&) = default;
};

/// One Slice per dimension: a rectangular piece of a global array.
using Box = std::vector<Slice>;

inline int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

inline int64_t numel(const Box& box) {
  int64_t n = 1;
  for (const Slice& s : box) n *= s.size();
  return n;
}

inline Shape box_shape(const Box& box) {
  Shape shape(box.size());
  for (size_t i = 0; i < box.size(); ++i) shape[i] = box[i].size();
  return shape;
}

/// A box holding no element, even for a rank-0 array (whose full box holds one).
inline Box empty_box(size_t ndim) { return Box(ndim ? ndim : 1, Slice{0, 0}); }

inline Box full_box(const Shape& shape) {
  Box box(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) box[i] = {0, shape[i]};
  return box;
}

/// The common part of two boxes; empty slices (start == stop) where they do not meet.
/// (A copy of `a` narrowed in place: GCC 12 at -O3 reports a false -Wfree-nonheap-object when a
/// Box of a.size() default slices is allocated here and inlined into a caller that passes a
/// temporary, as numel(intersect(x.box_at(...), y)) does.)
inline Box intersect(const Box& a, const Box& b) {
  Box out = a;
  for (size_t i = 0; i < out.size(); ++i) {
    if (b[i].start > out[i].start) out[i].start = b[i].start;
    if (b[i].stop < out[i].stop) out[i].stop = b[i].stop;
    if (out[i].stop < out[i].start) out[i].stop = out[i].start;
  }
  return out;
}

inline bool contains(const Box& outer, const Box& inner) {
  if (numel(inner) == 0) return true;
  for (size_t i = 0; i < outer.size(); ++i)
    if (inner[i].start < outer[i].start || inner[i].stop > outer[i].stop) return false;
  return true;
}

inline bool same_region(const Box& a, const Box& b) {
  const bool a_empty = numel(a) == 0, b_empty = numel(b) == 0;
  return (a_empty && b_empty) || (!a_empty && !b_empty && a == b);
}

/// Offset (in elements) of the first element of `region` inside the row-major buffer of `block`.
inline int64_t offset_in(const Box& block, const Box& region) {
  int64_t offset = 0;
  for (size_t i = 0; i < block.size(); ++i)
    offset = offset * block[i].size() + (region[i].start - block[i].start);
  return offset;
}

/// True when `region` occupies one contiguous run of the row-major buffer of `block`: after the
/// first dimension where it is narrower than one index, every later dimension is full.
inline bool is_contiguous_in(const Box& block, const Box& region) {
  if (numel(region) == 0) return true;
  size_t i = 0;
  while (i < region.size() && region[i].size() == 1) ++i;
  if (i == region.size()) return true;
  for (size_t j = i + 1; j < region.size(); ++j)
    if (region[j] != block[j]) return false;
  return true;
}

/// Calls f(k, flat) for every element of `box` in row-major order: k its offset inside the box,
/// flat its row-major index in the global array of `shape`.
template <class F>
void for_each_in_box(const Shape& shape, const Box& box, F&& f) {
  const size_t n = box.size();
  const int64_t count = numel(box);
  std::vector<int64_t> idx(n);
  for (size_t i = 0; i < n; ++i) idx[i] = box[i].start;
  for (int64_t k = 0; k < count; ++k) {
    int64_t flat = 0;
    for (size_t i = 0; i < n; ++i) flat = flat * shape[i] + idx[i];
    f(k, flat);
    for (size_t i = n; i-- > 0;) {
      if (++idx[i] < box[i].stop) break;
      idx[i] = box[i].start;
    }
  }
}

inline std::string to_string(const Shape& shape) {
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) out << ",";
  out << ")";
  return out.str();
}

/// NumPy-style text of a box: [0:4, 2:3].
inline std::string to_string(const Box& box) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < box.size(); ++i) out << (i ? ", " : "") << box[i].start << ":" << box[i].stop;
  out << "]";
  return out.str();
}

inline std::ostream& operator<<(std::ostream& out, const Slice& s) {
  return out << s.start << ":" << s.stop;
}

namespace detail {

/// Row-major strides of `shape` (in elements).
inline std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> stride(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    stride[d] = s;
    s *= shape[d];
  }
  return stride;
}

/// Row-major strides of an operand of local shape `shape` read as an operand of the output's local
/// shape `out` (aligned from the right; stretched and missing dimensions read with stride 0).
inline std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t s = 1;
  const size_t off = out.size() - shape.size();
  for (size_t i = shape.size(); i-- > 0;) {
    strides[off + i] = shape[i] == out[off + i] ? s : 0;
    s *= shape[i];
  }
  return strides;
}

}  // namespace detail
}  // namespace dax
