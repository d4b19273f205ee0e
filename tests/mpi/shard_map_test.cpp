// shard_map and the named-axis collectives on every 1-d and 2-d mesh that fits the world (smaller
// ones included, so some ranks sit outside), against references computed here from the gathered
// inputs with plain loops. Each device gets its own random block: the input is the blocks stacked
// along leading dimensions, one per mesh axis, split by P('x', 'y'); outputs come back the same way.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>

#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::error_of;
using dax::test::host;

namespace {

std::vector<Mesh> small_meshes() {
  std::vector<Mesh> out;
  for (const Mesh& m : dax::test::meshes_that_fit())
    if (m.num_axes() <= 2) out.push_back(m);
  return out;
}

/// The axis groups to test on a mesh: each axis, and both orders of two.
std::vector<std::vector<std::string>> axis_choices(const Mesh& mesh) {
  std::vector<std::vector<std::string>> out;
  for (const auto& name : mesh.axis_names()) out.push_back({name});
  if (mesh.num_axes() == 2) {
    out.push_back({mesh.axis_names()[0], mesh.axis_names()[1]});
    out.push_back({mesh.axis_names()[1], mesh.axis_names()[0]});
  }
  return out;
}

/// The positions (row-major in the mesh) of the group over `names` containing position p, in
/// group order (first name major), worked out here independently of the library.
std::vector<int> group_of(const Mesh& mesh, int p, const std::vector<std::string>& names) {
  std::vector<int64_t> coords(mesh.num_axes());
  for (int a = mesh.num_axes() - 1, q = p; a >= 0; --a) {
    coords[a] = q % mesh.axis_size(a);
    q /= static_cast<int>(mesh.axis_size(a));
  }
  int64_t count = 1;
  for (const auto& n : names) count *= mesh.axis_size(n);
  std::vector<int> out;
  for (int64_t m = 0; m < count; ++m) {
    int64_t rest = m;
    auto c = coords;
    for (size_t i = names.size(); i-- > 0;) {
      const int a = mesh.axis_index(names[i]);
      c[a] = rest % mesh.axis_size(a);
      rest /= mesh.axis_size(a);
    }
    int64_t q = 0;
    for (int a = 0; a < mesh.num_axes(); ++a) q = q * mesh.axis_size(a) + c[a];
    out.push_back(static_cast<int>(q));
  }
  return out;
}

int index_in(const std::vector<int>& group, int p) {
  return static_cast<int>(std::find(group.begin(), group.end(), p) - group.begin());
}

std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t i = s.size(); i-- > 0;) {
    idx[i] = flat % s[i];
    flat /= s[i];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t flat = 0;
  for (size_t i = 0; i < s.size(); ++i) flat = flat * s[i] + idx[i];
  return flat;
}

Shape with_mesh_dims(const Mesh& mesh, const Shape& block) {
  Shape s = mesh.shape();
  s.insert(s.end(), block.begin(), block.end());
  return s;
}

P stacked_spec(const Mesh& mesh) {
  std::vector<P::Entry> e;
  for (const auto& n : mesh.axis_names()) e.emplace_back(n);
  return P(e);
}

/// Runs `op` in a shard_map on per-device random blocks of shape `block`; returns every device's
/// output block (by mesh position) and the input blocks, both gathered to the host.
template <class T>
struct PerDevice {
  std::vector<std::vector<T>> in, out;
  Shape out_block;
};

template <class T>
PerDevice<T> run_per_device(const Mesh& mesh, const Shape& block,
                            const std::function<DistArray<T>(const DistArray<T>&)>& op, uint32_t seed) {
  std::mt19937 rng(seed);
  const Shape in_shape = with_mesh_dims(mesh, block);
  const auto values = dax::test::random_values<T>(dax::numel(in_shape), rng);
  const auto x = dax::device_put(values, in_shape, NamedSharding(mesh, P()));
  const int k = mesh.num_axes();
  Shape out_block;
  auto f = dax::shard_map(
      [&](const DistArray<T>& stacked) {
        auto y = op(dax::reshape(stacked, block));
        out_block = y.shape();
        Shape s(k, 1);
        s.insert(s.end(), y.shape().begin(), y.shape().end());
        return dax::reshape(y, s);
      },
      mesh, {stacked_spec(mesh)}, stacked_spec(mesh));
  const DistArray<T> out = f(x);
  PerDevice<T> r;
  if (!mesh.contains(dax::test::world_rank())) {
    CHECK_FALSE(out.is_addressable());
    return r;
  }
  const auto all = out.to_host();
  const int64_t in_n = dax::numel(block), out_n = dax::numel(out_block);
  REQUIRE(static_cast<int64_t>(all.size()) == mesh.size() * out_n);
  for (int p = 0; p < mesh.size(); ++p) {
    r.in.emplace_back(values.begin() + p * in_n, values.begin() + (p + 1) * in_n);
    r.out.emplace_back(all.begin() + p * out_n, all.begin() + (p + 1) * out_n);
  }
  r.out_block = out_block;
  return r;
}

}  // namespace

TEST_CASE("psum, pmax, pmin and pmean over every axis group", "[shard_map]") {
  uint32_t seed = 1;
  for (const Mesh& mesh : small_meshes()) {
    for (const auto& names : axis_choices(mesh)) {
      const dax::AxisNames axes(names);
      const Shape block{3, 2};
      const auto sum = run_per_device<float>(mesh, block, [&](const auto& x) { return dax::psum(x, axes); }, ++seed);
      const auto mx = run_per_device<int32_t>(mesh, block, [&](const auto& x) { return dax::pmax(x, axes); }, ++seed);
      const auto mn = run_per_device<int64_t>(mesh, block, [&](const auto& x) { return dax::pmin(x, axes); }, ++seed);
      const auto mean = run_per_device<double>(mesh, block, [&](const auto& x) { return dax::pmean(x, axes); }, ++seed);
      for (int p = 0; p < static_cast<int>(sum.out.size()); ++p) {
        INFO(dax::to_string(mesh) << " group " << names.size() << " axes, device position " << p);
        const auto group = group_of(mesh, p, names);
        for (int i = 0; i < 6; ++i) {
          float s = 0;
          int32_t hi = std::numeric_limits<int32_t>::lowest();
          int64_t lo = std::numeric_limits<int64_t>::max();
          double m = 0;
          for (int q : group) {
            s += sum.in[q][i];
            hi = std::max(hi, mx.in[q][i]);
            lo = std::min(lo, mn.in[q][i]);
            m += mean.in[q][i];
          }
          CHECK(sum.out[p][i] == s);
          CHECK(mx.out[p][i] == hi);
          CHECK(mn.out[p][i] == lo);
          CHECK(mean.out[p][i] == Approx(m / group.size()).epsilon(1e-12));
        }
      }
    }
  }
}

TEST_CASE("all_gather stacks or concatenates in group order", "[shard_map]") {
  uint32_t seed = 100;
  const Shape block{2, 3};
  for (const Mesh& mesh : small_meshes())
    for (const auto& names : axis_choices(mesh))
      for (bool tiled : {false, true})
        for (int dim = 0; dim < (tiled ? 2 : 3); ++dim) {
          const auto r = run_per_device<float>(
              mesh, block, [&](const auto& x) { return dax::all_gather(x, dax::AxisNames(names), dim, tiled); }, ++seed);
          for (int p = 0; p < static_cast<int>(r.out.size()); ++p) {
            const auto group = group_of(mesh, p, names);
            const int64_t n = group.size();
            Shape expect = block;
            if (tiled) expect[dim] *= n;
            else expect.insert(expect.begin() + dim, n);
            INFO(dax::to_string(mesh) << " dim " << dim << " tiled " << tiled << " position " << p);
            REQUIRE(r.out_block == expect);
            for (int64_t f = 0; f < dax::numel(expect); ++f) {
              auto idx = unravel(f, expect);
              int64_t j;
              if (tiled) {
                j = idx[dim] / block[dim];
                idx[dim] %= block[dim];
              } else {
                j = idx[dim];
                idx.erase(idx.begin() + dim);
              }
              CHECK(r.out[p][f] == r.in[group[j]][ravel(idx, block)]);
            }
          }
        }
}

TEST_CASE("psum_scatter keeps each member's block of the sum", "[shard_map]") {
  uint32_t seed = 200;
  for (const Mesh& mesh : small_meshes())
    for (const auto& names : axis_choices(mesh))
      for (bool tiled : {false, true})
        for (int dim = 0; dim < 2; ++dim) {
          const int64_t n = mesh.axis_size(names[0]) * (names.size() > 1 ? mesh.axis_size(names[1]) : 1);
          Shape block{3, 2};
          block[dim] = tiled ? 2 * n : n;
          const auto r = run_per_device<float>(
              mesh, block, [&](const auto& x) { return dax::psum_scatter(x, dax::AxisNames(names), dim, tiled); },
              ++seed);
          for (int p = 0; p < static_cast<int>(r.out.size()); ++p) {
            const auto group = group_of(mesh, p, names);
            const int i = index_in(group, p);
            Shape expect = block;
            if (tiled) expect[dim] = 2;
            else expect.erase(expect.begin() + dim);
            INFO(dax::to_string(mesh) << " dim " << dim << " tiled " << tiled << " position " << p);
            REQUIRE(r.out_block == expect);
            for (int64_t f = 0; f < dax::numel(expect); ++f) {
              auto idx = unravel(f, expect);
              if (tiled) idx[dim] += i * 2;
              else idx.insert(idx.begin() + dim, i);
              float s = 0;
              for (int q : group) s += r.in[q][ravel(idx, block)];
              CHECK(r.out[p][f] == s);
            }
          }
        }
}

TEST_CASE("all_to_all moves part j to member j", "[shard_map]") {
  uint32_t seed = 300;
  for (const Mesh& mesh : small_meshes())
    for (const auto& names : axis_choices(mesh))
      for (bool tiled : {false, true})
        for (int split = 0; split < 3; ++split)
          for (int concat = 0; concat < 3; ++concat) {
            const int64_t n = mesh.axis_size(names[0]) * (names.size() > 1 ? mesh.axis_size(names[1]) : 1);
            Shape block{2, 3, 2};
            block[split] = tiled ? 2 * n : n;
            const auto r = run_per_device<int32_t>(
                mesh, block,
                [&](const auto& x) { return dax::all_to_all(x, dax::AxisNames(names), split, concat, tiled); }, ++seed);
            for (int p = 0; p < static_cast<int>(r.out.size()); ++p) {
              const auto group = group_of(mesh, p, names);
              const int i = index_in(group, p);
              Shape part = block;  // what each member sends each other member
              if (tiled) part[split] = 2;
              else part.erase(part.begin() + split);
              Shape expect = part;
              if (tiled) expect[concat] *= n;
              else expect.insert(expect.begin() + concat, n);
              INFO(dax::to_string(mesh) << " split " << split << " concat " << concat << " tiled " << tiled);
              REQUIRE(r.out_block == expect);
              for (int64_t f = 0; f < dax::numel(expect); ++f) {
                auto idx = unravel(f, expect);
                int64_t j;
                if (tiled) {
                  j = idx[concat] / part[concat];
                  idx[concat] %= part[concat];
                  idx[split] += i * 2;
                } else {
                  j = idx[concat];
                  idx.erase(idx.begin() + concat);
                  idx.insert(idx.begin() + split, i);
                }
                CHECK(r.out[p][f] == r.in[group[j]][ravel(idx, block)]);
              }
            }
          }
}

TEST_CASE("ppermute shifts along the group; unmatched devices get zeros", "[shard_map]") {
  uint32_t seed = 400;
  for (const Mesh& mesh : small_meshes())
    for (const auto& names : axis_choices(mesh)) {
      const int n = static_cast<int>(mesh.axis_size(names[0]) * (names.size() > 1 ? mesh.axis_size(names[1]) : 1));
      // A ring shift, a one-way shift (member 0 receives nothing), and a swap of the ends.
      std::vector<std::vector<std::pair<int, int>>> perms(3);
      for (int j = 0; j < n; ++j) perms[0].push_back({j, (j + 1) % n});
      for (int j = 0; j + 1 < n; ++j) perms[1].push_back({j, j + 1});
      perms[2] = {{0, n - 1}, {n - 1, 0}};
      if (n == 1) perms[2] = {{0, 0}};
      for (const auto& perm : perms) {
        const bool started = seed % 2 == 0;  // every other case through ppermute_start(...).wait()
        const auto r = run_per_device<double>(
            mesh, {4}, [&](const auto& x) {
              if (started) return dax::ppermute_start(x, dax::AxisNames(names), perm).wait();
              return dax::ppermute(x, dax::AxisNames(names), perm);
            }, ++seed);
        for (int p = 0; p < static_cast<int>(r.out.size()); ++p) {
          const auto group = group_of(mesh, p, names);
          const int i = index_in(group, p);
          int from = -1;
          for (auto [s, d] : perm)
            if (d == i) from = s;
          for (int e = 0; e < 4; ++e) CHECK(r.out[p][e] == (from < 0 ? 0.0 : r.in[group[from]][e]));
        }
      }
    }
}

TEST_CASE("ppermute_start: the same values, bytes and gradients as ppermute, while work goes on", "[shard_map]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  std::vector<std::pair<int, int>> ring;
  for (int j = 0; j < n; ++j) ring.push_back({j, (j + 1) % n});
  const auto x = dax::device_put(dax::test::uniform_values(6 * n, 31), Shape{6 * n}, NamedSharding(mesh, P("x")));
  const auto w = dax::device_put(dax::test::uniform_values(6 * n, 32), Shape{6 * n}, NamedSharding(mesh, P("x")));
  const auto step = [&](bool started, const DistArray<float>& xin) {
    return dax::shard_map([&, started](const DistArray<float>& b, const DistArray<float>& wb) {
      if (!started) return dax::psum(dax::sum(dax::ppermute(dax::exp(b), "x", ring) * wb), "x");
      auto pending = dax::ppermute_start(dax::exp(b), "x", ring);
      const auto meanwhile = dax::tanh(wb);  // work while it moves
      { auto dropped = dax::ppermute_start(b, "x", ring); }  // dropped unwaited: still runs to the end
      return dax::psum(dax::sum(pending.wait() * wb) + dax::sum(meanwhile) * 0.0f, "x");
    }, mesh, {P("x"), P("x")}, P())(xin, w);
  };
  dax::comm_stats().reset();
  const auto [v0, g0] = dax::value_and_grad([&](const DistArray<float>& p) { return step(false, p); })(x);
  const auto plain = dax::comm_stats().of("ppermute");
  dax::comm_stats().reset();
  auto [v1, g1] = dax::value_and_grad([&](const DistArray<float>& p) { return step(true, p); })(x);
  const auto async = dax::comm_stats().of("ppermute");
  CHECK(host(v1) == host(v0));
  CHECK(host(g1) == host(g0));
  // One more ppermute forward (the dropped one); the backward's transposes are the same.
  CHECK(async.calls == plain.calls + (n > 1 ? 1 : 0));
  CHECK(async.bytes == plain.bytes + (n > 1 ? 6 * 4 : 0));
}

TEST_CASE("axis_index and axis_size", "[shard_map]") {
  for (const Mesh& mesh : small_meshes())
    for (const auto& names : axis_choices(mesh)) {
      const auto r = run_per_device<int64_t>(
          mesh, {1},
          [&](const auto& x) {
            return x * int64_t{0} + int64_t(dax::axis_index(dax::AxisNames(names)) * 1000 +
                                            dax::axis_size(dax::AxisNames(names)));
          },
          7);
      for (int p = 0; p < static_cast<int>(r.out.size()); ++p) {
        const auto group = group_of(mesh, p, names);
        CHECK(r.out[p][0] == index_in(group, p) * 1000 + static_cast<int64_t>(group.size()));
      }
    }
}

TEST_CASE("a row-sharded matmul summed with psum equals the global product", "[shard_map]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  std::mt19937 rng(11);
  const int64_t m = 5, k = 4 * n, cols = 3;
  const auto a = dax::test::random_values<float>(m * k, rng), b = dax::test::random_values<float>(k * cols, rng);
  const auto A = dax::device_put(a, {m, k}, NamedSharding(mesh, P()));
  const auto B = dax::device_put(b, {k, cols}, NamedSharding(mesh, P()));
  // Contraction dim split: each device multiplies its slices, psum adds the partial products.
  auto f = dax::shard_map([](const DistArray<float>& x, const DistArray<float>& y) { return dax::psum(dax::matmul(x, y), "x"); },
                          mesh, {P(dax::none, "x"), P("x", dax::none)}, P());
  const auto C = f(A, B);
  CHECK(C.shape() == Shape{m, cols});
  CHECK(C.sharding() == NamedSharding(mesh, P()));
  const auto c = C.to_host();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float s = 0;
      for (int64_t l = 0; l < k; ++l) s += a[i * k + l] * b[l * cols + j];
      CHECK(c[i * cols + j] == s);
    }
  // Leaving the sum to dax: the blocks are partial sums, out_specs say so, reshard reduces them.
  auto g = dax::shard_map([](const DistArray<float>& x, const DistArray<float>& y) { return dax::matmul(x, y); }, mesh,
                          {P(dax::none, "x"), P("x", dax::none)}, P().with_unreduced("x"));
  CHECK(dax::reshard(g(A, B), NamedSharding(mesh, P())).to_host() == c);
}

TEST_CASE("a Megatron MLP block written with shard_map equals the automatic one", "[shard_map]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"model"});
  std::mt19937 rng(12);
  const int64_t batch = 6, d = 8, hidden = 24;
  auto scaled = [&](int64_t count) {
    auto v = dax::test::random_values<float>(count, rng);
    for (auto& e : v) e /= 64.0f;
    return v;
  };
  const auto x = dax::device_put(scaled(batch * d), {batch, d}, NamedSharding(mesh, P()));
  const auto w1 = dax::device_put(scaled(d * hidden), {d, hidden}, NamedSharding(mesh, P(dax::none, "model")));
  const auto w2 = dax::device_put(scaled(hidden * d), {hidden, d}, NamedSharding(mesh, P("model", dax::none)));
  auto block = dax::shard_map(
      [](const DistArray<float>& xb, const DistArray<float>& w1b, const DistArray<float>& w2b) {
        return dax::psum(dax::matmul(dax::gelu(dax::matmul(xb, w1b)), w2b), "model");
      },
      mesh, {P(), P(dax::none, "model"), P("model", dax::none)}, P());
  const auto manual = block(x, w1, w2).to_host();
  const auto automatic = dax::reshard(dax::matmul(dax::gelu(dax::matmul(x, w1)), w2), NamedSharding(mesh, P())).to_host();
  REQUIRE(manual.size() == automatic.size());
  for (size_t i = 0; i < manual.size(); ++i) CHECK(manual[i] == Approx(automatic[i]).epsilon(1e-5).margin(1e-6));
}

TEST_CASE("a GPipe loop over a 'stage' axis runs each micro-batch through every stage", "[shard_map]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"stage"});
  std::mt19937 rng(13);
  const int64_t micro = 5, batch = 2, d = 4;
  auto w = dax::test::random_values<float>(n * d * d, rng);
  auto xs = dax::test::random_values<float>(micro * batch * d, rng);
  for (auto& e : w) e /= 100.0f;
  for (auto& e : xs) e /= 10.0f;
  const auto W = dax::device_put(w, {n, d, d}, NamedSharding(mesh, P("stage")));
  const auto X = dax::device_put(xs, {micro, batch, d}, NamedSharding(mesh, P()));
  auto pipeline = dax::shard_map(
      [&](const DistArray<float>& wb, const DistArray<float>& xb) {
        const int stage = dax::axis_index("stage"), stages = dax::axis_size("stage");
        const auto weight = dax::reshape(wb, {d, d});
        std::vector<std::pair<int, int>> next;
        for (int s = 0; s + 1 < stages; ++s) next.push_back({s, s + 1});
        auto carry = dax::zeros<float>({batch, d}, dax::local_sharding());
        std::vector<DistArray<float>> outputs;
        for (int t = 0; t < micro + stages - 1; ++t) {
          if (stage == 0 && t < micro) carry = dax::reshape(dax::slice(xb, {t}, {t + 1}), {batch, d});
          const auto h = dax::tanh(dax::matmul(carry, weight));
          if (stage == stages - 1 && t >= stages - 1) outputs.push_back(h);
          carry = dax::ppermute(h, "stage", next);
        }
        if (stage != stages - 1) outputs.assign(micro, dax::zeros<float>({batch, d}, dax::local_sharding()));
        return dax::psum(dax::stack(outputs), "stage");  // the last stage's results, on every stage
      },
      mesh, {P("stage"), P()}, P());
  const auto y = pipeline(W, X).to_host();
  REQUIRE(y.size() == xs.size());
  for (int64_t mb = 0; mb < micro; ++mb) {
    std::vector<float> h(xs.begin() + mb * batch * d, xs.begin() + (mb + 1) * batch * d);
    for (int s = 0; s < n; ++s) {
      std::vector<float> next(batch * d);
      for (int64_t r = 0; r < batch; ++r)
        for (int64_t c = 0; c < d; ++c) {
          float acc = 0;
          for (int64_t l = 0; l < d; ++l) acc += h[r * d + l] * w[(s * d + l) * d + c];
          next[r * d + c] = std::tanh(acc);
        }
      h = next;
    }
    for (int64_t e = 0; e < batch * d; ++e) CHECK(y[mb * batch * d + e] == Approx(h[e]).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("several outputs, scalars passed through, ranks outside the mesh", "[shard_map]") {
  const int n = dax::test::world_size();
  const Mesh mesh({std::max(1, n - 1)}, {"x"});  // leaves the last rank out when n > 1
  const int64_t rows = 2 * mesh.size();
  std::mt19937 rng(14);
  const auto a = dax::test::random_values<float>(rows * 3, rng);
  const auto A = dax::device_put(a, {rows, 3}, NamedSharding(mesh, P()));
  auto f = dax::shard_map(
      [](const DistArray<float>& x, float scale, int shift) {
        return std::make_tuple(x * scale + float(shift), dax::sum(x, {0}, true));
      },
      mesh, {P("x")}, {P("x"), P("x")});
  const auto [scaled, sums] = f(A, 2.0f, 1);
  CHECK(scaled.shape() == Shape{rows, 3});
  CHECK(sums.shape() == Shape{int64_t(mesh.size()), 3});
  CHECK(scaled.is_addressable() == mesh.contains(dax::test::world_rank()));
  if (!mesh.contains(dax::test::world_rank())) return;
  const auto s = scaled.to_host(), t = sums.to_host();
  for (int64_t i = 0; i < rows * 3; ++i) CHECK(s[i] == a[i] * 2 + 1);
  for (int64_t b = 0; b < mesh.size(); ++b)
    for (int c = 0; c < 3; ++c) CHECK(t[b * 3 + c] == a[(2 * b) * 3 + c] + a[(2 * b + 1) * 3 + c]);
}

TEST_CASE("shard_map errors, the same on every rank", "[shard_map][errors]") {
  const int n = dax::test::world_size();
  const Mesh mesh({n}, {"x"});
  const auto x = dax::zeros<float>({2 * n, 3}, NamedSharding(mesh, P()));
  auto run = [&](auto op, P out = P("x")) {
    return error_of([&] { dax::shard_map(op, mesh, {P("x")}, out)(x); });
  };
  CHECK(error_of([&] { dax::psum(x, "x"); }) ==
        "psum: called outside dax::shard_map; collectives over named mesh axes exist only inside a mapped function");
  CHECK(run([](const DistArray<float>& b) { return dax::psum(b, "y"); }) ==
        "psum: no mesh axis named 'y' in Mesh('x': " + std::to_string(n) + ")");
  CHECK(run([](const DistArray<float>& b) { return dax::all_gather(b, "x", 3); }) ==
        "all_gather: dim 3 is out of range for 3 positions");
  CHECK(run([](const DistArray<float>& b) { return dax::psum_scatter(b, "x", 1); }) ==
        (n == 3 ? "(no error)"
                : "psum_scatter: scatter_dim 1 has size 3 but must equal the " + std::to_string(n) +
                      " devices of ('x',) (or pass tiled = true)"));
  CHECK(run([](const DistArray<float>& b) { return dax::all_to_all(b, "x", 1, 0, true); }) ==
        (n == 1 || n == 3 ? "(no error)"
                          : "all_to_all: tiled split_dim 1 has size 3, which the " + std::to_string(n) +
                                " devices of ('x',) do not divide evenly"));
  CHECK(run([](const DistArray<float>& b) { return dax::ppermute(b, "x", {{0, 0}, {0, 0}}); }) ==
        "ppermute: source 0 appears in more than one pair");
  CHECK(run([&](const DistArray<float>& b) { return dax::ppermute(b, "x", {{0, n}}); }) ==
        "ppermute: pair (0, " + std::to_string(n) + ") is out of range for the " + std::to_string(n) +
            " devices of ('x',)");
  CHECK(error_of([&] { dax::shard_map([](const DistArray<float>& b) { return b; }, mesh, {P("x"), P()}, P("x"))(x); }) ==
        "shard_map: 2 in_specs for 1 array argument");
  const auto odd = dax::zeros<float>({2 * n + 1, 3}, NamedSharding(mesh, P()));
  if (n > 1)
    CHECK(error_of([&] { dax::shard_map([](const DistArray<float>& b) { return b; }, mesh, {P("x")}, P("x"))(odd); }) ==
          "shard_map: in_specs[0] = P('x') splits dimension 0 of size " + std::to_string(2 * n + 1) + " over " +
              std::to_string(n) + " devices, which does not divide it evenly (argument 0 has shape (" +
              std::to_string(2 * n + 1) + ", 3))");
  if (n > 1) {
    // Device 0 returns a block of another shape: every device learns it.
    CHECK(run([](const DistArray<float>& b) {
            return dax::axis_index("x") == 0 ? dax::slice(b, {0}, {1}) : b;
          }) == "shard_map: output 0's local blocks differ in shape: device 0 returned (1, 3), device 1 returned (2, 3)");
    // Claimed replicated but not: found only with DAX_CHECK_REP=1.
    auto differ = [](const DistArray<float>& b) { return b + float(dax::axis_index("x")); };
    CHECK(run(differ, P()) == "(no error)");
    setenv("DAX_CHECK_REP", "1", 1);
    CHECK(run(differ, P()) ==
          "shard_map: out_specs[0] = P() says output 0 is replicated over mesh axis 'x', but device 0 and device 1 "
          "returned different blocks (DAX_CHECK_REP=1)");
    CHECK(run([](const DistArray<float>& b) { return dax::psum(b, "x"); }, P()) == "(no error)");
    unsetenv("DAX_CHECK_REP");
  }
}
