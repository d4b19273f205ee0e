// The box picture of jax.debug.visualize_array_sharding, as text: 1-d arrays as one row of cells,
// 2-d arrays as a grid, each cell labelled with the platform and the sorted ids of the devices
// holding that piece. Widths (and, for 2-d, heights) follow the pieces' extents, so uneven splits
// show as uneven cells. Pure: debug/visualize.hpp prints it on rank 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax {

namespace detail {

inline std::string repeat(const std::string& s, int64_t n) {
  std::string out;
  for (int64_t i = 0; i < n; ++i) out += s;
  return out;
}

// Sizes of cells proportional to the pieces' extents, never narrower than `minimum`.
inline std::vector<int64_t> proportional(const std::vector<int64_t>& extents, int64_t total_extent,
                                         const std::vector<int64_t>& minimum, int64_t budget) {
  std::vector<int64_t> out(extents.size());
  for (size_t i = 0; i < extents.size(); ++i) {
    const int64_t scaled =
        total_extent > 0 ? std::llround(double(extents[i]) / double(total_extent) * double(budget)) : 0;
    out[i] = std::max(minimum[i], scaled);
  }
  return out;
}

}  // namespace detail

/// The picture of how an array of `shape` is laid out by `sharding`.
inline std::string sharding_picture(const Shape& shape, const NamedSharding& sharding,
                                    const std::string& platform = "CPU") {
  DAX_CHECK(shape.size() <= 2, "visualize_sharding: only 1-d and 2-d arrays can be drawn, got ",
            "shape ", to_string(shape), " of rank ", shape.size());
  sharding.check_rank(shape);
  const bool grid = shape.size() == 2;
  const Shape extent = shape.empty() ? Shape{1} : shape;
  const int64_t rows = grid ? sharding.num_pieces(0) : 1;
  const int64_t cols = grid ? sharding.num_pieces(1) : (shape.empty() ? 1 : sharding.num_pieces(0));
  const size_t col_dim = grid ? 1 : 0;

  // Devices of each cell.
  std::vector<std::set<int>> cell(rows * cols);
  for (int device : sharding.mesh().devices()) {
    const auto c = sharding.mesh().coords(device);
    const int64_t r = grid ? sharding.piece_index(c, 0) : 0;
    const int64_t k = shape.empty() ? 0 : sharding.piece_index(c, col_dim);
    cell[r * cols + k].insert(device);
  }
  std::vector<std::string> label(cell.size());
  for (size_t i = 0; i < cell.size(); ++i) {
    label[i] = platform + " ";
    size_t n = 0;
    for (int d : cell[i]) {
      if (n++) label[i] += ',';
      label[i] += std::to_string(d);
    }
  }

  std::vector<int64_t> col_extent(cols), min_width(cols, 0);
  for (int64_t k = 0; k < cols; ++k) {
    col_extent[k] = detail::chunk_piece(extent[col_dim], cols, k).size();
    for (int64_t r = 0; r < rows; ++r)
      min_width[k] = std::max<int64_t>(min_width[k], label[r * cols + k].size() + 2);
  }
  int64_t width_budget = 0;
  for (int64_t w : min_width) width_budget += w;
  const auto width = detail::proportional(col_extent, extent[col_dim], min_width, width_budget);

  std::vector<int64_t> height(rows, 1);
  if (grid) {
    std::vector<int64_t> row_extent(rows);
    for (int64_t r = 0; r < rows; ++r) row_extent[r] = detail::chunk_piece(shape[0], rows, r).size();
    height = detail::proportional(row_extent, shape[0], std::vector<int64_t>(rows, 1), 3 * rows);
  }

  auto rule = [&](const char* left, const char* mid, const char* right) {
    std::string line = left;
    for (int64_t k = 0; k < cols; ++k) line += detail::repeat("─", width[k]) + (k + 1 < cols ? mid : right);
    return line + "\n";
  };
  std::string out = rule("┌", "┬", "┐");
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t line = 0; line < height[r]; ++line) {
      out += "│";
      for (int64_t k = 0; k < cols; ++k) {
        const std::string text = line == (height[r] - 1) / 2 ? label[r * cols + k] : "";
        const int64_t pad = width[k] - static_cast<int64_t>(text.size());
        out += std::string(pad / 2, ' ') + text + std::string(pad - pad / 2, ' ') + "│";
      }
      out += "\n";
    }
    if (r + 1 < rows) out += rule("├", "┼", "┤");
  }
  return out + rule("└", "┴", "┘");
}

}  // namespace dax
