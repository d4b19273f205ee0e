// The pieces the JAX guides use: make_mesh's device order, random::fold_in, with_sharding_constraint
// (forward a reshard, backward a constrained cotangent), parameters sharded by rules on their tree
// paths, the memory counter, remat (equal gradients, a lower peak), and dax::profile's trace read
// back as JSON.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include <dax/autodiff/remat.hpp>
#include <dax/debug/profile.hpp>
#include <dax/runtime/make_mesh.hpp>
#include <dax/runtime/memory.hpp>

#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::error_of;
using dax::test::world_rank;
using dax::test::world_size;

namespace {

std::vector<double> uniform(int64_t n, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// Every rank's value of `mine`, by rank.
std::vector<int64_t> gather(int64_t mine) { return dax::Runtime::current().world().all_gather_host({mine}); }

}  // namespace

TEST_CASE("make_mesh and create_device_mesh order devices row-major by rank", "[jax][mesh]") {
  const int n = world_size();
  const Mesh line = dax::make_mesh({n}, {"data"});
  CHECK(line == Mesh({n}, {"data"}));
  for (int i = 0; i < n; ++i) CHECK(line.devices()[i] == i);

  // A 2-d mesh over every rank: the last axis varies fastest (consecutive ranks share a row).
  const int64_t rows = n % 2 == 0 ? 2 : 1, cols = n / rows;
  const Mesh grid = dax::make_mesh({rows, cols}, {"data", "model"});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) CHECK(grid.device_at({i, j}) == i * cols + j);
  CHECK(dax::to_string(grid) == "Mesh('data': " + std::to_string(rows) + ", 'model': " + std::to_string(cols) + ")");

  // Fewer devices than the job: the first ones (jax.make_mesh takes devices[:prod(shape)]).
  const Mesh first = dax::make_mesh({1}, {"x"});
  CHECK(first.devices() == std::vector<int>{0});

  CHECK(dax::create_device_mesh({2, 2}, {7, 5, 3, 1, 0}) == std::vector<int>{7, 5, 3, 1});
  CHECK(dax::create_device_mesh({n}) == line.devices());

  // Explicit devices, in the given order.
  std::vector<int> reversed(n);
  for (int i = 0; i < n; ++i) reversed[i] = n - 1 - i;
  const Mesh back = dax::make_mesh({n}, {"data"}, reversed);
  CHECK(back.devices() == reversed);

  CHECK(error_of([&] { dax::make_mesh({n + 1}, {"data"}); }) ==
        "create_device_mesh: number of devices " + std::to_string(n) + " must be >= the product of the mesh shape (" +
            std::to_string(n + 1) + ",) (" + std::to_string(n + 1) + "); launch with mpirun -np " +
            std::to_string(n + 1) + " or more");
  CHECK(error_of([&] { dax::make_mesh({n}, {"a", "b"}); }) ==
        "make_mesh: 1 axis sizes (" + std::to_string(n) + ",) but 2 axis names");
  CHECK(error_of([&] { dax::create_device_mesh({0, 2}); }) ==
        "create_device_mesh: mesh axes must have size >= 1, got mesh shape (0, 2)");
}

TEST_CASE("random::fold_in gives new keys, the same on every rank, apart from split's", "[jax][random]") {
  const dax::random::Key k = dax::random::key(20240611);
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (uint32_t d = 0; d < 512; ++d) {
    const auto f = dax::random::fold_in(k, d);
    CHECK(f == dax::random::fold_in(k, d));  // deterministic
    seen.insert({f.k0, f.k1});
  }
  CHECK(seen.size() == 512);
  for (const auto& s : dax::random::split(k, 512)) CHECK(!seen.contains({s.k0, s.k1}));
  CHECK(!seen.contains({k.k0, k.k1}));
  // Another key folds to other keys.
  CHECK(dax::random::fold_in(dax::random::key(1), 0) != dax::random::fold_in(dax::random::key(2), 0));

  // The same key on every rank; fold_in(key, rank) a different one on each.
  const auto common = dax::random::fold_in(k, 7);
  const auto words = dax::Runtime::current().world().all_gather_host({common.k0, common.k1});
  for (int r = 0; r < world_size(); ++r) {
    CHECK(words[2 * r] == common.k0);
    CHECK(words[2 * r + 1] == common.k1);
  }
  const auto own = dax::random::fold_in(k, static_cast<uint32_t>(world_rank()));
  const auto owns = dax::Runtime::current().world().all_gather_host({own.k0, own.k1});
  std::set<std::pair<int64_t, int64_t>> distinct;
  for (int r = 0; r < world_size(); ++r) distinct.insert({owns[2 * r], owns[2 * r + 1]});
  CHECK(distinct.size() == static_cast<size_t>(world_size()));

  // Samples under folded keys: independent streams (uniform means near 1/2, little correlation).
  const Mesh mesh = dax::make_mesh({world_size()}, {"x"});
  const NamedSharding s(mesh, P("x"));
  const auto a = dax::random::uniform<double>(dax::random::fold_in(k, 0), {4001}, s).to_host();
  const auto b = dax::random::uniform<double>(dax::random::fold_in(k, 1), {4001}, s).to_host();
  double ma = 0, mb = 0, ab = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i], mb += b[i];
  ma /= a.size(), mb /= b.size();
  for (size_t i = 0; i < a.size(); ++i) ab += (a[i] - ma) * (b[i] - mb);
  ab /= a.size() * (1.0 / 12.0);  // correlation (the variance of U(0, 1) is 1/12)
  CHECK(std::abs(ma - 0.5) < 0.02);
  CHECK(std::abs(mb - 0.5) < 0.02);
  CHECK(std::abs(ab) < 0.06);  // 4001 samples: the standard error is 1/sqrt(4001) = 0.016
}

TEST_CASE("with_sharding_constraint reshards forward and constrains the cotangent", "[jax][autodiff]") {
  const int n = world_size();
  const Mesh mesh = dax::make_mesh({n}, {"x"});
  const NamedSharding rows(mesh, P("x", dax::none)), cols(mesh, P(dax::none, "x")), whole(mesh, P());
  std::mt19937 rng(17);
  const Shape shape{7, 5};  // uneven at 2, 3 and 4 ranks
  const auto data = uniform(35, rng);
  const auto x = dax::device_put(data, shape, rows);

  // Forward: the same values and layout as a reshard.
  const auto y = dax::with_sharding_constraint(x, cols);
  CHECK(y.sharding() == cols);
  CHECK(y.to_host() == data);

  // Backward, driven by hand: a cotangent arriving in another layout goes back constrained to the
  // constraint's sharding (reshard would send it back in x's own).
  const auto seed = dax::device_put(uniform(35, rng), shape, whole);
  for (const bool constraint : {true, false}) {
    dax::detail::Tape tape;
    auto traced = x;
    uint64_t out_id = 0;
    {
      dax::detail::TapeScope scope(tape);
      traced.set_trace_id(tape.watch());
      out_id = (constraint ? dax::with_sharding_constraint(traced, cols) : dax::reshard(traced, cols)).trace_id();
    }
    const auto got = tape.backward(out_id, dax::detail::AnyArray(seed), {traced.trace_id()});
    REQUIRE(got.contains(traced.trace_id()));
    const auto& g = got.at(traced.trace_id()).as<double>();
    CHECK(g.sharding() == (constraint ? cols : rows));
    CHECK(g.to_host() == seed.to_host());
  }

  // Through value_and_grad: the gradient is the same as without the constraint, in x's sharding.
  const auto w = dax::device_put(uniform(35, rng), shape, cols);
  auto loss = [&](const DistArray<double>& p, bool constrain) {
    const auto h = dax::tanh(p) * 3.0;
    if (constrain) return dax::sum(dax::with_sharding_constraint(h, cols) * w);
    return dax::sum(h * w);
  };
  const auto [v1, g1] = dax::value_and_grad([&](const auto& p) { return loss(p, true); })(x);
  const auto [v2, g2] = dax::value_and_grad([&](const auto& p) { return loss(p, false); })(x);
  CHECK(g1.sharding() == rows);
  const auto h1 = g1.to_host(), h2 = g2.to_host(), wh = w.to_host();
  for (size_t i = 0; i < h1.size(); ++i) {
    const double t = std::tanh(data[i]);
    CHECK(h1[i] == Approx(3.0 * (1 - t * t) * wh[i]).epsilon(1e-12));
    CHECK(h1[i] == Approx(h2[i]).epsilon(1e-12));
  }
}

namespace jaxtest {
struct Dense {
  DistArray<float> kernel, bias;
};
DAX_TREE(Dense, kernel, bias)
struct Model {
  Dense embed;
  std::vector<Dense> layers;
  std::map<std::string, DistArray<float>> norm;
};
DAX_TREE(Model, embed, layers, norm)
}  // namespace jaxtest

TEST_CASE("tree_map_with_path shards a model's parameters by rules on their paths", "[jax][tree]") {
  const int n = world_size();
  const Mesh mesh = dax::make_mesh({n}, {"model"});
  const NamedSharding replicated(mesh, P());
  std::mt19937 rng(5);
  auto make = [&](Shape shape) {
    std::vector<float> v(dax::numel(shape));
    for (auto& e : v) e = std::uniform_real_distribution<float>(-1, 1)(rng);
    return dax::device_put(v, shape, replicated);
  };
  jaxtest::Model m{{make({300, 6}), make({6})}, {}, {{"scale", make({6})}, {"shift", make({6})}}};
  for (int i = 0; i < 3; ++i) m.layers.push_back({make({6 + i, 9}), make({9})});

  // The guide's rule: a kernel whose first dimension exceeds 256 is split over 'model' on its
  // columns; other kernels on their rows; everything else replicated.
  std::vector<std::string> visited;
  const auto sharded = dax::tree_map_with_path(
      [&](const std::string& path, const DistArray<float>& leaf) {
        visited.push_back(path);
        const bool kernel = path.ends_with("/kernel");
        const NamedSharding s = !kernel ? replicated
                                : leaf.shape()[0] > 256 ? NamedSharding(mesh, P(dax::none, "model"))
                                                        : NamedSharding(mesh, P("model", dax::none));
        return dax::reshard(leaf, s);
      },
      m);
  CHECK(visited == std::vector<std::string>{"embed/kernel", "embed/bias", "layers/0/kernel", "layers/0/bias",
                                            "layers/1/kernel", "layers/1/bias", "layers/2/kernel", "layers/2/bias",
                                            "norm/scale", "norm/shift"});
  CHECK(sharded.embed.kernel.sharding().spec() == P(dax::none, "model"));
  CHECK(sharded.embed.bias.sharding() == replicated);
  for (int i = 0; i < 3; ++i) {
    CHECK(sharded.layers[i].kernel.sharding().spec() == P("model", dax::none));
    CHECK(sharded.layers[i].kernel.to_host() == m.layers[i].kernel.to_host());
    CHECK(sharded.layers[i].bias.sharding() == replicated);
  }
  CHECK(sharded.norm.at("shift").to_host() == m.norm.at("shift").to_host());
  CHECK(sharded.embed.kernel.to_host() == m.embed.kernel.to_host());
  // What each device holds: its column block of the big kernel (uneven: 6 over n).
  const int64_t chunk = (6 + n - 1) / n;
  const int64_t lo = std::min<int64_t>(world_rank() * chunk, 6), hi = std::min<int64_t>(lo + chunk, 6);
  CHECK(sharded.embed.kernel.local_shape() == Shape{300, hi - lo});

  // tree_map over two trees at once: whatever f returns, in the first tree's structure.
  const auto moved = dax::tree_map([](const auto& before, const auto& after) { return before.sharding() != after.sharding(); },
                                   m.norm, sharded.norm);
  CHECK(moved == std::map<std::string, bool>{{"scale", false}, {"shift", false}});
  const auto sizes = dax::tree_map([](const auto& a) { return a.local_size(); }, std::vector<DistArray<float>>{
                                                                                     sharded.layers[0].kernel, sharded.embed.kernel});
  CHECK(sizes == std::vector<int64_t>{sharded.layers[0].kernel.local_size(), 300 * (hi - lo)});
}

TEST_CASE("memory_stats counts each device's buffers; the peak resets", "[jax][memory]") {
  const int n = world_size();
  const Mesh mesh = dax::make_mesh({n}, {"x"});
  const NamedSharding rows(mesh, P("x", dax::none));
  const Shape shape{13, 7};  // uneven: rank r holds rows [r*chunk, min((r+1)*chunk, 13))
  const auto pieces = rows.devices_indices_map(shape);
  const dax::MemoryStats before = dax::memory_stats();
  const auto before_all = dax::memory_stats_per_device();
  REQUIRE(before_all.size() == static_cast<size_t>(n));
  CHECK(before_all[world_rank()].bytes_in_use == before.bytes_in_use);
  dax::reset_peak_memory();
  CHECK(dax::memory_stats().peak_bytes_in_use == before.bytes_in_use);
  int64_t piece_bytes = 0;
  {
    const auto a = dax::zeros<double>(shape, rows);
    piece_bytes = a.local_size() * int64_t(sizeof(double));
    const dax::MemoryStats mid = dax::memory_stats();
    CHECK(mid.bytes_in_use - before.bytes_in_use == piece_bytes);
    CHECK(mid.num_allocs - before.num_allocs == 1);
    CHECK(mid.bytes_reserved >= mid.bytes_in_use);
    // Every device's growth is its own piece, seen from every rank.
    const auto mid_all = dax::memory_stats_per_device();
    for (int r = 0; r < n; ++r) {
      int64_t elements = 1;
      for (const auto& sl : pieces.at(r)) elements *= sl.stop - sl.start;
      CHECK(mid_all[r].bytes_in_use - before_all[r].bytes_in_use == elements * int64_t(sizeof(double)));
    }
    const auto b = a + 1.0;  // one more piece while a lives
    CHECK(dax::memory_stats().bytes_in_use - before.bytes_in_use == 2 * piece_bytes);
  }
  const dax::MemoryStats after = dax::memory_stats();
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.peak_bytes_in_use == before.bytes_in_use + 2 * piece_bytes);
  dax::reset_peak_memory();
  CHECK(dax::memory_stats().peak_bytes_in_use == before.bytes_in_use);
}

namespace {

/// Three activations per block: a = tanh(h W), b = tanh(1.5 a), tanh(a + b).
DistArray<double> block(const DistArray<double>& h, const DistArray<double>& w) {
  const auto a = dax::tanh(dax::matmul(h, w));
  const auto b = dax::tanh(a * 1.5);
  return dax::tanh(a + b);
}

}  // namespace

TEST_CASE("remat keeps only its inputs: the same gradients, a lower peak", "[jax][remat][memory]") {
  const int n = world_size();
  const Mesh mesh = dax::make_mesh({n}, {"data"});
  const NamedSharding batch(mesh, P("data", dax::none)), replicated(mesh, P());
  constexpr int layers = 6;
  const int64_t rows = 16 * n + 3, width = 32;  // uneven over the ranks
  std::mt19937 rng(99);
  const auto x = dax::device_put(uniform(rows * width, rng), {rows, width}, batch);
  std::vector<DistArray<double>> params;
  for (int l = 0; l < layers; ++l)
    params.push_back(dax::device_put(uniform(width * width, rng, -0.3, 0.3), {width, width}, replicated));

  int64_t base = 0, kept = 0;  // kept: what the forward holds when it ends, above the base
  auto loss = [&](bool use_remat) {
    return [&x, &base, &kept, use_remat](const std::vector<DistArray<double>>& ws) {
      DistArray<double> h = x;
      for (const auto& w : ws) h = use_remat ? dax::remat(block)(h, w) : block(h, w);
      kept = dax::memory_stats().bytes_in_use - base;
      return dax::sum(h * h);
    };
  };
  auto run = [&](bool use_remat) {
    base = dax::memory_stats().bytes_in_use;
    dax::reset_peak_memory();
    auto result = dax::value_and_grad(loss(use_remat))(params);
    return std::tuple{std::move(result.first), std::move(result.second), dax::memory_stats().peak_bytes_in_use - base,
                      kept};
  };
  const auto [v_plain, g_plain, peak_plain, kept_plain] = run(false);
  const auto [v_remat, g_remat, peak_remat, kept_remat] = run(true);

  // Bit for bit: the backward reran the same ops on the same inputs.
  CHECK(v_remat.to_host()[0] == v_plain.to_host()[0]);
  for (int l = 0; l < layers; ++l) CHECK(g_remat[l].to_host() == g_plain[l].to_host());
  CHECK(v_plain.to_host()[0] != 0.0);

  // One activation piece on this device; at the end of the forward the plain tape keeps three per
  // block (a, b and the block's output), the remat tape only each block's input and the output.
  // (The peaks themselves also hold the parameters' gradients, and the backward lets each
  // block's values go once past it, so they differ by less.)
  const int64_t activation = x.local_size() * int64_t(sizeof(double));
  CHECK(kept_plain >= 3 * layers * activation);
  CHECK(kept_remat <= (layers + 1) * activation);
  CHECK(peak_plain >= 3 * layers * activation);
  CHECK(peak_remat <= peak_plain);
  if (world_rank() == 0)
    std::printf("remat: peak %lld bytes without, %lld with (an activation piece is %lld bytes)\n",
                static_cast<long long>(peak_plain), static_cast<long long>(peak_remat),
                static_cast<long long>(activation));

  // Outside a gradient, remat(f) is f.
  CHECK(dax::remat(block)(x, params[0]).to_host() == block(x, params[0]).to_host());
}

TEST_CASE("profile writes a Chrome trace of every op and collective", "[jax][profile]") {
  const int n = world_size();
  const Mesh mesh = dax::make_mesh({n}, {"x"});
  const NamedSharding rows(mesh, P("x", dax::none)), cols(mesh, P(dax::none, "x")), whole(mesh, P());
  const std::string path = "dax_profile_test_np" + std::to_string(n) + ".json";
  std::remove(path.c_str());
  std::mt19937 rng(3);
  dax::comm_stats().reset();
  size_t local_events = 0;
  {
    auto scope = dax::profile(path);
    const auto a = dax::device_put(uniform(9 * 6, rng), {9, 6}, cols);
    const auto b = dax::device_put(uniform(6 * 5, rng), {6, 5}, rows);
    const auto c = dax::matmul(a, b);                            // a partial sum over 'x'
    const auto s = dax::sum(dax::tanh(c));                       // ... reduced here
    const auto r = dax::reshard(dax::with_sharding_constraint(c, rows), whole);  // an all-gather
    CHECK(s.to_host()[0] != 0.0);
    CHECK(r.shape() == Shape{9, 5});
    local_events = scope.events().size();
  }
  CHECK(local_events > 5);
  const auto bytes = gather(dax::comm_stats().total_bytes());
  const auto calls = gather(dax::comm_stats().total_calls());
  if (world_rank() != 0) return;

  // Read the trace back as JSON with Python; per rank: ops, collectives, collective bytes, ops whose
  // comm_bytes differ from the collectives inside their time span, events that break the format,
  // collectives whose group size or bandwidths are not nccl-tests' (bus = received bytes / time,
  // algorithm = bus / the factor of their kind: 2(n-1)/n all-reduce, (n-1)/n gathers, scatters and
  // all-to-alls), and the op names.
  const std::string script =
      "import json,sys\n"
      "t=json.load(open(sys.argv[1]))\n"
      "ev=t['traceEvents']\n"
      "by={}\n"
      "bad_format=0\n"
      "ns=lambda v: int(round(v*1000))\n"
      "for e in ev:\n"
      "  if e['ph']=='M': continue\n"
      "  ok = e['ph']=='X' and e['args']['rank']==e['pid'] and e['dur']>=0 and e['ts']>=0 and e['tid']==0\n"
      "  ok = ok and (e['cat']=='op' or ('bytes' in e['args'] and 'mesh_axes' in e['args']))\n"
      "  bad_format += 0 if ok else 1\n"
      "  by.setdefault(e['pid'],[]).append(e)\n"
      "names=set(e['args']['name'] for e in ev if e['ph']=='M')\n"
      "for pid in sorted(by):\n"
      "  es=by[pid]; ops=[e for e in es if e['cat']=='op']; cs=[e for e in es if e['cat']=='collective']\n"
      "  wrong=0\n"
      "  for o in ops:\n"
      "    s=ns(o['ts']); f=s+ns(o['dur'])\n"
      "    inside=sum(c['args']['bytes'] for c in cs if ns(c['ts'])>=s and ns(c['ts'])+ns(c['dur'])<=f)\n"
      "    wrong += 0 if inside==o['args']['comm_bytes'] else 1\n"
      "  N=int(sys.argv[2]); badbw=0\n"
      "  close=lambda x,y: abs(x-y)<=0.02*max(abs(x),abs(y))+2e-6\n"
      "  for c in cs:\n"
      "    a=c['args']; k=a['kind']; n=a['group_size']\n"
      "    f=2*(n-1)/n if k=='all_reduce' else (n-1)/n if k in ('all_gather','reduce_scatter','all_to_all','all_to_allv','general_exchange') else 1\n"
      "    bus=a['bytes']/(c['dur']*1e-6)/1e9 if c['dur']>0 else 0\n"
      "    badbw += 0 if n==N and close(a['busbw_GBps'],bus) and close(a['algbw_GBps']*f,a['busbw_GBps']) else 1\n"
      "  ok = ('rank %d' % pid) in names\n"
      "  print(pid, len(ops), len(cs), sum(c['args']['bytes'] for c in cs), wrong, bad_format, int(ok), badbw,\n"
      "        ','.join(sorted(set(o['name'] for o in ops))))\n";
  const std::string script_path = path + ".py";
  std::ofstream(script_path) << script;
  FILE* pipe = popen(("/usr/bin/python3 " + script_path + " " + path + " " + std::to_string(n)).c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string text;
  char chunk[4096];
  while (size_t got = std::fread(chunk, 1, sizeof chunk, pipe)) text.append(chunk, got);
  CHECK(pclose(pipe) == 0);
  INFO(text);
  std::istringstream lines(text);
  int seen = 0;
  int pid = 0, ops = 0, collectives = 0, wrong = 0, bad_format = 0, named = 0, bad_bandwidth = 0;
  long long collective_bytes = 0;
  std::string op_names;
  while (lines >> pid >> ops >> collectives >> collective_bytes >> wrong >> bad_format >> named >> bad_bandwidth >>
         op_names) {
    CHECK(pid == seen);
    CHECK(collective_bytes == bytes[pid]);  // the trace's collectives are what comm_stats counted
    CHECK(collectives == calls[pid]);
    CHECK(wrong == 0);
    CHECK(bad_format == 0);
    CHECK(named == 1);
    CHECK(bad_bandwidth == 0);
    CHECK(ops >= 6);
    for (const char* name : {"create", "matmul", "tanh", "sum", "reshard"})
      CHECK(("," + op_names + ",").find(std::string(",") + name + ",") != std::string::npos);
    ++seen;
  }
  CHECK(seen == n);  // one process per rank
  if (n > 1) CHECK(bytes[0] > 0);
  std::remove(script_path.c_str());
  std::remove(path.c_str());
}

TEST_CASE("ZeRO stages 0-3: what each device holds, from the memory counter", "[jax][zero][memory]") {
  using Params = std::map<std::string, DistArray<double>>;
  const int n = world_size();
  const Mesh mesh = dax::make_mesh({n}, {"data"});
  const NamedSharding replicated(mesh, P()), batch(mesh, P("data", dax::none));
  const std::map<std::string, Shape> shapes{{"w1", {48, 40}}, {"b1", {40}}, {"w2", {40, 10}}};
  std::mt19937 rng(8);
  std::map<std::string, std::vector<double>> values;
  for (const auto& [name, shape] : shapes) values[name] = uniform(dax::numel(shape), rng, -0.2, 0.2);
  const auto x = dax::device_put(uniform(21 * 48, rng), {21, 48}, batch);
  auto loss = [&x](const Params& p) {
    const auto h = dax::tanh(dax::matmul(x, p.at("w1")) + p.at("b1"));
    return dax::mean(dax::square(dax::matmul(h, p.at("w2"))));
  };
  auto bytes_of = [](const auto& tree) {
    int64_t b = 0;
    dax::tree_for_each([&](const auto& leaf) { b += leaf.local_size() * int64_t(sizeof(double)); }, tree);
    return b;
  };
  const auto zero = dax::optim::shard_over("data");

  struct Held {
    int64_t params = 0, state = 0;
  };
  std::vector<Held> held;           // per stage, this device
  std::vector<Params> updated;      // per stage, after two steps
  int64_t zero2_grad_bytes = 0, zero2_moved = 0, zero2_all_reduced = 0;  // one ZeRO-2 backward
  int64_t stage0_moved = 0;                                                // one plain data-parallel backward
  for (int stage = 0; stage <= 3; ++stage) {
    const int64_t base = dax::memory_stats().bytes_in_use;
    Params params;
    for (const auto& [name, shape] : shapes) {
      const NamedSharding s = stage == 3 ? zero(name, replicated, shape) : replicated;  // ZeRO-3: parameters split
      params.emplace(name, dax::device_put(values[name], shape, s));
    }
    dax::optim::AdamWOptions options{.lr = 0.05, .weight_decay = 0.01};
    if (stage == 1 || stage == 2) options.state_sharding = zero;  // ZeRO-1, -2: state split
    if (stage == 2) options.grad_sharding = zero;                 // ZeRO-2: gradients reduced to it
    dax::optim::AdamW opt(params, options);
    for (int step = 0; step < 2; ++step) {
      dax::comm_stats().reset();
      // ZeRO-2: the gradients come back split over 'data' (reduce-scattered), never whole.
      const auto grads = stage == 2 ? dax::grad(loss, zero)(params) : dax::grad(loss)(params);
      if (stage == 0) stage0_moved = dax::comm_stats().total_bytes();
      if (stage == 2) {
        zero2_grad_bytes = bytes_of(grads);
        zero2_moved = dax::comm_stats().total_bytes();
        zero2_all_reduced = dax::comm_stats().of("all_reduce", "('data',)").bytes;
        for (const auto& [name, g] : grads) CHECK(g.sharding() == zero(name, replicated, shapes.at(name)));
      }
      opt.step(params, grads);
    }
    const auto state = opt.state();
    const int64_t state_bytes = bytes_of(state.mu) + bytes_of(state.nu) + state.count.local_size() * 8;
    // Once the gradients are gone the device holds the parameters and the optimizer state, exactly.
    CHECK(dax::memory_stats().bytes_in_use - base == bytes_of(params) + state_bytes);
    held.push_back({bytes_of(params), bytes_of(state.mu) + bytes_of(state.nu)});
    updated.push_back(params);
  }

  // Every stage computes the same update.
  for (int stage = 1; stage <= 3; ++stage)
    for (const auto& [name, shape] : shapes) {
      const auto want = updated[0].at(name).to_host(), got = updated[stage].at(name).to_host();
      for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-10));
    }

  // What each device holds: replicated everything at stage 0; the state split n ways at 1 and 2
  // (each element on exactly one device: the devices' bytes add up to stage 0's); the parameters
  // too at 3.
  const int64_t whole = [&] {
    int64_t b = 0;
    for (const auto& [name, shape] : shapes) b += dax::numel(shape) * int64_t(sizeof(double));
    return b;
  }();
  CHECK(held[0].params == whole);
  CHECK(held[0].state == 2 * whole);
  for (int stage = 1; stage <= 3; ++stage) {
    const auto states = gather(held[stage].state), params = gather(held[stage].params);
    int64_t state_sum = 0, param_sum = 0;
    for (int r = 0; r < n; ++r) state_sum += states[r], param_sum += params[r];
    CHECK(state_sum == 2 * whole);
    CHECK(param_sum == (stage == 3 ? whole : n * whole));
    // No device holds more than its share rounded up by a row of each split parameter.
    CHECK(held[stage].state <= 2 * (whole / n + (48 + 40 + 40) * int64_t(sizeof(double))));
  }
  CHECK(held[1].state == held[2].state);
  // ZeRO-2's gradients: split like the state (the devices' bytes add up to one copy), never
  // all-reduced (the only all-reduce left is the loss's one element): each is reduce-scattered, or
  // made in place from gathered activations where that moves less (a batch smaller than the
  // weight); the backward moves less than stage 0's all-reduces.
  const auto grad_bytes = gather(zero2_grad_bytes);
  int64_t grad_sum = 0;
  for (int r = 0; r < n; ++r) grad_sum += grad_bytes[r];
  CHECK(grad_sum == whole);
  if (n > 1) {
    CHECK(zero2_all_reduced <= int64_t(sizeof(double)));
    CHECK(zero2_moved < stage0_moved);
  }
  if (world_rank() == 0) {
    std::printf("ZeRO at %d devices, bytes on device 0: parameters / optimizer state\n", n);
    for (int stage = 0; stage <= 3; ++stage)
      std::printf("  stage %d: %7lld / %7lld\n", stage, static_cast<long long>(held[stage].params),
                  static_cast<long long>(held[stage].state));
  }
}
