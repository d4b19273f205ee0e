// What the MPI benchmarks share: timing a call as the slowest rank sees it, medians, per-call
// microseconds of a loop, and the square-ish float32 array of a given size they all move.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include <dax/core/shape.hpp>

namespace dax::bench {

/// Seconds one call of `f` takes on the slowest rank (all ranks start together).
inline double slowest_rank_seconds(const std::function<void()>& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  f();
  double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

/// The upper median (the middle value of an odd count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Microseconds per call of `f` over `iters` calls on this rank, after iters/10 warm-up calls
/// (rules and plans cached, buffers pooled).
template <class F>
double per_call_us(F&& f, int iters) {
  for (int i = 0; i < iters / 10; ++i) f();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

/// per_call_us as the slowest rank measures it (for loops of collectives, started together).
template <class F>
double slowest_rank_per_call_us(F&& f, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double us = per_call_us(f, iters);
  MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return us;
}

/// x's largest and total value over the ranks.
inline double max_over_ranks(double x) {
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return x;
}
inline double sum_over_ranks(double x) {
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return x;
}

/// n floats uniform in [-scale, scale] from `seed` (the same on every rank).
inline std::vector<float> uniform_floats(size_t n, unsigned seed, float scale = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> out(n);
  for (auto& x : out) x = d(rng);
  return out;
}

/// A float32 array of `mib` MiB, rows a power of two, as square as that allows (rows and columns
/// then split evenly over power-of-two rank counts).
inline Shape square_float_shape(int64_t mib) {
  int64_t rows = 1;
  while (rows * rows * 4 < mib * 1024 * 1024) rows *= 2;
  return {rows, mib * 1024 * 1024 / 4 / rows};
}

}  // namespace dax::bench
