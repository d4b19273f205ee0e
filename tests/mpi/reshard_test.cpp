// Hundreds of random reshards per run, each compared element by element with the pieces computed
// in this process from the same global partial sums (every rank draws the same random numbers).
#include <catch2/catch.hpp>
#include <mpi.h>

#include "../common/simulate.hpp"
#include "helpers.hpp"

#include <dax/comm/cma_exchange.hpp>  // dax::detail::cma_counts, an internal counter

#include <cstdlib>
#include <string>

using dax::Mesh;
using dax::NamedSharding;
using dax::Shape;

namespace {

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <class T>
void random_reshard(std::mt19937& rng, const std::vector<Mesh>& meshes, int trial) {
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const Mesh& mesh = meshes[pick(meshes.size())];
  Shape shape(pick(4));
  for (auto& d : shape) d = static_cast<int64_t>(pick(8));  // 0..7: uneven and empty among them
  const auto shardings = dax::test::all_shardings(mesh, shape.size(), true);
  const NamedSharding& src = shardings[pick(shardings.size())];
  const NamedSharding& dst = shardings[pick(shardings.size())];
  const auto partials = dax::test::random_partials(shape, src, rng);
  const int rank = dax::test::world_rank();
  INFO("trial " << trial << ": " << dax::explain(shape, dax::dtype_v<T>, src, dst));
  if (!mesh.contains(rank)) {
    // Ranks outside the mesh take no part; they must not be waited on.
    const auto x = dax::from_local(std::vector<T>{}, shape, src);
    REQUIRE_FALSE(dax::reshard(x, dst).is_addressable());
    return;
  }
  const auto mine = dax::test::pieces_of_partials(shape, partials, src).at(rank);
  const auto x = dax::from_local(as<T>(mine), shape, src);
  const auto y = dax::reshard(x, dst);
  const auto want = dax::test::expected_pieces(shape, partials, dst).at(rank);
  REQUIRE(y.local_to_host() == as<T>(want));
  REQUIRE(y.sharding() == dst);
  if (trial % 5 == 0) REQUIRE(y.to_host() == as<T>(partials.total()));
}

}  // namespace

TEST_CASE("random reshards on random meshes, shapes and specs", "[reshard]") {
  std::mt19937 rng(20261121);
  const auto meshes = dax::test::meshes_that_fit();
  for (int trial = 0; trial < 400; ++trial) {
    switch (trial % 4) {
      case 0: random_reshard<float>(rng, meshes, trial); break;
      case 1: random_reshard<double>(rng, meshes, trial); break;
      case 2: random_reshard<int32_t>(rng, meshes, trial); break;
      default: random_reshard<int64_t>(rng, meshes, trial); break;
    }
  }
}

TEST_CASE("the quickstart reshard on a 2x2 mesh", "[reshard]") {
  if (dax::test::world_size() < 4) return;
  const Mesh mesh({2, 2}, {"data", "model"});
  std::vector<float> host(70);
  for (int i = 0; i < 70; ++i) host[i] = float(i);
  const auto x = dax::device_put(host, {10, 7}, NamedSharding(mesh, dax::P("data", "model")));
  const auto y = dax::reshard(x, NamedSharding(mesh, dax::P(dax::none, dax::axes("data", "model"))));
  if (dax::test::world_rank() < 4) {
    // Columns split 4 ways: chunk 2 -> [0,2), [2,4), [4,6), [6,7).
    const int r = dax::test::world_rank();
    const int64_t c0 = 2 * r, c1 = std::min<int64_t>(2 * r + 2, 7);
    REQUIRE(y.local_shape() == Shape{10, c1 - c0});
    REQUIRE(y.to_host() == host);
  }
}

TEST_CASE("strided all-to-alls of several chunks land exactly", "[reshard]") {
  // Strided regions large enough for the cross-memory-attach path (where the machine allows it;
  // MPI datatypes otherwise, and under DAX_CMA=0): more runs per member than one batch of 1,024
  // iovecs, uneven pieces, runs cut differently on the two sides, 3-D, both directions.
  const int n = dax::test::world_size();
  const Mesh line({n}, {"x"});
  const auto before = dax::detail::cma_counts();
  auto check = [](const Shape& shape, const NamedSharding& from, const NamedSharding& to, auto zero) {
    using T = decltype(zero);
    std::vector<T> host(static_cast<size_t>(dax::numel(shape)));
    for (size_t i = 0; i < host.size(); ++i) host[i] = T(i % 100003);
    INFO(dax::explain(shape, dax::dtype_v<T>, from, to));
    const auto x = dax::device_put(host, shape, from);
    const auto y = dax::reshard(x, to);
    REQUIRE(y.sharding() == to);
    REQUIRE(y.to_host() == host);
    REQUIRE(dax::reshard(y, from).local_to_host() == x.local_to_host());
  };
  check({2100, 700}, NamedSharding(line, dax::P("x")), NamedSharding(line, dax::P(dax::none, "x")), double{});
  // Runs of at least 1 KiB at every rank count up to 8, so the path is taken there too.
  check({1024, 8200}, NamedSharding(line, dax::P("x")), NamedSharding(line, dax::P(dax::none, "x")), float{});
  check({1203, 1031}, NamedSharding(line, dax::P("x")), NamedSharding(line, dax::P(dax::none, "x")), float{});
  check({40, 30, 701}, NamedSharding(line, dax::P("x")), NamedSharding(line, dax::P(dax::none, dax::none, "x")),
        double{});
  if (n >= 4) {
    const Mesh grid({2, n / 2}, {"a", "b"});
    check({1203, 1031}, NamedSharding(grid, dax::P(dax::axes("a", "b"))),
          NamedSharding(grid, dax::P(dax::none, dax::axes("a", "b"))), float{});
    check({1203, 1031}, NamedSharding(grid, dax::P("a", "b")), NamedSharding(grid, dax::P("b", "a")), double{});
  }
  // On one node these went by cross-memory attach, unless it was turned off or the system refused it;
  // a group with members on other nodes (tests/reliability/two_nodes.sh) goes by MPI's datatypes.
  const char* off = std::getenv("DAX_CMA");
  const auto after = dax::detail::cma_counts();
  if (n > 1 && !(off && std::string(off) == "0"))
    REQUIRE((after.exchanges > before.exchanges || after.groups_refused > before.groups_refused ||
             after.groups_across_nodes > before.groups_across_nodes));
  if (after.groups_across_nodes > before.groups_across_nodes) REQUIRE(after.mpi_exchanges > before.mpi_exchanges);
  // A rank offers its receive piece for its senders to write into (a shareable block), unless
  // DAX_PEER_WRITES=0 on it; a test runs half the ranks that way, and those write into the others'
  // pieces by the kernel. With every rank offering, nothing goes by the kernel; with none, the
  // kernel copies it all, and rows -> columns writes whole rows of the other side's piece: the runs
  // there follow on from one another and go to the kernel as far fewer iovecs than segments (it
  // pins once per iovec).
  const char* peer_off = std::getenv("DAX_PEER_WRITES");
  const bool peer_writes = !(peer_off && std::string(peer_off) == "0");
  // On the GPU (the MPI transport staging device pieces through pinned host buffers) no receive
  // piece is a shareable block: nothing is offered, every copy goes by the kernel.
  const bool host_pieces = dax::Runtime::current().backend() == dax::Backend::cpu;
  bool shareable = false;  // whether this system gives shareable blocks at all (memfd)
  if (void* probe = host_pieces ? dax::detail::NodeSharedBlocks::process().create(4096) : nullptr) {
    shareable = true;
    dax::detail::NodeSharedBlocks::process().destroy(probe);
  }
  int all_offer = peer_writes && shareable ? 1 : 0, none_offer = peer_writes ? 0 : 1;
  MPI_Allreduce(MPI_IN_PLACE, &all_offer, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &none_offer, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (after.exchanges > before.exchanges) {
    if (!peer_writes) {
      REQUIRE(after.published == before.published);
      REQUIRE(after.peer_writes == before.peer_writes);
    } else if (shareable) {
      REQUIRE(after.published > before.published);
    }
    if (all_offer) {
      REQUIRE(after.peer_writes > before.peer_writes);
      REQUIRE(after.segments == before.segments);
    }
    if (none_offer) REQUIRE(after.remote_iovecs - before.remote_iovecs < (after.segments - before.segments) / 2);
  }
  if (off && std::string(off) == "0") REQUIRE(after.exchanges == before.exchanges);
}

TEST_CASE("ranks that run different strided exchanges stop before anything is copied", "[reshard][cma_divergence]") {
  // Both exchanges are prepared together first (preparing is collective); then rank 0 runs one and
  // the others the other. With DAX_CHECK_COLLECTIVES=1 the fingerprints catch it; under the light
  // check (whose records cannot tell two exchanges apart) the exchange's own number does, on every
  // rank, before any rank writes into another's memory.
  const int n = dax::test::world_size();
  if (n < 2) return;
  // The exchange's number travels in the cross-memory-attach path, which needs every member on one
  // node. Across nodes (tests/reliability/two_nodes.sh) the light check's records cannot tell the two
  // exchanges apart and MPI refuses the mismatched sizes instead (DAX_CHECK_COLLECTIVES=1 names it).
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int on_node = 0;
  MPI_Comm_size(node, &on_node);
  MPI_Comm_free(&node);
  int one_node = on_node == n ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &one_node, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!one_node) return;
  const Mesh line({n}, {"x"});
  const NamedSharding rows(line, dax::P("x")), cols(line, dax::P(dax::none, "x"));
  const auto a = dax::arange<float>({64, 16384}, rows);
  const auto b = dax::arange<float>({64, 32768}, rows);
  REQUIRE(dax::reshard(a, cols).to_host() == a.to_host());
  REQUIRE(dax::reshard(b, cols).to_host() == b.to_host());
  const auto& mine = dax::test::world_rank() == 0 ? a : b;
  const std::string error = dax::test::error_of([&] { (void)dax::reshard(mine, cols); });
  INFO(error);
  CHECK(error.find("diverged") != std::string::npos);
  REQUIRE(dax::reshard(a, cols).to_host() == a.to_host());  // the group is still usable
}
