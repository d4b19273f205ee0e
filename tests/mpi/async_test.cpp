// Nonblocking collectives and dax::reshard_async: every start_* call of the communicator gives what
// its blocking form gives, checked against a plain loop over every member's contribution; test()
// reaches true without wait(); reshard_async gives reshard's values, sharding and gradient on random
// meshes and specs (uneven shapes), also with several reshards in flight at once and when the
// handle is moved or dropped.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "helpers.hpp"

namespace {

using dax::DType;
using dax::detail::Communicator;
using dax::detail::ReduceOp;

Communicator& everyone() {
  static const dax::Mesh mesh({dax::test::world_size()}, {"all"});
  return dax::Runtime::current().group(mesh, {0});
}

/// Member m's values: small integers, exact in any order of summation.
std::vector<double> values_of(int member, int64_t count, unsigned seed) {
  std::mt19937 gen(seed * 977 + static_cast<unsigned>(member));
  std::uniform_int_distribution<int> small(-40, 40);
  std::vector<double> v(static_cast<size_t>(count));
  for (double& x : v) x = small(gen);
  return v;
}

template <class T>
std::vector<T> fresh(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  return dax::test::random_values<T>(n, rng);
}

/// Spins on test() (the way a program interleaves work) until the call ends.
void spin(dax::detail::PendingCollective& p) {
  for (int i = 0; i < 100000000 && !p.test(); ++i) {
  }
  REQUIRE(p.test());
  p.wait();  // a finished call's wait returns at once
}

}  // namespace

TEST_CASE("start_all_gatherv, start_all_reduce, start_reduce_scatter match a plain loop", "[async]") {
  Communicator& c = everyone();
  const int n = c.size(), me = c.rank();
  for (unsigned seed = 1; seed <= 3; ++seed) {
    // Uneven parts: member j owns j + seed elements.
    std::vector<int64_t> counts(n), displs(n);
    int64_t total = 0;
    for (int j = 0; j < n; ++j) {
      counts[j] = j + seed;
      displs[j] = total;
      total += counts[j];
    }
    const auto mine = values_of(me, counts[me], seed);
    std::vector<double> gathered(total, -1);
    auto g = c.start_all_gatherv(mine.data(), gathered.data(), counts, displs, DType::float64);
    spin(*g);
    for (int j = 0; j < n; ++j) {
      const auto theirs = values_of(j, counts[j], seed);
      for (int64_t i = 0; i < counts[j]; ++i) CHECK(gathered[displs[j] + i] == theirs[i]);
    }

    const auto contribution = values_of(me, total, seed + 10);
    std::vector<double> want(total, 0);
    for (int j = 0; j < n; ++j) {
      const auto v = values_of(j, total, seed + 10);
      for (int64_t i = 0; i < total; ++i) want[i] += v[i];
    }
    std::vector<double> reduced(total, -1);
    c.start_all_reduce(contribution.data(), reduced.data(), total, DType::float64, ReduceOp::sum)->wait();
    CHECK(reduced == want);

    std::vector<double> part(counts[me], -1);
    c.start_reduce_scatter(contribution.data(), part.data(), counts, DType::float64, ReduceOp::sum)->wait();
    for (int64_t i = 0; i < counts[me]; ++i) CHECK(part[i] == want[displs[me] + i]);

    // Equal parts (MPI_Ireduce_scatter_block): three elements each.
    const auto three_each = values_of(me, 3 * n, seed + 20);
    std::vector<double> block(3, -1);
    c.start_reduce_scatter(three_each.data(), block.data(), std::vector<int64_t>(n, 3), DType::float64, ReduceOp::sum)
        ->wait();
    for (int64_t i = 0; i < 3; ++i) {
      double sum = 0;
      for (int j = 0; j < n; ++j) sum += values_of(j, 3 * n, seed + 20)[3 * me + i];
      CHECK(block[i] == sum);
    }
  }
}

TEST_CASE("start_all_to_allv and start_send_recv match a plain loop", "[async]") {
  Communicator& c = everyone();
  const int n = c.size(), me = c.rank();
  // Member i sends member j (i + 2 j) % 4 + 1 elements, value 1000 i + 10 j + k.
  auto count = [](int i, int j) { return int64_t((i + 2 * j) % 4 + 1); };
  std::vector<int64_t> sc(n), sd(n), rc(n), rd(n);
  std::vector<double> send;
  int64_t s_total = 0, r_total = 0;
  for (int j = 0; j < n; ++j) {
    sc[j] = count(me, j);
    sd[j] = s_total;
    s_total += sc[j];
    for (int64_t k = 0; k < sc[j]; ++k) send.push_back(1000.0 * me + 10 * j + k);
    rc[j] = count(j, me);
    rd[j] = r_total;
    r_total += rc[j];
  }
  std::vector<double> recv(r_total, -1);
  auto a = c.start_all_to_allv(send.data(), sc, sd, recv.data(), rc, rd, DType::float64);
  spin(*a);
  for (int j = 0; j < n; ++j)
    for (int64_t k = 0; k < rc[j]; ++k) CHECK(recv[rd[j] + k] == 1000.0 * j + 10 * me + k);

  // A ring shift to the right, two calls in flight at once.
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  const auto first = values_of(me, 5, 77), second = values_of(me, 7, 78);
  std::vector<double> got1(5, -1), got2(7, -1);
  auto s1 = c.start_send_recv(first.data(), right, got1.data(), left, 5, DType::float64);
  auto s2 = c.start_send_recv(second.data(), right, got2.data(), left, 7, DType::float64);
  s2->wait();
  s1->wait();
  CHECK(got1 == values_of(left, 5, 77));
  CHECK(got2 == values_of(left, 7, 78));
}

TEST_CASE("reshard_async gives reshard's values and sharding on random meshes and specs", "[async]") {
  dax::test::Pick pick(515);
  for (int trial = 0; trial < 40; ++trial) {
    const dax::Mesh& mesh = dax::test::random_mesh(pick);
    const dax::Shape shape{int64_t(3 + pick(9)), int64_t(2 + pick(7))};  // uneven on most meshes
    const auto from = dax::test::random_sharding(pick, mesh, 2);
    const auto to = dax::test::random_sharding(pick, mesh, 2);
    const auto host = fresh<float>(dax::numel(shape), 1000 + trial);
    const auto x = dax::device_put(host, shape, from);
    auto pending = dax::reshard_async(x, to);
    for (int i = 0; i < 1000 && !pending.ready(); ++i) {
    }
    const auto y = pending.wait();
    if (!y.is_addressable()) continue;  // a rank the mesh leaves out holds nothing to compare
    INFO("trial " << trial << ": " << dax::to_string(mesh) << " " << dax::to_string(from.spec()) << " -> "
                  << dax::to_string(to.spec()));
    CHECK(y.sharding() == to);
    CHECK(y.to_host() == host);
    CHECK(pending.wait().to_host() == host);  // a second wait gives the same array
  }
}

TEST_CASE("several reshard_async in flight, moved and dropped handles, lazy transposes", "[async]") {
  const int n = dax::test::world_size();
  const dax::Mesh line({n}, {"x"});
  const dax::NamedSharding rows(line, dax::P("x")), cols(line, dax::P(nullptr, "x")), whole(line, dax::P());
  const dax::Shape shape{int64_t(2 * n + 1), int64_t(n + 2)};
  const auto a_host = fresh<double>(dax::numel(shape), 1);
  const auto b_host = fresh<double>(dax::numel(shape), 2);
  const auto a = dax::device_put(a_host, shape, rows), b = dax::device_put(b_host, shape, cols);
  auto pa = dax::reshard_async(a, cols);
  auto pb = dax::reshard_async(b, whole);
  auto pc = dax::reshard_async(a, whole);
  CHECK(pc.wait().to_host() == a_host);  // waited out of order
  CHECK(pb.wait().to_host() == b_host);
  dax::PendingArray<double> moved = std::move(pa);
  CHECK(moved.wait().sharding() == cols);
  CHECK(moved.wait().to_host() == a_host);
  moved = dax::reshard_async(b, rows);  // reassigned after wait
  CHECK(moved.wait().to_host() == b_host);
  { auto dropped = dax::reshard_async(a, whole); }  // still runs on every rank
  auto after = dax::reshard_async(b, whole);   // the group's calls stay in step
  CHECK(after.wait().to_host() == b_host);

  // A lazy transpose moves its stored piece and stays a transpose.
  const auto t = dax::transpose(a);
  auto pt = dax::reshard_async(t, dax::NamedSharding(line, dax::P(nullptr, "x")));
  const auto tt = pt.wait();
  CHECK(tt.to_host() == dax::reshard(t, dax::NamedSharding(line, dax::P(nullptr, "x"))).to_host());
}

TEST_CASE("reshard_async's gradient is reshard's", "[async]") {
  const int n = dax::test::world_size();
  const dax::Mesh line({n}, {"x"});
  const dax::Shape shape{int64_t(n + 3), 5};
  const auto host = fresh<double>(dax::numel(shape), 9);
  const auto w_host = fresh<double>(dax::numel(shape), 10);
  const auto x = dax::device_put(host, shape, dax::NamedSharding(line, dax::P("x")));
  const auto w = dax::device_put(w_host, shape, dax::NamedSharding(line, dax::P()));
  auto loss = [&](bool async) {
    return [&, async](const dax::DistArray<double>& v) {
      const dax::NamedSharding whole(line, dax::P());
      const auto g = async ? dax::reshard_async(v, whole).wait() : dax::reshard(v, whole);
      return dax::sum(g * w * g);
    };
  };
  const auto [va, ga] = dax::value_and_grad(loss(true))(x);
  const auto [vs, gs] = dax::value_and_grad(loss(false))(x);
  CHECK(va.to_host()[0] == Approx(vs.to_host()[0]).epsilon(1e-12));
  CHECK(ga.sharding() == x.sharding());
  const auto a = ga.to_host(), s = gs.to_host();
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i] == Approx(s[i]).epsilon(1e-12));
    CHECK(a[i] == Approx(2 * w_host[i] * host[i]).epsilon(1e-12));  // d/dx sum(w x^2) = 2 w x
  }
}

TEST_CASE("prefetch gathers FSDP weights one ahead: values, gradients and bytes as without it", "[async]") {
  const int n = dax::test::world_size();
  const dax::Mesh mesh({n}, {"data"});
  const dax::NamedSharding rows(mesh, dax::P("data", dax::none)), whole(mesh, dax::P());
  const std::vector<int64_t> widths{5, int64_t(n + 3), 7, 3};
  std::vector<dax::DistArray<double>> w;
  for (size_t l = 0; l + 1 < widths.size(); ++l)
    w.push_back(dax::device_put(fresh<double>(widths[l] * widths[l + 1], 30 + l), {widths[l], widths[l + 1]}, rows));
  const dax::Shape x_shape{int64_t(2 * n + 1), widths[0]};
  const auto x = dax::device_put(fresh<double>(dax::numel(x_shape), 40), x_shape, rows);
  auto layers = [&](const std::vector<dax::DistArray<double>>& ws, auto&& weight) {
    auto a = x;
    for (size_t l = 0; l < ws.size(); ++l) a = dax::tanh(dax::matmul(a, weight(l)));
    return dax::sum(a * a);
  };
  auto prefetched = [&](const std::vector<dax::DistArray<double>>& ws) {
    auto gathered = dax::prefetch(ws, whole, 2);
    auto loss = layers(ws, [&](size_t) { return gathered.next(); });
    CHECK(gathered.remaining() == 0u);
    return loss;
  };
  auto plain = [&](const std::vector<dax::DistArray<double>>& ws) {
    return layers(ws, [&](size_t l) { return dax::reshard(ws[l], whole); });
  };
  dax::comm_stats().reset();
  const auto [v1, g1] = dax::value_and_grad(prefetched)(w);
  const int64_t prefetched_bytes = dax::comm_stats().total_bytes();
  dax::comm_stats().reset();
  const auto [v0, g0] = dax::value_and_grad(plain)(w);
  const int64_t plain_bytes = dax::comm_stats().total_bytes();
  CHECK(v1.to_host()[0] == Approx(v0.to_host()[0]).epsilon(1e-12));
  for (size_t l = 0; l < w.size(); ++l) {
    CHECK(g1[l].sharding() == rows);
    const auto a = g1[l].to_host(), b = g0[l].to_host();
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-10));
  }
  CHECK(prefetched_bytes == plain_bytes);  // the same gathers and reduce-scatters, started earlier
  if (n > 1) CHECK(plain_bytes > 0);
  auto empty = dax::prefetch(std::vector<dax::DistArray<double>>{}, whole);
  CHECK(empty.remaining() == 0u);
  CHECK_THROWS_AS(empty.next(), dax::Error);
}
