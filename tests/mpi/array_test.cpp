// DistArray on the CPU backend: creation, to_host, shards, Eigen views, ranks outside the mesh.
#include <catch2/catch.hpp>

#include "helpers.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;

namespace {

template <class T>
void check_round_trips(std::mt19937& rng) {
  for (const Mesh& mesh : dax::test::meshes_that_fit()) {
    for (const Shape& shape : std::vector<Shape>{{}, {7}, {0}, {5, 3}, {4, 0}, {3, 4, 5}}) {
      for (const NamedSharding& s : dax::test::all_shardings(mesh, shape.size(), false)) {
        const auto host = dax::test::random_values<T>(dax::numel(shape), rng);
        const auto x = dax::device_put(host, shape, s);
        REQUIRE(x.shape() == shape);
        REQUIRE(x.dtype() == dax::dtype_v<T>);
        if (!mesh.contains(dax::test::world_rank())) {
          REQUIRE_FALSE(x.is_addressable());
          REQUIRE(x.addressable_shards().empty());
          continue;
        }
        const auto shards = x.addressable_shards();
        REQUIRE(shards.size() == 1);
        REQUIRE(shards[0].device == dax::test::world_rank());
        REQUIRE(shards[0].index == s.device_indices(dax::test::world_rank(), shape));
        REQUIRE(shards[0].data.to_vector() == dax::test::slice_of(host, shape, shards[0].index));
        REQUIRE(x.to_host() == host);
      }
    }
  }
}

}  // namespace

TEST_CASE("device_put and to_host round trip for every dtype, mesh and spec", "[array]") {
  std::mt19937 rng(1);
  check_round_trips<float>(rng);
  check_round_trips<double>(rng);
  check_round_trips<int32_t>(rng);
  check_round_trips<int64_t>(rng);
}

TEST_CASE("the local piece as Eigen maps", "[array]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  std::mt19937 rng(2);
  const auto host = dax::test::random_values<double>(6 * n * 5, rng);
  const auto x = dax::device_put(host, {6 * n, 5}, NamedSharding(mesh, P("x")));
  if (dax::Runtime::current().backend() == dax::Backend::cuda) {  // the piece is in GPU memory
    CHECK(dax::test::error_of([&] { (void)x.local_matrix(); }) ==
          "local_matrix: the local piece is in GPU memory on the CUDA backend, which an Eigen map on the host cannot "
          "read; copy it to the host with local_to_host(), or pass local_data() to device code");
    CHECK(dax::test::error_of([&] { (void)x.local_vector(); }).rfind("local_vector: the local piece is in GPU memory", 0) == 0);
    return;
  }
  const auto m = x.local_matrix();
  REQUIRE(m.rows() == 6);
  REQUIRE(m.cols() == 5);
  const int64_t row0 = 6 * dax::test::world_rank();
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j) REQUIRE(m(i, j) == host[(row0 + i) * 5 + j]);
  REQUIRE(x.local_vector().size() == 30);
  REQUIRE(x.local_vector()(7) == host[row0 * 5 + 7]);
}

TEST_CASE("constant and range fills", "[array]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  const NamedSharding rows(mesh, P("x"));
  CHECK(dax::zeros<float>({5, 3}, rows).to_host() == std::vector<float>(15, 0.0f));
  CHECK(dax::ones<int32_t>({4}, rows).to_host() == std::vector<int32_t>(4, 1));
  CHECK(dax::full<double>({3, 2}, 2.5, rows).to_host() == std::vector<double>(6, 2.5));
  std::vector<int64_t> want(3 * 7);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<int64_t>(i);
  CHECK(dax::arange<int64_t>({3, 7}, NamedSharding(mesh, P(dax::none, "x"))).to_host() == want);
  CHECK(dax::arange<float>(5, rows).to_host() == std::vector<float>{0, 1, 2, 3, 4});
}

TEST_CASE("make_array_from_callback asks each rank for its piece", "[array]") {
  for (const Mesh& mesh : dax::test::meshes_that_fit()) {
    const Shape shape{5, 6};
    std::vector<float> host(30);
    for (int i = 0; i < 30; ++i) host[i] = 0.5f * float(i) - 3.0f;
    for (const NamedSharding& s : dax::test::all_shardings(mesh, 2, false)) {
      int calls = 0;
      const auto x = dax::make_array_from_callback<float>(shape, s, [&](const std::vector<dax::Slice>& index) {
        ++calls;
        return dax::test::slice_of(host, shape, index);
      });
      if (!mesh.contains(dax::test::world_rank())) continue;
      REQUIRE(calls == 1);
      REQUIRE(x.to_host() == host);
    }
  }
}

TEST_CASE("from_local builds sharded and unreduced arrays from each rank's part", "[array]") {
  const int n = dax::test::world_size();
  const int r = dax::test::world_rank();
  const Mesh mesh({n}, {"x"});
  // Row-sharded: each rank its rows.
  const Shape shape{2 * n + 1, 3};
  std::vector<double> host(dax::numel(shape));
  for (size_t i = 0; i < host.size(); ++i) host[i] = double(i) * 1.5;
  const NamedSharding rows(mesh, P("x"));
  const auto mine = dax::test::slice_of(host, shape, rows.device_indices(r, shape));
  CHECK(dax::from_local(mine, shape, rows).to_host() == host);
  // Unreduced: rank r holds (r + 1) * base; the value is the sum.
  const NamedSharding partial(mesh, P().with_unreduced("x"));
  std::vector<int64_t> base{3, -1, 4, 1, -5, 9};
  std::vector<int64_t> part(base.size()), want(base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    part[i] = base[i] * (r + 1);
    want[i] = base[i] * n * (n + 1) / 2;
  }
  CHECK(dax::from_local(part, {2, 3}, partial).to_host() == want);
  // device_put of a value onto an unreduced sharding keeps the value: zeros beside coordinate 0.
  const auto v = dax::device_put(base, {2, 3}, partial);
  CHECK(v.local_data()[0] == (r == 0 ? 3 : 0));
  CHECK(v.to_host() == base);
}

TEST_CASE("ranks outside a smaller mesh hold nothing and are not waited on", "[array]") {
  if (dax::test::world_size() < 2) return;
  const Mesh small({2}, {"x"}, {dax::test::world_size() - 1, 0});
  std::vector<float> host{1, 2, 3, 4, 5};
  const auto x = dax::device_put(host, {5}, NamedSharding(small, P("x")));
  const auto y = dax::reshard(x, NamedSharding(small, P()));
  if (small.contains(dax::test::world_rank())) {
    CHECK(y.to_host() == host);
    CHECK(y.local_data().size() == 5);
  } else {
    CHECK_FALSE(y.is_addressable());
    CHECK_THROWS_AS(y.to_host(), dax::Error);
  }
}

TEST_CASE("a steady-state loop of reshards allocates nothing new", "[array][memory]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  std::mt19937 rng(3);
  const auto host = dax::test::random_values<float>(64 * 48, rng);
  auto x = dax::device_put(host, {64, 48}, NamedSharding(mesh, P("x")));
  const NamedSharding cols(mesh, P(dax::none, "x")), rows(mesh, P("x")), repl(mesh, P());
  auto cycle = [&] {
    auto a = dax::reshard(x, cols);
    auto b = dax::reshard(a, repl);
    auto c = dax::reshard(b, rows);
    return c;
  };
  for (int i = 0; i < 3; ++i) x = cycle();
  const auto before = dax::detail::cpu::host_allocator()->stats();
  for (int i = 0; i < 20; ++i) x = cycle();
  const auto after = dax::detail::cpu::host_allocator()->stats();
  CHECK(after.system_allocations == before.system_allocations);
  if (n > 1) CHECK(after.requests > before.requests);  // one device shares its buffer throughout
  CHECK(x.to_host() == host);
}

TEST_CASE("comm_stats counts what each reshard moved", "[array][comm_stats]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  const auto x = dax::arange<float>({8 * n, 4}, NamedSharding(mesh, P("x")));
  dax::comm_stats().reset();
  const auto r = dax::reshard(x, NamedSharding(mesh, P()));
  const auto s = dax::reshard(r, NamedSharding(mesh, P(dax::none, "x")));
  (void)s;
  if (n == 1) {
    CHECK(dax::comm_stats().total_bytes() == 0);
  } else {
    CHECK(dax::comm_stats().of("all_gather", "('x',)").calls == 1);
    CHECK(dax::comm_stats().of("all_gather").bytes == int64_t(8 * (n - 1) * 4 * sizeof(float)));
    CHECK(dax::comm_stats().total_bytes() == int64_t(8 * (n - 1) * 4 * sizeof(float)));  // the slice is free
  }
  dax::comm_stats().reset();
  CHECK(dax::comm_stats().total_calls() == 0);
}
