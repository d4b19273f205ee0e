// ScaLAPACK's 2-D block-cyclic layout, as pure index math: the process grid dax builds from a mesh,
// which process holds a global row or column and where in its local storage (nb x nb blocks dealt
// round-robin over the grid's rows and columns, from process (0, 0)), and how many it holds
// (ScaLAPACK's numroc).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace dax::detail {

/// A grid of rows x cols processes over `devices`, as square as the count allows (rows <= cols):
/// ScaLAPACK's factorizations scale best on square grids.
struct ProcessGrid {
  int rows = 1, cols = 1;
};
inline ProcessGrid process_grid(int devices) {
  int rows = static_cast<int>(std::sqrt(double(devices)));
  while (rows > 1 && devices % rows != 0) --rows;
  return {rows, devices / rows};
}

/// The grid row (or column) holding global row (column) i, with blocks of nb dealt over p.
inline int block_owner(int64_t i, int64_t nb, int p) { return static_cast<int>((i / nb) % p); }

/// Where global row (column) i sits in its holder's local storage.
inline int64_t block_local(int64_t i, int64_t nb, int p) { return (i / (nb * p)) * nb + i % nb; }

/// How many of n rows (columns) grid row (column) `proc` of p holds (ScaLAPACK's numroc, source 0).
inline int64_t block_count(int64_t n, int64_t nb, int proc, int p) {
  const int64_t blocks = n / nb, extra = n % nb;
  int64_t count = (blocks / p) * nb;
  const int64_t left = blocks % p;
  if (proc < left) count += nb;
  else if (proc == left) count += extra;
  return count;
}

/// The block size for an n x n matrix on a grid: ScaLAPACK's usual 64, smaller when the matrix
/// would leave processes without a block.
inline int64_t block_size(int64_t n, const ProcessGrid& g) {
  const int64_t p = std::max(g.rows, g.cols);
  int64_t nb = 64;
  while (nb > 1 && nb * p > n) nb /= 2;
  return nb;
}

}  // namespace dax::detail
