// How many blocks a GPU kernel launches, as pure host arithmetic: grid-stride loops over any
// number of items and 3-d grids kept inside CUDA's limits. No CUDA include, so that CPU unit tests
// check it on sizes no test GPU could hold; backend/cuda turns a GridShape into a dim3.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

namespace dax::detail {

/// CUDA's grid limits (every compute capability since 3.0): x up to 2^31 - 1 blocks, y and z up
/// to 65535. Launching past them fails with cudaErrorInvalidConfiguration.
inline constexpr int64_t max_grid_x = (int64_t{1} << 31) - 1;
inline constexpr int64_t max_grid_yz = 65535;

/// Threads of a block of the 1-d kernels.
inline constexpr int block_threads = 256;

/// The most blocks a grid-stride loop gets: past a few waves of the largest GPU, more blocks only
/// add scheduling work; each thread loops instead.
inline constexpr int64_t max_loop_blocks = int64_t{1} << 16;

/// Blocks along x, y and z; all 0 when there is nothing to launch (a launch of 0 blocks is an error).
struct GridShape {
  int64_t x = 0, y = 0, z = 0;
  bool empty() const { return x == 0; }
  int64_t blocks() const { return x * y * z; }
  bool operator==(const GridShape&) const = default;
};

/// ceil(a / b) for a >= 0, b > 0, without overflow near INT64_MAX.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

/// A 1-d grid for a grid-stride loop over `items`, each block taking `per_block` items per pass
/// (its threads for a thread-per-item loop, 1 for a block-per-item loop). The kernel loops
/// `for (i = first; i < items; i += step)` in 64 bits, so any count up to 2^62 is covered.
constexpr GridShape loop_grid(int64_t items, int64_t per_block = block_threads) {
  if (items <= 0) return {};
  return {std::min(ceil_div(items, std::max<int64_t>(per_block, 1)), max_loop_blocks), 1, 1};
}

/// A grid of nx x ny x nz blocks, each dimension clamped to its limit. A kernel launched on it
/// loops over the excess: `for (bz = blockIdx.z; bz < nz; bz += gridDim.z)`, the same in y and x.
constexpr GridShape block_grid(int64_t nx, int64_t ny = 1, int64_t nz = 1) {
  if (nx <= 0 || ny <= 0 || nz <= 0) return {};
  return {std::min(nx, max_grid_x), std::min(ny, max_grid_yz), std::min(nz, max_grid_yz)};
}

/// Whether a walk over `count` items indexes in uint32_t: every index below count, every extent
/// at most count. Kernels use it to pick 32-bit division, several times cheaper than 64-bit.
constexpr bool fits_uint32(int64_t count) {
  return count >= 0 && count <= static_cast<int64_t>(std::numeric_limits<uint32_t>::max());
}

}  // namespace dax::detail
