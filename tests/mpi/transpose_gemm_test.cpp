// Transposes of the last two dimensions are views: matmul hands them to BLAS as a transpose flag
// (no copy: the allocator sees only the output), a reshard moves the stored piece and stays a view,
// and every other reader sees the row-major values. Random shardings at every rank count, compared
// with loops on the global arrays.
#include <catch2/catch.hpp>

#include "helpers.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::host;
using dax::test::Pick;
using dax::test::random_mesh;
using dax::test::matmul_reference;
using dax::test::random_sharding;
using dax::test::swap_last_two;

namespace {

/// Requests to the caching allocator of the backend that runs.
int64_t allocator_requests() {
#if DAX_CUDA_BACKEND
  if (dax::Runtime::current().backend() == dax::Backend::cuda)
    return dax::detail::cuda::device_allocator()->stats().requests;
#endif
  return dax::detail::cpu::host_allocator()->stats().requests;
}

}  // namespace

TEMPLATE_TEST_CASE("matmul of lazy transposes on random shardings", "[ops][matmul][transpose]", float, double,
                   int32_t) {
  using T = TestType;
  Pick pick(7);
  std::mt19937 rng(11);
  const std::vector<std::array<int64_t, 3>> sizes{{5, 7, 3}, {8, 8, 8}, {1, 6, 4}, {9, 2, 5}, {4, 0, 3}};
  for (int trial = 0; trial < 40; ++trial) {
    const auto [m, k, n] = sizes[trial % sizes.size()];
    const Mesh& mesh = random_mesh(pick);
    const bool ta = trial % 2 == 0, tb = trial % 3 == 0;
    const Shape as = ta ? Shape{k, m} : Shape{m, k}, bs = tb ? Shape{n, k} : Shape{k, n};
    const auto av = dax::test::random_values<T>(dax::numel(as), rng);
    const auto bv = dax::test::random_values<T>(dax::numel(bs), rng);
    const NamedSharding sa = random_sharding(pick, mesh, 2), sb = random_sharding(pick, mesh, 2);
    const auto a = dax::device_put(av, as, sa), b = dax::device_put(bv, bs, sb);
    const auto lhs = ta ? dax::transpose(a) : a;
    const auto rhs = tb ? b.T() : b;
    CAPTURE(trial, dax::to_string(mesh), dax::to_string(sa), dax::to_string(sb), ta, tb);
    CHECK(lhs.stores_swapped() == (ta && a.is_addressable()));
    const auto c = dax::matmul(lhs, rhs);
    const auto want = matmul_reference(ta ? swap_last_two(av, as) : av, tb ? swap_last_two(bv, bs) : bv, m, k, n);
    if (c.is_addressable()) CHECK(host(c) == want);
    // The views read as row-major arrays everywhere else, and a transpose of a transpose is the array.
    if (ta && a.is_addressable()) {
      CHECK(host(lhs) == swap_last_two(av, as));
      CHECK(host(dax::transpose(lhs)) == av);
      CHECK(!dax::transpose(lhs).stores_swapped());
    }
  }
}

TEST_CASE("a lazy transpose reshards as a view and reads back row-major", "[array][transpose]") {
  Pick pick(3);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 30; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape shape = trial % 2 ? Shape{3, 5, 7} : Shape{6, 4};
    const auto values = dax::test::random_values<float>(dax::numel(shape), rng);
    const auto x = dax::device_put(values, shape, random_sharding(pick, mesh, shape.size()));
    const auto t = x.ndim() == 2 ? x.T() : dax::transpose(x, {0, 2, 1});
    const NamedSharding target = random_sharding(pick, mesh, shape.size());
    CAPTURE(trial, dax::to_string(mesh), dax::to_string(x.sharding()), dax::to_string(target));
    const auto moved = dax::reshard(t, target);
    CHECK(moved.sharding() == target);
    if (!x.is_addressable()) continue;
    CHECK(moved.stores_swapped());
    CHECK(host(moved) == swap_last_two(values, shape));
    const auto shards = moved.addressable_shards();
    REQUIRE(shards.size() == 1);
    CHECK(shards[0].data.to_vector() == dax::test::slice_of(swap_last_two(values, shape), moved.shape(), shards[0].index));
  }
}

TEST_CASE("matmul(x.T(), g) copies nothing before the GEMM", "[ops][matmul][transpose]") {
  // Data parallel weight gradient: h and g split over the batch; the product contracts the batch,
  // so no operand moves and the only allocation is the local product.
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"data"});
  std::mt19937 rng(1);
  const int64_t batch = 4 * n + 1, in = 6, out = 5;
  const auto hv = dax::test::random_values<float>(batch * in, rng), gv = dax::test::random_values<float>(batch * out, rng);
  const auto h = dax::device_put(hv, {batch, in}, NamedSharding(mesh, P("data"))),
             g = dax::device_put(gv, {batch, out}, NamedSharding(mesh, P("data")));
  const NamedSharding partial(mesh, P().with_unreduced({"data"}));
  const auto ht = h.T();
  const int64_t before = allocator_requests();
  const auto dw = dax::matmul(ht, g, partial);
  CHECK(allocator_requests() - before == 1);
  CHECK(dw.sharding() == partial);
  CHECK(host(dw) == matmul_reference(swap_last_two(hv, Shape{batch, in}), gv, in, batch, out));
}
