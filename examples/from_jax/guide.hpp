// examples/from_jax/guide.hpp: what the programs porting the JAX guides' code blocks share.
//
// Each program ports the blocks of one guide (../docs/from_jax.md lists them all). A block is a
// function that starts with `block(...)`, which prints its heading on rank 0, and checks what the
// guide says with `expect...`; a failed check throws a dax::Error naming the block, what was
// expected and what came, so the program ends with the runtime's one-line message and exit code 1.
// `finish` prints the closing `verified:` line that ctest looks for.
// Run as a simulation (DAX_SIMULATE=N:D: the meta backend, whose values are zeros), the checks are
// counted instead of thrown, so the whole program runs and its collectives and memory can be
// compared with a real run's (tests/simulation/compare_runs.py); `finish` then says how many
// saw zeros where values were expected, and the program does not claim `verified:`.
#pragma once

#include <dax/dax.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace from_jax {

inline std::string& current_block() {
  static std::string name;
  return name;
}

/// Starts a block: `guide` is the seed file's number ("001"), `heading` the block's first line or
/// the function it defines, as docs/from_jax.md names it.
inline void block(const std::string& guide, const std::string& heading) {
  current_block() = guide + " " + heading;
  if (dax::Runtime::current().rank() == 0) std::cout << "\n== [" << guide << "] " << heading << "\n";
}

/// Prints on rank 0 (the guides print from the one Python process).
template <class... Args>
void say(const Args&... args) {
  if (dax::Runtime::current().rank() != 0) return;
  std::ostringstream line;
  (line << ... << args);
  std::cout << line.str() << "\n";
}

/// On the meta backend: the checks that failed (values read back are zeros there).
inline int& simulated_misses() {
  static int misses = 0;
  return misses;
}

inline bool simulated() { return dax::Runtime::current().backend() == dax::Backend::meta; }

/// Whether a check that failed is only counted (simulated), not thrown.
inline bool counted_miss() {
  if (!simulated()) return false;
  ++simulated_misses();
  return true;
}

inline void expect(bool ok, const std::string& what) {
  if (ok || counted_miss()) return;
  DAX_CHECK(false, "from_jax [", current_block(), "]: expected ", what);
}

template <class A, class B>
void expect_eq(const A& got, const B& want, const std::string& what) {
  if (got == want || counted_miss()) return;
  std::ostringstream g, w;
  g << got;
  w << want;
  DAX_CHECK(false, "from_jax [", current_block(), "]: ", what, ": expected ", w.str(), ", got ", g.str());
}

inline void expect_near(double got, double want, double tolerance, const std::string& what) {
  if (std::abs(got - want) <= tolerance || counted_miss()) return;
  DAX_CHECK(false, "from_jax [", current_block(), "]: ", what, ": expected ", want,
            " within ", tolerance, ", got ", got, " (off by ", std::abs(got - want), ")");
}

/// Host data of the programs' checks: row-major float vectors.
using Host = std::vector<float>;

/// Integers in [-3, 3] as floats: products and sums of a few hundred stay exact in float, so
/// results must match the host loops bit for bit whatever order the sums take.
inline Host small_ints(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> pick(-3, 3);
  Host v(static_cast<size_t>(n));
  for (auto& e : v) e = static_cast<float>(pick(gen));
  return v;
}

/// (m, k) @ (k, n), row-major, by the textbook loop.
inline Host host_matmul(const Host& a, const Host& b, int64_t m, int64_t k, int64_t n) {
  Host c(static_cast<size_t>(m * n), 0.0f);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

/// The whole array equals `want` within `tol` (0: exactly). Gathers, so call it after byte checks.
inline void expect_values(const dax::DistArray<float>& x, const Host& want, double tol, const std::string& what) {
  const Host got = x.to_host();
  expect_eq(got.size(), want.size(), what + ": element count");
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - double(want[i])));
  expect_near(worst, 0.0, tol, what + ": largest difference from the host loop");
}

/// A host array put on `mesh` with `spec`.
inline dax::DistArray<float> put(const Host& h, const dax::Shape& shape, const dax::Mesh& mesh,
                                 const dax::PartitionSpec& spec) {
  return dax::device_put(std::span<const float>(h), shape, dax::NamedSharding(mesh, spec));
}

/// The mesh a block asks for, and whether the job has the devices for it. With enough ranks it is
/// dax::make_mesh over the job's first ranks (jax.make_mesh takes the first devices); with fewer,
/// every rank runs the block alone on a mesh of its own device with every axis of size 1, so the
/// same program runs at 1 rank and checks its numbers. Checks of layouts, pictures and bytes moved
/// hold only for the full mesh: gate them on `full`.
struct GuideMesh {
  dax::Mesh mesh;
  bool full;
};

inline GuideMesh guide_mesh(const dax::Shape& axis_shapes, std::vector<std::string> axis_names) {
  auto& rt = dax::Runtime::current();
  if (dax::numel(axis_shapes) <= rt.size()) return {dax::make_mesh(axis_shapes, std::move(axis_names)), true};
  return {dax::Mesh(dax::Shape(axis_shapes.size(), 1), std::move(axis_names), {rt.rank()}), false};
}

/// The closing line: every block's checks held on every rank.
inline int finish(const std::string& program, int blocks) {
  auto& rt = dax::Runtime::current();
  if (simulated()) {
    std::cout << "\nsimulated: " << program << ": " << blocks << " blocks as device " << rt.rank() << " of "
              << rt.size() << "; " << simulated_misses() << " checks saw zeros in place of values (not verified)\n";
    return 0;
  }
  if (rt.rank() == 0)
    std::cout << "\nverified: " << program << ": " << blocks << " blocks at " << rt.size() << " rank"
              << (rt.size() == 1 ? "" : "s") << "\n";
  return 0;
}

}  // namespace from_jax
