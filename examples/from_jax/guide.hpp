// examples/from_jax/guide.hpp: what the programs porting the JAX guides' code blocks share.
//
// Each program ports the blocks of one guide (../docs/from_jax.md lists them all). A block is a
// function that starts with `block(...)`, which prints its heading on rank 0, and checks what the
// guide says with `expect...`; a failed check throws a dax::Error naming the block, what was
// expected and what came, so the program ends with the runtime's one-line message and exit code 1.
// `finish` prints the closing `verified:` line that ctest looks for.
#pragma once

#include <dax/dax.hpp>

#include <cmath>
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

inline void expect(bool ok, const std::string& what) {
  DAX_CHECK(ok, "from_jax [", current_block(), "]: expected ", what);
}

template <class A, class B>
void expect_eq(const A& got, const B& want, const std::string& what) {
  if (got == want) return;
  std::ostringstream g, w;
  g << got;
  w << want;
  DAX_CHECK(false, "from_jax [", current_block(), "]: ", what, ": expected ", w.str(), ", got ", g.str());
}

inline void expect_near(double got, double want, double tolerance, const std::string& what) {
  DAX_CHECK(std::abs(got - want) <= tolerance, "from_jax [", current_block(), "]: ", what, ": expected ", want,
            " within ", tolerance, ", got ", got, " (off by ", std::abs(got - want), ")");
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
  if (rt.rank() == 0)
    std::cout << "\nverified: " << program << ": " << blocks << " blocks at " << rt.size() << " rank"
              << (rt.size() == 1 ? "" : "s") << "\n";
  return 0;
}

}  // namespace from_jax
