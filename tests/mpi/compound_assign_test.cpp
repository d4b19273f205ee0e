// Compound assignment keeps the left operand's sharding (issue 16, part 6): the 2x2 data x model
// case of the issue, then random operands (partial sums, broadcasting, uneven shapes) against a
// loop on the global arrays.
#include <catch2/catch.hpp>

#include <cmath>

#include "helpers.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::error_of;
using dax::test::host;
using dax::test::Pick;
using dax::test::source_index;
using dax::test::world_size;

namespace {

/// An array holding `values` under `s`, made a partial sum by a reshard when `s` is unreduced.
template <class T>
dax::DistArray<T> put(const std::vector<T>& values, const Shape& shape, const NamedSharding& s) {
  const NamedSharding reduced = dax::detail::with_unreduced_axes(s, shape.size(), {});
  return dax::reshard(dax::device_put(values, shape, reduced), s);
}

}  // namespace

TEST_CASE("w -= lr * g keeps w's layout when g's is finer (the 2x2 data x model MLP)", "[ops][compound]") {
  const int n = world_size();
  const Mesh mesh(n >= 4 ? Shape{2, 2} : Shape{1, n >= 2 ? 2 : 1}, {"data", "model"});
  const Shape shape{6, 5};  // uneven over 'model'
  std::mt19937 rng(7);
  const auto w_host = dax::test::random_values<float>(30, rng);
  const auto g_host = dax::test::random_values<float>(30, rng);
  const NamedSharding ws(mesh, P(dax::none, "model"));
  const auto w1 = dax::device_put(w_host, shape, ws);
  const std::vector<NamedSharding> grads{
      NamedSharding(mesh, P(dax::none, dax::axes("model", "data"))),
      NamedSharding(mesh, P("data", "model")),
      NamedSharding(mesh, P(dax::none, "model").with_unreduced("data")),
      NamedSharding(mesh, P("data", dax::none).with_unreduced("model")),
      NamedSharding(mesh, P()),
  };
  std::vector<float> want(30);
  for (int i = 0; i < 30; ++i) want[i] = w_host[i] - 0.5f * g_host[i];
  for (const auto& gs : grads) {
    INFO(dax::to_string(gs));
    const auto g = put(g_host, shape, gs);
    auto w = w1;
    w -= 0.5f * g;
    CHECK(w.sharding() == ws);
    if (w.is_addressable()) CHECK(host(w) == want);
    auto v = w1;  // again, every step keeps it
    v += g;
    v -= g * 1.5f;
    CHECK(v.sharding() == ws);
    if (v.is_addressable()) CHECK(host(v) == want);
  }
}

TEMPLATE_TEST_CASE("compound assignment on random shardings keeps the left operand's", "[ops][compound]", float,
                   double, int32_t, int64_t) {
  using T = TestType;
  Pick pick(900 + sizeof(T) + std::is_integral_v<T>);
  const std::vector<std::pair<Shape, Shape>> pairs{{{5, 6}, {5, 6}}, {{7, 3}, {3}},      {{4, 3, 5}, {3, 5}},
                                                   {{6}, {}},        {{2, 3, 4}, {2, 1, 4}}, {{0, 3}, {3}},
                                                   {{5, 6}, {1, 6}}};
  for (int trial = 0; trial < 28; ++trial) {
    const auto& [as, bs] = pairs[trial % pairs.size()];
    const Mesh& mesh = dax::test::random_mesh(pick);
    const NamedSharding sa = dax::test::random_sharding(pick, mesh, as.size(), true);
    const NamedSharding sb = dax::test::random_sharding(pick, mesh, bs.size(), true);
    const int op = static_cast<int>(pick(4));
    auto av = dax::test::random_values<T>(dax::numel(as), pick.rng);
    auto bv = dax::test::random_values<T>(dax::numel(bs), pick.rng);
    for (auto& x : bv)
      if (x == T(0)) x = T(3);
    INFO("trial " << trial << " op " << op << " a " << dax::to_string(as) << " " << dax::to_string(sa) << " b "
                  << dax::to_string(bs) << " " << dax::to_string(sb));
    auto a = put(av, as, sa);
    const auto b = put(bv, bs, sb);
    std::vector<T> want(av.size());
    for (int64_t i = 0; i < dax::numel(as); ++i) {
      const T x = av[i], y = bv[source_index(bs, as, i)];
      want[i] = op == 0 ? T(x + y) : op == 1 ? T(x - y) : op == 2 ? T(x * y) : T(x / y);
    }
    if (op == 0) a += b;
    if (op == 1) a -= b;
    if (op == 2) a *= b;
    if (op == 3) a /= b;
    CHECK(a.sharding() == sa);
    const auto got = host(a);
    if (!a.is_addressable()) continue;
    if constexpr (std::is_floating_point_v<T>) {  // a partial sum divides piece by piece
      for (size_t i = 0; i < want.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= 1e-5 * std::abs(want[i]));
    } else {
      CHECK(got == want);
    }

    // With a scalar.
    auto c = put(av, as, sa);
    const T s = T(op + 2);
    if (op == 0) c += s;
    if (op == 1) c -= s;
    if (op == 2) c *= s;
    if (op == 3) c /= s;
    CHECK(c.sharding() == sa);
    const auto got_c = host(c);
    if (!c.is_addressable()) continue;
    for (size_t i = 0; i < av.size(); ++i) {
      const T x = av[i];
      const T w = op == 0 ? T(x + s) : op == 1 ? T(x - s) : op == 2 ? T(x * s) : T(x / s);
      if constexpr (std::is_floating_point_v<T>) CHECK(std::abs(got_c[i] - w) <= 1e-5 * std::abs(w));
      else CHECK(got_c[i] == w);
    }
  }
}

TEST_CASE("compound assignment refuses a right operand that would change the left's shape", "[ops][compound]") {
  const Mesh mesh({1}, {"x"});
  const NamedSharding s(mesh, P());
  auto a = dax::zeros<float>({3}, s);
  const auto b = dax::ones<float>({2, 3}, s);
  CHECK(error_of([&] { a += b; }) ==
        "operator+=: the right operand's shape (2, 3) must broadcast to the left operand's shape (3,) (compound "
        "assignment keeps the left operand's shape and sharding)");
  const auto c = dax::ones<float>({3}, NamedSharding(Mesh({1}, {"y"}), P()));
  CHECK(error_of([&] { a *= c; }) ==
        "operator*=: the operands must be on the same mesh, got Mesh('x': 1) and Mesh('y': 1)");
}
