// Explicit sharding (issue 43, part 5): inside dax::ExplicitSharding an op that would move an input
// on its own raises (on every rank, before a byte moves) or, under `record`, lists the move; what
// the op's own rule does to its result, moves of no bytes and the backward pass stay allowed.
#include <catch2/catch.hpp>

#include "helpers.hpp"

using dax::DistArray;
using dax::ExplicitSharding;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::error_of;
using dax::test::host;
using dax::test::world_size;

namespace {

/// A 1-d mesh over every rank: an array split over it moves bytes whenever it moves.
Mesh line() { return Mesh({world_size()}, {"x"}); }

/// The same random values on every rank.
std::vector<double> values(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  return dax::test::random_values<double>(n, rng);
}

/// Bytes the planner says the move receives per device (the most any device receives).
int64_t plan_bytes(const Shape& shape, const NamedSharding& from, const NamedSharding& to) {
  return dax::detail::plan_reshard(shape, from, to).elements * int64_t(sizeof(double));
}

}  // namespace

TEST_CASE("explicit sharding: an input moved on its own raises, naming the op, the layouts and the plan",
          "[explicit]") {
  const Mesh mesh = line();
  const int n = world_size();
  const Shape shape{6, 5};  // uneven over every mesh of 4 or more
  const NamedSharding rows(mesh, P("x")), cols(mesh, P(dax::none, "x"));
  const auto a = dax::device_put(values(30, 1), shape, rows);
  const auto b = dax::device_put(values(30, 2), shape, cols);
  const auto want = host(a + b);  // outside the scope: the rule moves one operand
  dax::comm_stats().reset();
  ExplicitSharding explicit_scope;
  if (n == 1) {  // one device: nothing ever moves a byte
    CHECK(host(a + b) == want);
    return;
  }
  const std::string message = error_of([&] { (void)(a + b); });
  CHECK_THAT(message, Catch::StartsWith("explicit sharding: add would reshard its input float64(6, 5) from "));
  CHECK_THAT(message, Catch::Contains("bytes/device); write the move (dax::reshard)"));
  CHECK_THAT(message, Catch::Contains("reshard (6, 5) "));  // the planner's steps follow
  CHECK(dax::comm_stats().total_bytes() == 0);              // raised before anything moved
  // Written out, the same sum runs inside the scope.
  CHECK(host(a + dax::reshard(b, rows)) == want);
  SECTION("matmul with the contraction split on one side only (an FSDP weight not gathered)") {
    const auto x = dax::device_put(values(30, 3), shape, rows);
    const auto w = dax::device_put(values(25, 4), Shape{5, 5}, rows);
    CHECK_THAT(error_of([&] { (void)dax::matmul(x, w); }),
               Catch::StartsWith("explicit sharding: matmul would reshard its input float64("));
    const auto gathered = dax::reshard(w, NamedSharding(mesh, P()));
    const auto y = dax::matmul(x, gathered);
    const dax::ImplicitResharding allowed;  // set the scope aside: the rule may move w again
    CHECK(host(y) == host(dax::matmul(x, w)));
  }
  SECTION("partial sums into a nonlinear op: the all-reduce is the user's to write") {
    const auto p = dax::reshard(a, NamedSharding(mesh, P().with_unreduced("x")));
    CHECK_THAT(error_of([&] { (void)dax::tanh(p); }), Catch::StartsWith("explicit sharding: tanh would reshard"));
    CHECK_THAT(error_of([&] { (void)dax::sum(dax::tanh(dax::reshard(p, NamedSharding(mesh, P())))); }),
               Catch::Equals("(no error)"));
  }
}

TEST_CASE("explicit sharding: the op's own collective, free slices and the backward pass are allowed",
          "[explicit]") {
  const Mesh mesh = line();
  const NamedSharding rows(mesh, P("x")), cols(mesh, P(dax::none, "x")), whole(mesh, P());
  const auto x = dax::device_put(values(7 * 6, 5), Shape{7, 6}, rows);
  const auto xc = dax::device_put(values(7 * 6, 5), Shape{7, 6}, cols);  // its contraction split over 'x'
  const auto k = dax::device_put(values(6 * 4, 6), Shape{6, 4}, rows);   // and k's, the same way
  const auto w = dax::device_put(values(6 * 4, 7), Shape{6, 4}, whole);
  // Outside the scope, the reference of each.
  const auto contracted = host(dax::matmul(xc, k));
  const auto sliced = host(x + dax::device_put(values(7 * 6, 8), Shape{7, 6}, whole));
  const auto loss = [&](const DistArray<double>& v) { return dax::sum(dax::tanh(dax::matmul(x, v))); };
  const auto [value, grad] = dax::value_and_grad(loss)(w);
  {
    ExplicitSharding explicit_scope;
    // x's columns and k's rows both split over 'x': each device multiplies its pieces, and the
    // partial sums are reduced into the result (matmul's own all-reduce).
    CHECK_THAT(host(dax::matmul(xc, k)), Catch::Approx(contracted).epsilon(1e-12));
    // A replicated operand beside a split one is sliced where it lies: no byte moves.
    CHECK(host(x + dax::device_put(values(7 * 6, 8), Shape{7, 6}, whole)) == sliced);
    // The backward's moves follow from the forward's layouts (dW's partial sums reduced to w's).
    const auto [v2, g2] = dax::value_and_grad(loss)(w);
    CHECK(host(v2) == host(value));
    CHECK_THAT(host(g2), Catch::Approx(host(grad)).epsilon(1e-12));
  }
}

TEST_CASE("explicit sharding: `record` lists every implicit move with its bytes, and scopes nest", "[explicit]") {
  const Mesh mesh = line();
  const NamedSharding rows(mesh, P("x")), cols(mesh, P(dax::none, "x"));
  const Shape shape{5, 9};
  const auto a = dax::device_put(values(45, 9), shape, rows);
  const auto b = dax::device_put(values(45, 10), shape, cols);
  const auto want = host(dax::sum(a * b, {1}));
  ExplicitSharding outer;  // raise
  {
    ExplicitSharding inner(ExplicitSharding::Action::record);
    CHECK(host(dax::sum(a * b, {1})) == want);  // ran, moves and all
    const auto& seen = inner.seen();
    if (world_size() == 1) {
      CHECK(seen.empty());
    } else {
      REQUIRE(seen.size() == 1);
      CHECK(seen[0].op == "multiply");
      CHECK(seen[0].shape == shape);
      CHECK(seen[0].dtype == dax::DType::float64);
      const bool moved_b = seen[0].from == cols;
      CHECK((moved_b ? seen[0].to == rows : (seen[0].from == rows && seen[0].to == cols)));
      CHECK(seen[0].bytes == plan_bytes(shape, seen[0].from, seen[0].to));
      CHECK(seen[0].bytes > 0);
      CHECK_THAT(seen[0].plan, Catch::StartsWith("reshard (5, 9) "));
    }
  }
  // The inner scope is gone: the outer one raises again.
  if (world_size() > 1)
    CHECK_THAT(error_of([&] { (void)(a * b); }), Catch::StartsWith("explicit sharding: multiply would reshard"));
}
