// all_gather_matmul and matmul_reduce_scatter: matmul's values (against loops on the global
// arrays) and its gradients, the result laid out as each promises, on every mesh that fits and
// every one of its axes, with operands arriving in random shardings (lazy transposes among them),
// uneven M, K and N; the ring's exchanges counted; bad calls fail alike on every rank.
#include <catch2/catch.hpp>

#include <array>
#include <random>
#include <string>
#include <vector>

#include "gradient_check.hpp"
#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::host;
using dax::test::Pick;
using dax::test::random_sharding;

namespace {

/// An (r, c) operand holding `values`, in sharding `s`; with `lazy`, a transpose view of its
/// (c, r) storage (the stored piece then reaches BLAS with a flag).
template <class T>
DistArray<T> operand(const std::vector<T>& values, int64_t r, int64_t c, const NamedSharding& s, bool lazy) {
  if (!lazy) return dax::device_put(values, Shape{r, c}, s);
  const NamedSharding stored = dax::detail::swap_last_two(s, 2);
  return dax::device_put(dax::test::swap_last_two(values, Shape{r, c}), Shape{c, r}, stored).T();
}

/// The sharding `s` with `axis` taken off dimension 1 (matmul_reduce_scatter's b must not split N
/// over its axis).
NamedSharding without_n_axis(const NamedSharding& s, int axis) {
  std::vector<int> n_axes;
  for (int x : s.dim_axes(1))
    if (x != axis) n_axes.push_back(x);
  return dax::detail::make_sharding(s.mesh(), {s.dim_axes(0), n_axes}, {});
}

NamedSharding laid_out(const Mesh& mesh, const std::vector<int>& rows, const std::vector<int>& columns) {
  return dax::detail::make_sharding(mesh, {rows, columns}, {});
}

}  // namespace

TEMPLATE_TEST_CASE("all_gather_matmul and matmul_reduce_scatter equal matmul on every mesh and axis",
                   "[ops][matmul][collective_matmul]", float, double) {
  using T = TestType;
  Pick pick(2023);
  int trial = 0;
  for (const Mesh& mesh : dax::test::meshes_that_fit()) {
    for (int x = 0; x < mesh.num_axes(); ++x) {
      const std::string axis = mesh.axis_names()[x];
      const int64_t p = mesh.axis_size(x);
      for (int round = 0; round < 2; ++round, ++trial) {
        // Uneven everywhere: M = 2p + 1 (the last block short), K and N rarely multiples of anything.
        const int64_t m = 2 * p + 1, k = 3 + (trial % 5), n = 2 + (trial % 7);
        const auto av = dax::test::random_values<T>(m * k, pick.rng);
        const auto bv = dax::test::random_values<T>(k * n, pick.rng);
        const auto want = dax::test::matmul_reference(av, bv, m, k, n);
        const NamedSharding sa = random_sharding(pick, mesh, 2), sb = random_sharding(pick, mesh, 2);
        const bool lazy_a = trial % 3 == 1, lazy_b = trial % 4 == 2;
        const auto a = operand(av, m, k, sa, lazy_a), b = operand(bv, k, n, sb, lazy_b);
        CAPTURE(trial, dax::to_string(mesh), axis, dax::to_string(sa), dax::to_string(sb), lazy_a, lazy_b, m, k, n);

        const auto gathered = dax::all_gather_matmul(a, b, axis);
        CHECK(gathered.sharding() == laid_out(mesh, {}, sb.dim_axes(1)));
        CHECK(gathered.shape() == Shape{m, n});
        if (gathered.is_addressable()) CHECK(host(gathered) == want);

        const NamedSharding sb_rs = without_n_axis(sb, x);
        const auto b_rs = operand(bv, k, n, sb_rs, lazy_b);
        const auto scattered = dax::matmul_reduce_scatter(a, b_rs, axis);
        CHECK(scattered.sharding() == laid_out(mesh, {x}, sb_rs.dim_axes(1)));
        CHECK(scattered.shape() == Shape{m, n});
        if (scattered.is_addressable()) CHECK(host(scattered) == want);
      }
    }
  }
}

TEST_CASE("collective matmuls on the 1-d mesh of every rank: the ring's exchanges",
          "[ops][matmul][collective_matmul]") {
  const int p = dax::test::world_size();
  const Mesh line({p}, {"x"});
  std::mt19937 rng(31);
  // Blocks of 3 rows (the last short), and of 601 rows: several GEMM tiles a block, the exchange
  // tested between them.
  const int64_t m = GENERATE(as<int64_t>(), 0, 600) * p + 2 * p + 1, k = p + 4, n = 5, chunk = (m + p - 1) / p;
  CAPTURE(m);
  const auto av = dax::test::random_values<double>(m * k, rng);
  const auto bv = dax::test::random_values<double>(k * n, rng);
  const auto want = dax::test::matmul_reference(av, bv, m, k, n);

  // Operands already where the ring wants them: its p - 1 neighbour exchanges are all it moves.
  const auto a_rows = dax::device_put(av, {m, k}, NamedSharding(line, P("x")));
  const auto b_whole = dax::device_put(bv, {k, n}, NamedSharding(line, P()));
  dax::comm_stats().reset();
  const auto gathered = dax::all_gather_matmul(a_rows, b_whole, "x");
  CHECK(dax::comm_stats().total_calls() == p - 1);
  CHECK(dax::comm_stats().of("ppermute", "('x',)").bytes == (p - 1) * chunk * k * int64_t(sizeof(double)));
  CHECK(host(gathered) == want);

  const auto a_columns = dax::device_put(av, {m, k}, NamedSharding(line, P(dax::none, "x")));
  const auto b_rows = dax::device_put(bv, {k, n}, NamedSharding(line, P("x")));
  dax::comm_stats().reset();
  const auto scattered = dax::matmul_reduce_scatter(a_columns, b_rows, "x");
  CHECK(dax::comm_stats().total_calls() == p - 1);
  CHECK(dax::comm_stats().of("ppermute", "('x',)").bytes == (p - 1) * chunk * n * int64_t(sizeof(double)));
  CHECK(scattered.sharding() == NamedSharding(line, P("x")));
  CHECK(host(scattered) == want);

  // b's N split over the ring's own axis: each device multiplies every row block by its columns.
  const auto b_columns = dax::device_put(bv, {k, n}, NamedSharding(line, P(dax::none, "x")));
  const auto by_columns = dax::all_gather_matmul(a_rows, b_columns, "x");
  CHECK(by_columns.sharding() == NamedSharding(line, P(dax::none, "x")));
  CHECK(host(by_columns) == want);
}

TEST_CASE("collective matmuls have matmul's gradients", "[ops][matmul][collective_matmul][autodiff]") {
  Pick pick(77);
  std::mt19937 rng(78);
  const auto meshes = dax::test::meshes_that_fit();
  for (int trial = 0; trial < 12; ++trial) {
    const Mesh& mesh = meshes[pick(meshes.size())];
    const int x = static_cast<int>(pick(mesh.num_axes()));
    const std::string axis = mesh.axis_names()[x];
    const int64_t m = 2 * mesh.axis_size(x) + 1, k = 4 + trial % 3, n = 3 + trial % 4;
    const bool scatter = trial % 2 == 1;
    const NamedSharding sa = random_sharding(pick, mesh, 2);
    const NamedSharding drawn = random_sharding(pick, mesh, 2);
    const NamedSharding sb = scatter ? without_n_axis(drawn, x) : drawn;
    const NamedSharding sw = random_sharding(pick, mesh, 2);
    CAPTURE(trial, dax::to_string(mesh), axis, scatter, dax::to_string(sa), dax::to_string(sb));
    const dax::test::Params params{dax::device_put(dax::test::uniform(m * k, rng), {m, k}, sa),
                                   dax::device_put(dax::test::uniform(k * n, rng), {k, n}, sb)};
    const auto weights = dax::device_put(dax::test::uniform(m * n, rng), {m, n}, sw);
    auto loss = [&](bool collective) {
      return [&, collective](const dax::test::Params& p) {
        const auto c = !collective ? dax::matmul(p[0], p[1])
                       : scatter   ? dax::matmul_reduce_scatter(p[0], p[1], axis)
                                   : dax::all_gather_matmul(p[0], p[1], axis);
        return dax::sum(c * weights);
      };
    };
    const auto [value, grads] = dax::value_and_grad(loss(true))(params);
    const auto [want_value, want_grads] = dax::value_and_grad(loss(false))(params);
    if (!params[0].is_addressable()) continue;
    CHECK(dax::test::scalar(value) == Approx(dax::test::scalar(want_value)).epsilon(1e-10));
    for (size_t i = 0; i < 2; ++i) {
      CHECK(grads[i].sharding() == params[i].sharding());
      const auto got = grads[i].to_host(), expected = want_grads[i].to_host();
      REQUIRE(got.size() == expected.size());
      for (size_t j = 0; j < got.size(); ++j) CHECK(got[j] == Approx(expected[j]).epsilon(1e-10).margin(1e-12));
    }
  }
}

TEST_CASE("collective matmuls reject bad operands on every rank", "[ops][matmul][collective_matmul][errors]") {
  const int p = dax::test::world_size();
  const Mesh line({p}, {"x"});
  const NamedSharding whole(line, P());
  std::mt19937 rng(5);
  const auto a = dax::device_put(dax::test::random_values<float>(6 * 4, rng), {6, 4}, whole);
  const auto b = dax::device_put(dax::test::random_values<float>(4 * 3, rng), {4, 3}, whole);
  const auto cube = dax::device_put(dax::test::random_values<float>(2 * 6 * 4, rng), {2, 6, 4}, whole);
  const auto wrong_k = dax::device_put(dax::test::random_values<float>(5 * 3, rng), {5, 3}, whole);
  using dax::test::error_of;
  for (const std::string op : {"all_gather_matmul", "matmul_reduce_scatter"}) {
    auto call = [&](const DistArray<float>& l, const DistArray<float>& r, const std::string& axis) {
      return error_of([&] {
        if (op == "all_gather_matmul") dax::all_gather_matmul(l, r, axis);
        else dax::matmul_reduce_scatter(l, r, axis);
      });
    };
    CHECK(call(cube, b, "x") ==
          op + ": expected 2-d operands (M, K) and (K, N), got (2, 6, 4) and (4, 3)");
    CHECK(call(a, wrong_k, "x") == op + ": contraction dimensions differ: (6, 4) @ (5, 3) (4 vs 5)");
    CHECK(call(a, b, "model") == op + ": expected an axis of " + dax::to_string(line) + ", got 'model'");
    const Mesh other({p}, {"y"});
    const auto elsewhere =
        dax::device_put(dax::test::random_values<float>(4 * 3, rng), {4, 3}, NamedSharding(other, P()));
    CHECK(call(a, elsewhere, "x") == op + ": operands must be on the same mesh, got " + dax::to_string(line) +
                                         " and " + dax::to_string(other));
  }
  const auto b_over_x = dax::device_put(dax::test::random_values<float>(4 * 3, rng), {4, 3},
                                        NamedSharding(line, P(dax::none, "x")));
  CHECK(error_of([&] { dax::matmul_reduce_scatter(a, b_over_x, "x"); }) ==
        "matmul_reduce_scatter: b's N dimension is split over 'x', the axis the result's rows are scattered "
        "over; expected b's N split over other axes, got P(None, 'x')");
}
