// The MPI communicator's reductions at every size: small ones go to the MPI library, large ones
// (blocks of 128 KiB per member and up) run as dax's ring reduce-scatter (and all-gather, for an
// all-reduce). Each member contributes values it and every other member can compute, so each
// checks its result against a plain loop over all contributions; uneven parts, zero-length parts
// and in-place calls included.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "helpers.hpp"

namespace {

using dax::DType;
using dax::detail::ReduceOp;
using dax::detail::Communicator;

Communicator& world_group() {
  static const dax::Mesh mesh({dax::test::world_size()}, {"all"});
  return dax::Runtime::current().group(mesh, {0});
}

/// Member m's contribution: small integers (exact in any summation order, also in float).
template <class T>
std::vector<T> contribution(int member, int64_t count, unsigned seed) {
  std::mt19937 gen(seed * 131 + static_cast<unsigned>(member));
  std::uniform_int_distribution<int> small(-50, 50);
  std::vector<T> v(static_cast<size_t>(count));
  for (T& x : v) x = static_cast<T>(small(gen));
  return v;
}

template <class T>
T combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return a + b;
    case ReduceOp::max: return a > b ? a : b;
    case ReduceOp::min: return a < b ? a : b;
    default: return a * b;
  }
}

template <class T>
std::vector<T> expected(int64_t count, unsigned seed, ReduceOp op) {
  std::vector<T> want = contribution<T>(0, count, seed);
  for (int m = 1; m < dax::test::world_size(); ++m) {
    const std::vector<T> c = contribution<T>(m, count, seed);
    for (size_t i = 0; i < want.size(); ++i) want[i] = combine(want[i], c[i], op);
  }
  return want;
}

template <class T>
void check_all_reduce(int64_t count, ReduceOp op, bool in_place, unsigned seed) {
  Communicator& comm = world_group();
  const std::vector<T> mine = contribution<T>(comm.rank(), count, seed);
  std::vector<T> out(static_cast<size_t>(count), T(-999));
  if (in_place) {
    out = mine;
    comm.all_reduce(nullptr, out.data(), count, dax::dtype_of<T>::value, op);
  } else {
    comm.all_reduce(mine.data(), out.data(), count, dax::dtype_of<T>::value, op);
  }
  INFO("all_reduce of " << count << " " << dax::to_string(dax::dtype_of<T>::value) << (in_place ? " in place" : ""));
  CHECK(out == expected<T>(count, seed, op));
}

template <class T>
void check_reduce_scatter(const std::vector<int64_t>& counts, ReduceOp op, unsigned seed) {
  Communicator& comm = world_group();
  int64_t total = 0, offset = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    if (static_cast<int>(j) == comm.rank()) offset = total;
    total += counts[j];
  }
  const std::vector<T> mine = contribution<T>(comm.rank(), total, seed);
  std::vector<T> out(static_cast<size_t>(counts[comm.rank()]), T(-999));
  comm.reduce_scatter(mine.data(), out.data(), counts, dax::dtype_of<T>::value, op);
  const std::vector<T> all = expected<T>(total, seed, op);
  const std::vector<T> want(all.begin() + offset, all.begin() + offset + counts[comm.rank()]);
  INFO("reduce_scatter of " << total << " " << dax::to_string(dax::dtype_of<T>::value) << ", this member's part "
                            << counts[comm.rank()]);
  CHECK(out == want);
}

}  // namespace

TEST_CASE("all_reduce: small (MPI's) and large (the ring) match a plain loop", "[collectives]") {
  unsigned seed = 1;
  for (int64_t count : {int64_t(1), int64_t(1000), int64_t(65536), int64_t(65537), int64_t(300001)}) {
    for (bool in_place : {false, true}) {
      check_all_reduce<float>(count, ReduceOp::sum, in_place, ++seed);
      check_all_reduce<double>(count, ReduceOp::max, in_place, ++seed);
      check_all_reduce<int32_t>(count, ReduceOp::min, in_place, ++seed);
    }
  }
  check_all_reduce<dax::half>(200003, ReduceOp::sum, false, ++seed);
}

TEST_CASE("reduce_scatter: even, uneven and empty parts, small and large, match a plain loop", "[collectives]") {
  const int n = dax::test::world_size();
  unsigned seed = 100;
  for (int64_t part : {int64_t(7), int64_t(70000)}) {
    std::vector<int64_t> even(n, part), uneven(n), with_empty(n);
    for (int j = 0; j < n; ++j) {
      uneven[j] = part + 3 * j;
      with_empty[j] = j % 2 == 1 ? 0 : part + j;
    }
    for (const auto& counts : {even, uneven, with_empty}) {
      check_reduce_scatter<float>(counts, ReduceOp::sum, ++seed);
      check_reduce_scatter<double>(counts, ReduceOp::max, ++seed);
      check_reduce_scatter<int64_t>(counts, ReduceOp::sum, ++seed);
    }
  }
}

TEST_CASE("split-K matmul through the ring equals the product on the host", "[collectives]") {
  const int n = dax::test::world_size();
  const dax::Mesh mesh({n}, {"x"});
  const int64_t m = 96, k = 64 * n + 3, cols = 1024;  // (96, 1024) double = 768 KiB: the ring
  std::vector<double> a = contribution<double>(-1, m * k, 7), b = contribution<double>(-2, k * cols, 8);
  const auto da = dax::device_put(std::span<const double>(a), {m, k}, dax::NamedSharding(mesh, dax::P(dax::none, "x")));
  const auto db = dax::device_put(std::span<const double>(b), {k, cols}, dax::NamedSharding(mesh, dax::P("x", dax::none)));
  std::vector<double> want(static_cast<size_t>(m * cols), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < cols; ++j) want[i * cols + j] += a[i * k + p] * b[p * cols + j];
  for (const auto& spec : {dax::P(), dax::P("x", dax::none), dax::P(dax::none, "x")}) {
    const auto c = dax::matmul(da, db, dax::NamedSharding(mesh, spec));
    INFO("result " << spec);
    CHECK(c.to_host() == want);
  }
}
