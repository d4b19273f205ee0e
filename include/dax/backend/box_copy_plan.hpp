// How to copy one box-shaped region between two buffers laid out alike (row-major pieces covering
// the same block) with few strided copies: plain host arithmetic, no CUDA, so the unit tests check
// it against an element-by-element copy; backend/cuda/box_copy.cuh runs the copies.
#pragma once

#include <cstdint>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail {

/// `rows` runs of `run` contiguous bytes, the first at byte `offset` of both buffers, each next
/// one `pitch` bytes further (a cudaMemcpy2D).
struct StridedCopy {
  int64_t offset = 0, pitch = 0, run = 0, rows = 0;
  friend bool operator==(const StridedCopy&, const StridedCopy&) = default;
};

/// The copies that move the elements of `box` (global coordinates, inside `block`) of a row-major
/// piece of `block` with `item` bytes per element. The dimensions the box covers in full from the
/// innermost outwards merge with the first one it does not into one contiguous run; the next
/// dimension out gives the rows of one copy; dimensions further out give one copy per index.
/// Empty for an empty box.
inline std::vector<StridedCopy> box_copy_plan(const Box& block, const Box& box, int64_t item) {
  const int rank = static_cast<int>(block.size());
  DAX_CHECK(static_cast<int>(box.size()) == rank, "box_copy_plan: a box of rank ", box.size(), " in a block of rank ",
            rank);
  for (int d = 0; d < rank; ++d) {
    if (box[d].size() == 0) return {};
    DAX_CHECK(box[d].start >= block[d].start && box[d].stop <= block[d].stop, "box_copy_plan: the box ",
              to_string(box_shape(box)), " leaves the block along dimension ", d);
  }
  std::vector<int64_t> stride(rank + 1, item);  // bytes per step along each dimension
  for (int d = rank - 1; d >= 0; --d) stride[d] = stride[d + 1] * (d + 1 < rank ? block[d + 1].size() : 1);
  int64_t base = 0;
  for (int d = 0; d < rank; ++d) base += (box[d].start - block[d].start) * stride[d];
  // The run starts at dimension `first`: every dimension after it is covered in full.
  int first = rank;
  while (first > 0) {
    --first;
    if (first == 0 || box[first].size() != block[first].size()) break;
  }
  const int64_t run = rank > 0 ? box[first].size() * stride[first] : item;
  const int row_dim = first - 1;  // -1: one row
  const int64_t rows = row_dim >= 0 ? box[row_dim].size() : 1;
  const int64_t pitch = row_dim >= 0 ? stride[row_dim] : run;
  std::vector<StridedCopy> copies;
  std::vector<int64_t> index(row_dim > 0 ? row_dim : 0, 0);  // over dimensions [0, row_dim)
  while (true) {
    int64_t offset = base;
    for (size_t d = 0; d < index.size(); ++d) offset += index[d] * stride[d];
    copies.push_back({offset, pitch, run, rows});
    size_t d = index.size();
    while (d > 0 && ++index[d - 1] == box[d - 1].size()) index[--d] = 0;
    if (d == 0) break;
  }
  return copies;
}

}  // namespace dax::detail
