// Every invalid call throws dax::Error on every rank with a message naming what was expected and
// what came; none leaves a rank waiting (ctest runs this under a timeout).
#include <catch2/catch.hpp>

#include <limits>

#include "helpers.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::test::error_of;

TEST_CASE("a mesh larger than the world", "[errors]") {
  const int n = dax::test::world_size();
  const Mesh big({n + 1}, {"x"});
  CHECK(error_of([&] { dax::zeros<float>({4}, NamedSharding(big, P("x"))); }) ==
        dax::detail::cat("Mesh('x': ", n + 1, ") needs ", n + 1, " devices (ids up to ", n,
                         ") but the world has ", n, " rank", n == 1 ? "" : "s",
                         ": launch with mpirun -np ", n + 1, " or use a smaller mesh"));
}

TEST_CASE("bad specs", "[errors]") {
  const Mesh mesh({dax::test::world_size()}, {"x"});
  CHECK(error_of([&] { NamedSharding(mesh, P("y")); }) ==
        "Resource axis: y of P('y') is not found in mesh: ('x',).");
  CHECK(error_of([&] { NamedSharding(mesh, P("x", "x")); }).find("has duplicate entries for `x`") !=
        std::string::npos);
  CHECK(error_of([&] { dax::zeros<float>({4}, NamedSharding(mesh, P("x", dax::none))); }) ==
        "Sharding NamedSharding(mesh=Mesh('x': " + std::to_string(dax::test::world_size()) +
            "), spec=P('x', None)) is only valid for values of rank at least 2, but was applied to "
            "a value of rank 1");
}

TEST_CASE("host data of the wrong size", "[errors]") {
  const Mesh mesh({dax::test::world_size()}, {"x"});
  const std::vector<float> host(11);
  CHECK(error_of([&] { dax::device_put(host, {3, 4}, NamedSharding(mesh, P("x"))); }) ==
        "device_put: shape (3, 4) needs 12 elements of host data, got 11");
  CHECK(error_of([&] {
          dax::make_array_from_callback<float>({3, 4}, NamedSharding(mesh, P()),
                                               [](const std::vector<dax::Slice>&) { return std::vector<float>(5); });
        }) == "make_array_from_callback: the piece [0:3, 0:4] (rank 0) has 12 elements but the callback returned 5");
}

TEST_CASE("one rank passing the wrong local piece makes every rank throw", "[errors]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  const NamedSharding rows(mesh, P("x"));
  const int last = n - 1;
  std::vector<double> mine(2 * 3 + (dax::test::world_rank() == last ? 1 : 0), 1.0);
  CHECK(error_of([&] { dax::from_local(mine, {2 * n, 3}, rows); }) ==
        dax::detail::cat("from_local: rank ", last, " passed 7 elements for its piece [", 2 * last, ":",
                         2 * last + 2, ", 0:3] of (", 2 * n, ", 3) under ", dax::to_string(rows),
                         ", which needs 6"));
  // The runtime still works afterwards: no rank was left inside a collective.
  CHECK(dax::ones<float>({n}, rows).to_host() == std::vector<float>(n, 1.0f));
}

TEST_CASE("a callback wrong on one rank only makes every rank throw", "[errors]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  const int last = n - 1;
  const auto message = error_of([&] {
    dax::make_array_from_callback<int32_t>({2 * n}, NamedSharding(mesh, P("x")), [&](const std::vector<dax::Slice>& index) {
      return std::vector<int32_t>(index[0].start == 2 * last ? 3 : 2, 7);
    });
  });
  CHECK(message == dax::detail::cat("make_array_from_callback: the piece [", 2 * last, ":", 2 * last + 2, "] (rank ",
                                    last, ") has 2 elements but the callback returned 3"));
  CHECK(dax::ones<float>({n}, NamedSharding(mesh, P("x"))).to_host() == std::vector<float>(n, 1.0f));
}

TEST_CASE("reductions without an identity refuse empty dimensions", "[errors]") {
  const Mesh mesh({dax::test::world_size()}, {"x"});
  const auto e = dax::zeros<float>({0, 3}, NamedSharding(mesh, P()));
  CHECK(error_of([&] { dax::max(e, {0}); }) ==
        "max: zero-size dimension 0 of (0, 3) has no max (the reduction has no identity)");
  CHECK(error_of([&] { dax::argmax(e, 0); }).find("zero-size dimension 0") != std::string::npos);
  CHECK(dax::sum(e, {0}).to_host() == std::vector<float>(3, 0.0f));
  const auto inf = dax::full<float>({4}, -std::numeric_limits<float>::infinity(), NamedSharding(mesh, P("x")));
  CHECK(dax::max(inf).to_host()[0] == -std::numeric_limits<float>::infinity());
}

TEST_CASE("resharding between different meshes", "[errors]") {
  const int n = dax::test::world_size();
  const Mesh a({n}, {"x"}), b({n}, {"y"});
  const auto x = dax::zeros<float>({4}, NamedSharding(a, P("x")));
  CHECK(error_of([&] { dax::reshard(x, NamedSharding(b, P("y"))); }) ==
        "reshard: source and target must be on the same mesh, got Mesh('x': " + std::to_string(n) +
            ") and Mesh('y': " + std::to_string(n) + ")");
}

TEST_CASE("an unsupported backend request", "[errors]") {
  // A g++ build runs on the CPU; an nvcc build on the GPU where one is usable.
  if (!dax::detail::compiled_with_cuda()) CHECK(dax::Runtime::current().backend() == dax::Backend::cpu);
  CHECK(error_of([] { dax::Runtime second; }) ==
        "dax: a dax::Runtime is already alive; create one per process");
}
