// Optimizers against plain loops on the global values (several steps, random shardings of
// parameters and gradients, partial sums and uneven shapes among them), parameters keeping their
// shardings, ZeRO-1 / ZeRO-2 state and gradient shardings with their communication, schedules,
// and clipping by the global norm.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>

#include <dax/optim/optim.hpp>

#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::error_of;
using dax::test::host;
using dax::test::Pick;
using dax::test::world_size;

namespace {

using Params = std::tuple<DistArray<float>, std::map<std::string, DistArray<double>>, DistArray<float>>;
const std::vector<Shape> shapes{{7, 5}, {6}, {3, 1, 4}, {9}};  // leaf order: 0, 1/a, 1/b, 2

/// An array holding `values` under `s`, made a partial sum by a reshard when `s` is unreduced.
template <class T>
DistArray<T> put(const std::vector<T>& values, const Shape& shape, const NamedSharding& s) {
  const NamedSharding reduced = dax::detail::with_unreduced_axes(s, shape.size(), {});
  return dax::reshard(dax::device_put(values, shape, reduced), s);
}

/// Random values in [-2, 2] with a few decimals.
std::vector<double> random_reals(int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> dist(-200, 200);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng) / 100.0;
  return v;
}

/// The global values of every leaf of a Params tree, in double.
using HostTree = std::vector<std::vector<double>>;

/// A Params tree on one mesh (random shardings; `unreduced` allows partial sums) from host values.
Params make_params(Pick& pick, const Mesh& mesh, const HostTree& v, bool unreduced) {
  auto s = [&](size_t i) { return dax::test::random_sharding(pick, mesh, shapes[i].size(), unreduced); };
  auto f = [&](size_t i) { return put(std::vector<float>(v[i].begin(), v[i].end()), shapes[i], s(i)); };
  auto d = [&](size_t i) { return put(v[i], shapes[i], s(i)); };
  auto a = f(0);
  auto b = d(1);
  auto c = d(2);
  return Params{std::move(a), {{"a", std::move(b)}, {"b", std::move(c)}}, f(3)};
}

HostTree random_tree(std::mt19937& rng) {
  HostTree out;
  for (const auto& s : shapes) out.push_back(random_reals(dax::numel(s), rng));
  return out;
}

HostTree to_host_tree(const Params& p) {
  HostTree out;
  dax::tree_for_each([&](const auto& x) {
    const auto h = host(x);
    out.emplace_back(h.begin(), h.end());
  }, p);
  return out;
}

std::vector<NamedSharding> shardings_of(const Params& p) {
  std::vector<NamedSharding> out;
  dax::tree_for_each([&](const auto& x) { out.push_back(x.sharding()); }, p);
  return out;
}

/// Compares leaf by leaf: float leaves (0 and 3) to a relative 2e-5, double ones to 1e-12.
void check_close(const Params& got, const HostTree& want) {
  const HostTree g = to_host_tree(got);
  if (g[0].empty() && dax::numel(shapes[0]) > 0) return;  // a rank outside the mesh
  for (size_t leaf = 0; leaf < want.size(); ++leaf) {
    const double tol = leaf == 0 || leaf == 3 ? 2e-5 : 1e-12;
    for (size_t i = 0; i < want[leaf].size(); ++i) {
      INFO("leaf " << leaf << " element " << i);
      CHECK(std::abs(g[leaf][i] - want[leaf][i]) <= tol * std::max(1.0, std::abs(want[leaf][i])));
    }
  }
}

struct SgdCase {
  dax::optim::SGDOptions options;
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

}  // namespace

TEST_CASE("SGD matches torch.optim.SGD's loop over several steps", "[optim][sgd]") {
  Pick pick(31);
  auto schedule = [](int64_t step) { return 0.05 / (1.0 + step); };
  const std::vector<SgdCase> cases{
      {{.lr = 0.1}, 0.1, 0, 0, 0, false},
      {{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01}, 0.05, 0.9, 0, 0.01, false},
      {{.lr = 0.05, .momentum = 0.8, .nesterov = true, .weight_decay = 0.1}, 0.05, 0.8, 0, 0.1, true},
      {{.lr = schedule, .momentum = 0.5, .dampening = 0.25}, -1, 0.5, 0.25, 0, false},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const SgdCase& c = cases[k];
    INFO("case " << k);
    const Mesh& mesh = dax::test::random_mesh(pick);
    HostTree want = random_tree(pick.rng);
    Params params = make_params(pick, mesh, want, false);
    const auto shardings = shardings_of(params);
    dax::optim::SGD opt(params, c.options);
    HostTree buf = want;
    for (int step = 0; step < 4; ++step) {
      const HostTree g = random_tree(pick.rng);
      const Params grads = make_params(pick, mesh, g, true);
      opt.step(params, grads);
      const double lr = c.lr < 0 ? schedule(step) : c.lr;
      for (size_t leaf = 0; leaf < want.size(); ++leaf)
        for (size_t i = 0; i < want[leaf].size(); ++i) {
          double& p = want[leaf][i];
          double d = g[leaf][i] + c.weight_decay * p;
          if (c.momentum != 0) {
            double& b = buf[leaf][i];
            b = step == 0 ? d : c.momentum * b + (1 - c.dampening) * d;
            d = c.nesterov ? d + c.momentum * b : b;
          }
          p -= lr * d;
        }
      CHECK(shardings_of(params) == shardings);
      check_close(params, want);
    }
    CHECK(opt.step_count() == 4);
  }
}

TEST_CASE("AdamW matches torch.optim.AdamW's loop over several steps", "[optim][adamw]") {
  Pick pick(32);
  for (int k = 0; k < 3; ++k) {
    INFO("case " << k);
    const Mesh& mesh = dax::test::random_mesh(pick);
    HostTree want = random_tree(pick.rng);
    Params params = make_params(pick, mesh, want, false);
    const auto shardings = shardings_of(params);
    const double lr = 0.01 * (k + 1), b1 = k == 2 ? 0.8 : 0.9, b2 = k == 2 ? 0.99 : 0.999, eps = 1e-8;
    const double wd = k == 0 ? 0.01 : 0.1;
    dax::optim::AdamW opt(params, {.lr = lr, .b1 = b1, .b2 = b2, .weight_decay = wd});
    HostTree m(want.size()), v(want.size());
    for (size_t leaf = 0; leaf < want.size(); ++leaf) m[leaf] = v[leaf] = std::vector<double>(want[leaf].size(), 0.0);
    for (int step = 1; step <= 4; ++step) {
      const HostTree g = random_tree(pick.rng);
      opt.step(params, make_params(pick, mesh, g, true));
      for (size_t leaf = 0; leaf < want.size(); ++leaf)
        for (size_t i = 0; i < want[leaf].size(); ++i) {
          double& p = want[leaf][i];
          p *= 1 - lr * wd;
          m[leaf][i] = b1 * m[leaf][i] + (1 - b1) * g[leaf][i];
          v[leaf][i] = b2 * v[leaf][i] + (1 - b2) * g[leaf][i] * g[leaf][i];
          const double mhat = m[leaf][i] / (1 - std::pow(b1, step)), vhat = v[leaf][i] / (1 - std::pow(b2, step));
          p -= lr * mhat / (std::sqrt(vhat) + eps);
        }
      CHECK(shardings_of(params) == shardings);
      check_close(params, want);
    }
    // The state is a tree in the parameters' shardings (by default), with the step count.
    const auto state = opt.state();
    CHECK(host(state.count) == std::vector<int64_t>{4});
    std::vector<NamedSharding> state_shardings;
    dax::tree_for_each([&](const auto& x) { state_shardings.push_back(x.sharding()); }, state.mu);
    CHECK(state_shardings == shardings);
    const HostTree mu = to_host_tree(state.mu);
    if (!mu[0].empty())
      for (size_t i = 0; i < m[1].size(); ++i) CHECK(std::abs(mu[1][i] - m[1][i]) <= 1e-12);
  }
}

TEST_CASE("AdamW's leaves wait for one kernel a group, cut at the same leaf on every rank", "[optim][adamw]") {
  // Leaves of uneven pieces (7 rows over the world): the group budget counts global sizes, so
  // every rank runs each leaf's after-step (a collective move in ZeRO) at the same point.
  const Mesh mesh({world_size()}, {"x"});
  const NamedSharding rows(mesh, P("x"));
  const std::vector<int64_t> lengths{7, 3, 20, 5, 9, 1, 30};
  const int64_t budget = 16 * int64_t(sizeof(float));  // bytes of one new array a group may hold
  dax::detail::AdamWPending pending(0.9, 0.999, 1 - 0.1 * 0.01, 0.1, 1.0, 1e-8, budget);
  std::vector<int> done;
  std::vector<std::vector<float>> want;
  std::vector<DistArray<float>> outs;
  std::mt19937 rng(3);
  int64_t group = 0;
  size_t flushed_at = 0;  // leaves done when the next group starts, by the global-bytes rule
  for (size_t k = 0; k < lengths.size(); ++k) {
    const Shape shape{lengths[k]};
    const auto pv = random_reals(lengths[k], rng), gv = random_reals(lengths[k], rng);
    const std::vector<float> pf(pv.begin(), pv.end()), gf(gv.begin(), gv.end());
    const auto p = dax::device_put(pf, shape, rows), g = dax::device_put(gf, shape, rows);
    const auto zero = dax::zeros<float>(shape, rows);
    const auto p_out = dax::detail::new_pieces<float>(rows, shape), m_out = dax::detail::new_pieces<float>(rows, shape),
               v_out = dax::detail::new_pieces<float>(rows, shape);
    const int64_t bytes = lengths[k] * int64_t(sizeof(float));
    if (k > 0 && group + bytes > budget) flushed_at = k, group = 0;
    group += bytes;
    pending.add(p, g, zero, zero, p_out, m_out, v_out, [&done, k] { done.push_back(int(k)); });
    CHECK(done.size() == flushed_at);
    outs.push_back(p_out);
    std::vector<float> w(pf.size());  // the first step from zero moments: p decay - lr g / (|g| + eps)
    for (size_t i = 0; i < w.size(); ++i) {
      const float m = 0.1f * gf[i], v = 0.001f * gf[i] * gf[i];  // as the kernel rounds them, in float
      w[i] = pf[i] * (1 - 0.1f * 0.01f) - 0.1f * m / (std::sqrt(v) * 1.0f + 1e-8f);
    }
    want.push_back(w);
  }
  pending.flush();
  CHECK(done == std::vector<int>{0, 1, 2, 3, 4, 5, 6});
  for (size_t k = 0; k < outs.size(); ++k) {
    const auto got = host(outs[k]);
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[k][i]).epsilon(1e-6));
  }
}

TEST_CASE("AdamW updates in place what no one else holds, and copies what someone does", "[optim][adamw]") {
  const Mesh mesh({world_size()}, {"x"});
  const NamedSharding r(mesh, P()), rows(mesh, P("x"));
  std::mt19937 rng(9);
  auto put = [&](const Shape& s, const NamedSharding& where) {
    const auto v = random_reals(dax::numel(s), rng);
    return dax::device_put(std::vector<float>(v.begin(), v.end()), s, where);
  };
  std::vector<DistArray<float>> params{put({5, 3}, rows), put({7}, r)};
  const std::vector<DistArray<float>> grads{put({5, 3}, rows), put({7}, r)};
  dax::optim::AdamW opt(params, {.lr = 0.1});
  opt.step(params, grads);  // the moments shared one zero buffer: new arrays
  // A copy of the parameters and a state() keep their values through the next step.
  const std::vector<DistArray<float>> kept = params;
  const auto state = opt.state();
  const auto kept_values = host(kept[0]), mu_values = host(state.mu[0]);
  opt.step(params, grads);
  CHECK(host(kept[0]) == kept_values);
  CHECK(host(state.mu[0]) == mu_values);
  CHECK(host(params[0]) != kept_values);
  // Held by no one else, the parameters and moments take the new values where they are: the step
  // allocates nothing (the gradients are in the state's layout already).
  dax::reset_peak_memory();
  const int64_t before = dax::memory_stats().bytes_in_use;
  const float* where = params[0].local_data().data();
  opt.step(params, grads);
  CHECK(dax::memory_stats().peak_bytes_in_use == before);
  CHECK(params[0].local_data().data() == where);
  CHECK(params[0].sharding() == rows);
}

TEST_CASE("AdamW never updates in place a parameter that views another array's buffer", "[optim][adamw]") {
  // A reshard that keeps most of its input's piece views it (array/reshard_program.hpp): here rows
  // 0-1 of 3 on the first of two devices. The view's handle is its only holder, yet writing it
  // would write `whole` (found 2026-12-02: six of whole's values changed by two steps).
  const Mesh mesh({world_size()}, {"x"});
  std::mt19937 rng(10);
  const auto values = random_reals(9, rng);
  const std::vector<float> host_values(values.begin(), values.end());
  const DistArray<float> whole = dax::device_put(host_values, {3, 3}, NamedSharding(mesh, P()));
  std::vector<DistArray<float>> params{dax::reshard(whole, NamedSharding(mesh, P("x")))};
  const std::vector<DistArray<float>> grads{dax::ones<float>({3, 3}, NamedSharding(mesh, P("x")))};
  dax::optim::AdamW opt(params, {.lr = 0.5});
  for (int step = 0; step < 3; ++step) opt.step(params, grads);
  CHECK(host(whole) == host_values);
  CHECK(host(params[0]) != host_values);
}

TEST_CASE("ZeRO-1: replicated parameters, state sharded over an axis", "[optim][zero]") {
  const int n = world_size();
  const Mesh mesh({n}, {"x"});
  Pick pick(33);
  HostTree want = random_tree(pick.rng);
  const NamedSharding rep(mesh, P());
  auto rep_params = [&](const HostTree& v) {
    auto f = [&](size_t i) { return put(std::vector<float>(v[i].begin(), v[i].end()), shapes[i], rep); };
    return Params{f(0), {{"a", put(v[1], shapes[1], rep)}, {"b", put(v[2], shapes[2], rep)}}, f(3)};
  };
  Params params = rep_params(want);
  dax::optim::AdamW opt(params, {.lr = 0.01, .weight_decay = 0.0, .state_sharding = dax::optim::shard_over("x")});
  // shard_over: the first dimension n divides, else the largest one with at least n elements
  // (uneven), else none. Here (7, 5) splits unevenly on 7 at 2, 3, 4 and stays whole at 8; (6,)
  // evenly at 2 and 3, unevenly at 4; (3, 1, 4) on 4 at 2 and 4, on 3 at 3; (9,) on 9 at 3, unevenly elsewhere.
  auto expect = [&](const Shape& s) -> NamedSharding {
    if (n == 1) return rep;
    for (size_t d = 0; d < s.size(); ++d)
      if (s[d] % n == 0) return dax::detail::make_sharding(mesh, [&] {
        std::vector<std::vector<int>> dims(s.size());
        dims[d] = {0};
        return dims;
      }(), {});
    int best = -1;
    for (size_t d = 0; d < s.size(); ++d)
      if (s[d] >= n && (best < 0 || s[d] > s[best])) best = static_cast<int>(d);
    if (best < 0) return rep;
    std::vector<std::vector<int>> dims(s.size());
    dims[best] = {0};
    return dax::detail::make_sharding(mesh, dims, {});
  };
  std::vector<NamedSharding> state_shardings;
  dax::tree_for_each([&](const auto& x) { state_shardings.push_back(x.sharding()); }, opt.state().nu);
  for (size_t i = 0; i < shapes.size(); ++i) CHECK(state_shardings[i] == expect(shapes[i]));

  HostTree m = want, v = want;
  for (auto& x : m) std::fill(x.begin(), x.end(), 0.0);
  for (auto& x : v) std::fill(x.begin(), x.end(), 0.0);
  for (int step = 1; step <= 2; ++step) {
    const HostTree g = random_tree(pick.rng);
    const Params grads = rep_params(g);  // all-reduced already: moving them to the state is local
    dax::comm_stats().reset();
    opt.step(params, grads);
    CHECK(dax::comm_stats().of("reduce_scatter").bytes == 0);
    CHECK(dax::comm_stats().of("all_reduce").bytes == 0);
    for (size_t leaf = 0; leaf < want.size(); ++leaf)
      for (size_t i = 0; i < want[leaf].size(); ++i) {
        m[leaf][i] = 0.9 * m[leaf][i] + 0.1 * g[leaf][i];
        v[leaf][i] = 0.999 * v[leaf][i] + 0.001 * g[leaf][i] * g[leaf][i];
        want[leaf][i] -= 0.01 * (m[leaf][i] / (1 - std::pow(0.9, step))) /
                         (std::sqrt(v[leaf][i] / (1 - std::pow(0.999, step))) + 1e-8);
      }
    for (const auto& s : shardings_of(params)) CHECK(s == rep);
    check_close(params, want);
  }
  std::vector<NamedSharding> after;
  dax::tree_for_each([&](const auto& x) { after.push_back(x.sharding()); }, opt.state().mu);
  CHECK(after == state_shardings);
}

TEST_CASE("ZeRO-2: partial-sum gradients cost one reduce-scatter to the state's sharding", "[optim][zero]") {
  const int n = world_size();
  const Mesh mesh({n}, {"x"});
  Pick pick(34);
  using Two = std::vector<DistArray<float>>;
  const std::vector<Shape> two{{8, 6}, {24}};  // split evenly at every rank count
  const NamedSharding rep(mesh, P()), partial(mesh, P().with_unreduced("x"));
  auto make = [&](const NamedSharding& s) {
    Two out;
    for (const auto& shape : two) {
      std::vector<double> d = random_reals(dax::numel(shape), pick.rng);
      out.push_back(put(std::vector<float>(d.begin(), d.end()), shape, s));
    }
    return out;
  };
  Two params = make(rep);
  const auto zero = dax::optim::shard_over("x");
  dax::optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9, .state_sharding = zero, .grad_sharding = zero});
  const Two grads = make(partial);
  // What reducing each gradient to its shard costs alone.
  dax::comm_stats().reset();
  for (const auto& g : grads) (void)dax::reshard(g, zero("", rep, g.shape()));
  const auto alone = dax::comm_stats().of("reduce_scatter");
  const auto p0 = host(params[0]), g0 = host(grads[0]);
  dax::comm_stats().reset();
  opt.step(params, grads);
  const auto rs = dax::comm_stats().of("reduce_scatter");
  CHECK(rs.bytes == alone.bytes);
  CHECK(rs.bytes == int64_t((n - 1) * (48 + 24) * sizeof(float) / n));
  if (n > 1) CHECK(rs.calls == 2);
  CHECK(dax::comm_stats().of("all_reduce").bytes == 0);
  CHECK(params[0].sharding() == rep);
  const auto p1 = host(params[0]);
  for (size_t i = 0; i < p1.size(); ++i) CHECK(std::abs(p1[i] - (p0[i] - 0.1f * g0[i])) <= 1e-6f);
  CHECK(opt.state().momentum[0][1].sharding() == NamedSharding(mesh, n > 1 ? P("x") : P()));
}

TEST_CASE("schedules: constant, warmup + cosine (optax's), any callable", "[optim][schedule]") {
  const auto c = dax::optim::constant(0.3);
  CHECK(c(0) == 0.3);
  CHECK(c(1000) == 0.3);
  const auto s = dax::optim::warmup_cosine(1.0, 10, 110, 0.1);
  CHECK(s(0) == 0.0);
  CHECK(s(5) == Approx(0.5));
  CHECK(s(10) == Approx(1.0));
  CHECK(s(60) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.5))));
  CHECK(s(110) == Approx(0.1));
  CHECK(s(500) == Approx(0.1));
  const auto no_warmup = dax::optim::warmup_cosine(2.0, 0, 4);
  CHECK(no_warmup(0) == Approx(2.0));
  CHECK(no_warmup(2) == Approx(1.0));
  const dax::optim::Schedule f = [](int64_t step) { return 1.0f / (step + 1); };
  CHECK(f(3) == 0.25);
  CHECK(error_of([] { dax::optim::warmup_cosine(1.0, 10, 10); }) ==
        "warmup_cosine: needs 0 <= warmup_steps < total_steps, got 10 warmup steps of 10");
}

TEST_CASE("clip_by_global_norm scales every leaf by one factor from the norm over all", "[optim][clip]") {
  Pick pick(35);
  for (int k = 0; k < 4; ++k) {
    const Mesh& mesh = dax::test::random_mesh(pick);
    const HostTree g = random_tree(pick.rng);
    const Params grads = make_params(pick, mesh, g, true);
    double sq = 0;
    for (size_t leaf = 0; leaf < g.size(); ++leaf)
      for (double x : g[leaf]) {
        const double e = leaf == 0 || leaf == 3 ? double(float(x)) : x;
        sq += e * e;
      }
    const double norm = dax::optim::global_norm(grads);
    const bool member = mesh.contains(dax::test::world_rank());
    if (member) CHECK(norm == Approx(std::sqrt(sq)).epsilon(1e-12));
    else CHECK(norm == 0.0);
    const double ref = std::sqrt(sq);  // the same on every rank (a rank outside the mesh sees norm 0)
    const double max_norm = k % 2 ? ref / 3 : ref * 2;
    const Params clipped = dax::optim::clip_by_global_norm(grads, max_norm);
    CHECK(shardings_of(clipped) == shardings_of(grads));
    const HostTree got = to_host_tree(clipped);
    if (!member) continue;
    const double scale = k % 2 ? 1.0 / 3 : 1.0;
    for (size_t leaf = 0; leaf < g.size(); ++leaf)
      for (size_t i = 0; i < g[leaf].size(); ++i) {
        const double tol = leaf == 0 || leaf == 3 ? 1e-6 : 1e-14;
        CHECK(std::abs(got[leaf][i] - g[leaf][i] * scale) <= (tol + 1e-12) * std::max(1.0, std::abs(g[leaf][i])));
      }
  }
  CHECK(error_of([] {
          std::vector<DistArray<float>> none;
          dax::optim::clip_by_global_norm(none, 0.0, 1.0);
        }) == "clip_by_global_norm: max_norm must be > 0, got 0");
}

TEST_CASE("optimizers refuse gradients that do not fit their parameters", "[optim]") {
  const Mesh mesh({1}, {"x"});
  const NamedSharding s(mesh, P());
  if (dax::test::world_rank() != 0) return;  // a one-device mesh: rank 0 alone
  std::map<std::string, DistArray<float>> params{{"w", dax::ones<float>({2, 3}, s)}};
  dax::optim::AdamW opt(params);
  const std::map<std::string, DistArray<float>> wrong{{"w", dax::ones<float>({3, 2}, s)}};
  CHECK(error_of([&] { opt.step(params, wrong); }) ==
        "AdamW.step: the gradient of 'w' has shape (3, 2), its parameter (2, 3)");
  const std::map<std::string, DistArray<float>> other{{"v", dax::ones<float>({2, 3}, s)}};
  CHECK(error_of([&] { opt.step(params, other); }) ==
        "AdamW.step: the gradient tree differs from the parameters at the root: a key 'v' not in the parameters");
  params.emplace("x", dax::ones<float>({1}, s));
  CHECK(error_of([&] { opt.step(params, params); }) ==
        "AdamW.step: the parameter tree differs from the optimizer's state at the root: a key 'x' not in the "
        "optimizer's state");
  CHECK(error_of([&] { dax::optim::AdamW bad(params, {.b1 = 1.0}); }) == "AdamW: b1 must be in [0, 1), got 1");
  CHECK(error_of([&] { dax::optim::SGD bad(params, {.nesterov = true}); }) ==
        "SGD: Nesterov momentum requires a momentum > 0 and zero dampening, got momentum 0 and dampening 0");
  CHECK(opt.step_count() == 0);
}
