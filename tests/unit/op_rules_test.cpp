// The op sharding rules, pure: for every pair of input shardings on 1-d and 2-d meshes of up to 8
// devices, the matmul rule's choice costs no more than any legal candidate, and running it on
// simulated devices (local products, then the planned reshard of the partial sums) gives A @ B.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include <dax/ops/elementwise_rule.hpp>
#include <dax/ops/matmul_rule.hpp>
#include <dax/ops/rule_cache.hpp>
#include <dax/ops/set_cost_model.hpp>
#include "../common/meshes.hpp"
#include "../common/simulate.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;

namespace {

std::vector<double> global_matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k,
                                  int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) c[i * n + j] += a[i * k + l] * b[l * n + j];
  return c;
}

// Simulates the chosen candidate on every device and compares with the pieces of A @ B.
bool matmul_rule_is_right(const dax::detail::MatmulRule& rule, const Shape& as, const Shape& bs,
                          const std::vector<double>& a, const std::vector<double>& b) {
  const auto& c = rule.best();
  const int64_t m = as[0], k = as[1], n = bs[1];
  const auto ap = dax::test::pieces_of_value(as, a, c.a), bp = dax::test::pieces_of_value(bs, b, c.b);
  dax::test::Buffers partial;
  for (int d : c.out.mesh().devices()) {
    const auto co = c.out.mesh().coords(d);
    const dax::Box ab = c.a.box_at(co, as), bb = c.b.box_at(co, bs);
    partial[d] = global_matmul(ap.at(d), bp.at(d), ab[0].size(), ab[1].size(), bb[1].size());
  }
  const auto plan = dax::detail::plan_reshard(rule.out_shape, c.out, rule.target);
  for (const auto& step : plan.steps)
    if (!dax::test::simulate_step(rule.out_shape, step, partial)) return false;
  return partial == dax::test::pieces_of_value(rule.out_shape, global_matmul(a, b, m, k, n), rule.target);
}

}  // namespace

TEST_CASE("matmul rule: cheapest legal candidate, right result, every pair of specs", "[ops][matmul]") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> dist(-9, 9);
  const std::vector<Mesh> meshes{Mesh({2}, {"x"}), Mesh({3}, {"x"}), Mesh({4}, {"x"}), Mesh({8}, {"x"}),
                                 Mesh({2, 2}, {"x", "y"}), Mesh({2, 3}, {"x", "y"}), Mesh({4, 2}, {"x", "y"})};
  int checked = 0;
  for (const Mesh& mesh : meshes) {
    for (const auto& [as, bs] : std::vector<std::pair<Shape, Shape>>{{{8, 6}, {6, 4}}, {{5, 7}, {7, 3}}}) {
      std::vector<double> a(dax::numel(as)), b(dax::numel(bs));
      for (auto& v : a) v = dist(rng);
      for (auto& v : b) v = dist(rng);
      const auto specs = dax::test::all_shardings(mesh, 2, false);
      for (const NamedSharding& sa : specs) {
        for (const NamedSharding& sb : specs) {
          const auto rule = dax::detail::matmul_rule(as, sa, bs, sb, std::nullopt, false, false);
          for (const auto& c : rule.candidates) {
            REQUIRE(rule.best().time <= c.time);
            if (c.time == rule.best().time) REQUIRE(rule.best().collectives <= c.collectives);
          }
          REQUIRE_FALSE(rule.target.is_unreduced());
          INFO(dax::detail::explain_matmul_rule(rule, as, bs, 8));
          REQUIRE(matmul_rule_is_right(rule, as, bs, a, b));
          ++checked;
        }
      }
    }
  }
  CHECK(checked > 500);
}

namespace {

// Sets a cost model for one scope and restores the backend's after.
struct ScopedModel {
  explicit ScopedModel(dax::CostModel m) { dax::set_cost_model(m); }
  ~ScopedModel() { dax::reset_cost_model(); }
};

}  // namespace

// The CPU's rates without the fixed cost per collective: bytes and FLOPs alone decide.
constexpr dax::CostModel kBytesAndFlops{5e9, 50e9, 0};

TEST_CASE("matmul rule: the textbook choices", "[ops][matmul]") {
  ScopedModel scoped(kBytesAndFlops);
  const Mesh mesh({4}, {"x"});
  auto s = [&](P p) { return NamedSharding(mesh, p); };
  // Contraction split on A, B replicated and narrow: B is sliced for free and the product is
  // all-reduced (gathering A would move more).
  const auto k = dax::detail::matmul_rule({64, 256}, s(P(dax::none, "x")), {256, 16}, s(P()), std::nullopt, false, false);
  CHECK(k.best().a_cost == 0);
  CHECK(k.best().b_cost == 0);
  CHECK(k.best().out.unreduced_axes() == std::vector<int>{0});
  CHECK(k.best().out_cost == 2 * 3 * 64 * 16 / 4);  // the all-reduce of the (64, 16) result
  // Both split on their first dimension: the smaller operand is the one gathered.
  const auto b_small = dax::detail::matmul_rule({128, 32}, s(P("x")), {32, 64}, s(P("x")), std::nullopt, false, false);
  CHECK(b_small.best().roles == std::vector<int>{0});  // x -> M: A stays, B (smaller) is gathered
  CHECK(b_small.best().b_cost == 3 * 32 * 64 / 4);
  const auto a_small = dax::detail::matmul_rule({64, 32}, s(P("x")), {32, 128}, s(P("x")), std::nullopt, false, false);
  CHECK(a_small.best().roles == std::vector<int>{1});  // x -> N: A (smaller) is gathered
  CHECK(a_small.best().a_cost == 3 * 64 * 32 / 4);
}

TEST_CASE("matmul rule: an exact tie goes to fewer collectives (Megatron's row-parallel layer)", "[ops][matmul]") {
  ScopedModel scoped(kBytesAndFlops);  // with a fixed cost per collective there is no tie to break
  // (tokens, d) split ('data', 'model') @ W (d, d) split ('model', None), asked for (tokens, d)
  // split ('data', None): the local product and one all-reduce of the result over 'model', or an
  // all-to-all of A, an all-gather of W and one of the result. Both receive 2(m-1)/m of the result
  // and compute the same FLOPs; the all-reduce is one collective, not three.
  const Mesh mesh({2, 2}, {"data", "model"});
  const NamedSharding a(mesh, P("data", "model")), w(mesh, P("model", dax::none)), out(mesh, P("data", dax::none));
  const auto rule = dax::detail::matmul_rule({512, 128}, a, {128, 128}, w, out, false, false);
  const auto& best = rule.best();
  INFO(dax::detail::explain_matmul_rule(rule, {512, 128}, {128, 128}, 4));
  CHECK(best.roles == std::vector<int>{0, 2});  // data -> M, model -> K
  CHECK(best.a_cost == 0);
  CHECK(best.b_cost == 0);
  CHECK(best.out_cost == 2 * 1 * 256 * 128 / 2);  // one all-reduce of the device's (256, 128) rows
  CHECK(best.collectives == 1);
  int tied = 0;
  for (const auto& c : rule.candidates)
    if (c.time == best.time && c.collectives > best.collectives) ++tied;
  CHECK(tied >= 1);  // the all-to-all + two all-gathers candidate: same time, three collectives
}

TEST_CASE("elementwise rule: the output follows the operand costliest to move", "[ops][elementwise]") {
  const Mesh mesh({4}, {"x"});
  auto s = [&](P p) { return NamedSharding(mesh, p); };
  using dax::detail::Linearity;
  // A big row-sharded matrix plus a replicated row vector: the vector is sliced, nothing moves.
  const auto r = dax::detail::elementwise_rule({{64, 32}, {32}}, {s(P("x")), s(P())}, Linearity::additive);
  CHECK(r.output == s(P("x")));
  CHECK(r.inputs[1] == s(P()));
  CHECK(r.elements == 0);
  // Column-sharded vector broadcast over rows: it is gathered (the small one moves).
  const auto c = dax::detail::elementwise_rule({{64, 32}, {32}}, {s(P("x")), s(P("x"))}, Linearity::none);
  CHECK(c.output == s(P("x")));
  CHECK(c.elements == 24);
  // Sums of partial sums over the same axes stay unreduced; a product with a plain array too.
  const auto u = dax::detail::elementwise_rule({{8}, {8}}, {s(P().with_unreduced("x")), s(P().with_unreduced("x"))},
                                               Linearity::additive);
  CHECK(u.output == s(P().with_unreduced("x")));
  CHECK(u.elements == 0);
  const auto m = dax::detail::elementwise_rule({{8}, {8}}, {s(P().with_unreduced("x")), s(P())}, Linearity::scaling);
  CHECK(m.output == s(P().with_unreduced("x")));
  const auto n = dax::detail::elementwise_rule({{8}, {8}}, {s(P().with_unreduced("x")), s(P())}, Linearity::additive);
  CHECK_FALSE(n.output.is_unreduced());  // partial + plain is not exact: reduced first
  CHECK(n.elements == 2 * 3 * 8 / 4);
}


TEST_CASE("matmul rule: time, not bytes alone (issue 16's batch-32 weight gradient)", "[ops][matmul][cost]") {
  const Mesh mesh({2}, {"data"});
  auto s = [&](P p) { return NamedSharding(mesh, p); };
  // Data parallel: gW = X^T @ dY with X (32, 64) split over data (so X^T is P(None, 'data')) and
  // dY (32, 128) P('data'), the gradient wanted replicated like its weight. Replicating over data
  // gathers the fewest bytes (3,072 elements) but every device then does the whole product; the
  // rule splits the work and gathers the result instead.
  const Shape xt{64, 32}, dy{32, 128};
  const dax::CostModel model{5e9, 50e9};
  ScopedModel scoped(model);
  const auto rule = dax::detail::matmul_rule(xt, s(P(dax::none, "data")), dy, s(P("data")), s(P()), false, false);
  INFO(dax::detail::explain_matmul_rule(rule, xt, dy, 4));
  REQUIRE(rule.candidates.size() == 4);  // M, N, K, replicate
  const auto& replicate = rule.candidates[3];
  CHECK(dax::detail::role_name(replicate.roles[0], 0) == "replicate");
  CHECK(replicate.total() == 3072);
  CHECK(replicate.flops == 2.0 * 64 * 128 * 32);
  for (const auto& c : rule.candidates) {
    CHECK(replicate.total() <= c.total());  // what a byte-only rule chose
    CHECK(rule.best().time <= c.time);
  }
  CHECK(rule.chosen != 3);
  CHECK(rule.best().flops == replicate.flops / 2);
  CHECK(rule.best().time == dax::detail::estimated_time(model, rule.best().total(), 4, rule.best().flops,
                                                         rule.best().collectives));
  // With compute free, bytes decide again.
  dax::set_cost_model({5e9, 1e30});
  const auto bytes_only =
      dax::detail::matmul_rule(xt, s(P(dax::none, "data")), dy, s(P("data")), s(P()), false, false);
  CHECK(bytes_only.chosen == 3);
}

// The attention's output projection O (512, 128) @ Wo (128, 128), Wo split by rows over 'model'
// and the result wanted P('data'), chosen under cost model m.
dax::detail::MatmulRule output_projection_rule(const Mesh& mesh, P o_spec, const dax::CostModel& m) {
  ScopedModel scoped(m);
  return dax::detail::matmul_rule({512, 128}, NamedSharding(mesh, o_spec), {128, 128},
                                  NamedSharding(mesh, P("model", dax::none)), NamedSharding(mesh, P("data")), false,
                                  false);
}

TEST_CASE("matmul rule: on the CPU's model a row-parallel product is one all-reduce at 2 ranks (issue 39)",
          "[ops][matmul][cost]") {
  // transformer_lm at 2 ranks, mesh (data 1, model 2): O (512, 128) split by heads over model,
  // Wo (128, 128) by rows, the result wanted P('data'). Megatron's all-reduce receives 65,536
  // elements in one collective; an all-to-all of O, an all-gather of Wo and one of the result
  // receive 57,344 in three. Without a fixed cost per collective the CPU took the three (33
  // collectives and 3.41 MB a step instead of 13 and 2.62 MB); 5 us each makes it one.
  const Mesh mesh({1, 2}, {"data", "model"});
  const Shape o{512, 128}, wo{128, 128};
  const auto rule_under = [&](const dax::CostModel& m) { return output_projection_rule(mesh, P(dax::none, "model"), m); };
  const auto gathered = rule_under({5e9, 50e9, 0});
  INFO(dax::detail::explain_matmul_rule(gathered, o, wo, 4));
  CHECK(gathered.best().collectives == 3);
  CHECK(gathered.best().total() == 256 * 64 + 64 * 128 + 256 * 128);  // O's rows, Wo's rows, the result's rows
  const auto reduced = rule_under(dax::cpu_cost_model());
  INFO(dax::detail::explain_matmul_rule(reduced, o, wo, 4));
  CHECK(reduced.best().collectives == 1);
  CHECK(reduced.best().total() == 512 * 128);  // the all-reduce: 2 (m-1)/m of the (512, 128) result
}

TEST_CASE("matmul rule: while a gradient is taken, a candidate pays for its backward", "[ops][matmul][cost]") {
  // x (64, 64) split by rows over x, w (64, 4096) replicated, the result's layout free. By the
  // forward alone, rows stay split and nothing moves; but then w's gradient is the sum of both
  // devices' (64, 4096) partial products, an all-reduce in the backward. Splitting w's columns
  // instead gathers x (2,048 elements) and w's gradient comes back in column pieces, to be
  // gathered (half the all-reduce's bytes). Priced with its backward (MatmulGrad), the rule's
  // choice must cost less, forward and backward together, than the forward-only choice.
  const Mesh mesh({2}, {"x"});
  auto s = [&](P p) { return NamedSharding(mesh, p); };
  const Shape x{64, 64}, w{64, 4096};
  ScopedModel scoped(dax::cpu_cost_model());
  const auto forward_only = dax::detail::matmul_rule(x, s(P("x")), w, s(P()), std::nullopt, false, false);
  const auto with_backward = dax::detail::matmul_rule(x, s(P("x")), w, s(P()), std::nullopt, false, false, false, 4,
                                                      dax::detail::MatmulGrad{false, true});
  INFO(dax::detail::explain_matmul_rule(forward_only, x, w, 4));
  INFO(dax::detail::explain_matmul_rule(with_backward, x, w, 4));
  CHECK(forward_only.best().total() == 0);
  CHECK(forward_only.best().backward == 0);  // not priced without a gradient
  CHECK(with_backward.best().backward > 0);
  // The backward of the forward-only choice, priced the same way, costs more than the chosen
  // candidate's forward and backward together.
  const auto forward_choice_backward = dax::detail::matmul_backward_cost(
      x, s(P("x")), w, s(P()), {64, 4096}, forward_only.best().target, {false, true}, 4);
  CHECK(with_backward.best().time < forward_only.best().time + forward_choice_backward.time);
  CHECK(with_backward.best().target != forward_only.best().target);
}

TEST_CASE("matmul rule: a fixed cost per collective keeps Megatron's one all-reduce on the GPU's rates",
          "[ops][matmul][cost]") {
  // The attention's output projection on a (data 2, model 2) mesh: O (512, 128) split over data by
  // rows and over model by heads, Wo (128, 128) split over model by rows, the result wanted split
  // over data only. Megatron: local products, then one all-reduce of the partial sums over model
  // (2 (m-1)/m * 256 * 128 = 32,768 elements received). Gathering O's heads and Wo's rows instead
  // receives 24,576 and multiplies all of K on every device, cheaper by bytes alone, but two
  // collectives where one does; in a backward, three such products are summed before Megatron's
  // one all-reduce, so the gathers lose overall (transformer_lm at 4 ranks on an H100).
  const Mesh mesh({2, 2}, {"data", "model"});
  const Shape o{512, 128}, wo{128, 128};
  const auto rule_under = [&](const dax::CostModel& m) { return output_projection_rule(mesh, P("data", "model"), m); };
  const dax::CostModel no_latency{100e9, 400e12, 0};
  const auto gathered = rule_under(no_latency);
  INFO(dax::detail::explain_matmul_rule(gathered, o, wo, 4));
  CHECK(gathered.best().collectives == 2);
  CHECK(gathered.best().total() == 256 * 64 + 64 * 128);  // O's other heads and Wo's other rows
  const auto reduced = rule_under(dax::cuda_cost_model());
  INFO(dax::detail::explain_matmul_rule(reduced, o, wo, 4));
  CHECK(reduced.best().collectives == 1);
  CHECK(reduced.best().total() == 256 * 128);  // the partial sums' all-reduce
  CHECK(reduced.best().time == dax::detail::estimated_time(dax::cuda_cost_model(), reduced.best().total(), 4,
                                                           reduced.best().flops, 1));
  // The CPU's rates choose Megatron's all-reduce without the fixed cost (compute is dear there).
  CHECK(rule_under(dax::cpu_cost_model()).best().collectives == 1);
  CHECK_THROWS_WITH(dax::set_cost_model({1e9, 1e9, -1}), "set_cost_model: collective_s must be finite and >= 0, got -1");
  {
    ScopedModel negative_zero({1e9, 1e9, -0.0});  // stored as +0: caches and ranks compare bits
    CHECK_FALSE(std::signbit(dax::cost_model().collective_s));
  }
}

TEST_CASE("rule caches key on the cost model", "[ops][cost]") {
  dax::detail::RuleCache<int> cache;
  const NamedSharding s(Mesh({2}, {"x"}), P("x"));
  int made = 0;
  auto get = [&] { return cache.get(dax::detail::RuleKey{7, {{4}}, {s}, {}}, [&] { return ++made; }); };
  CHECK(get() == 1);
  CHECK(get() == 1);
  {
    ScopedModel scoped({1e9, 1e9});
    CHECK(get() == 2);  // a new model: chosen again
    CHECK(get() == 2);
  }
  CHECK(get() == 1);  // back to the backend's model: its rule again
  CHECK(cache.size() == 2);
  CHECK(dax::cost_model() == dax::cpu_cost_model());
  CHECK_THROWS_WITH(dax::set_cost_model({0, 1e9}),
                    "set_cost_model: link_bytes_per_s and flops_per_s must be finite and > 0, got 0 and 1e+09");
}

TEST_CASE("matmul rule: keep_unreduced leaves K partial sums for the consumer", "[ops][matmul]") {
  std::mt19937 rng(16);
  std::uniform_int_distribution<int> dist(-9, 9);
  int kept = 0, checked = 0;
  for (const Mesh& mesh : {Mesh({2}, {"x"}), Mesh({3}, {"x"}), Mesh({2, 2}, {"x", "y"}), Mesh({2, 3}, {"x", "y"})}) {
    for (const auto& [as, bs] : std::vector<std::pair<Shape, Shape>>{{{6, 8}, {8, 4}}, {{5, 7}, {7, 3}}}) {
      std::vector<double> a(dax::numel(as)), b(dax::numel(bs));
      for (auto& v : a) v = dist(rng);
      for (auto& v : b) v = dist(rng);
      const auto value = global_matmul(a, b, as[0], as[1], bs[1]);
      const auto specs = dax::test::all_shardings(mesh, 2, false);
      for (size_t i = 0; i < specs.size(); i += 2) {
        const NamedSharding& sa = specs[i];
        const NamedSharding& sb = specs[(i * 7 + 3) % specs.size()];
        for (const NamedSharding& req : specs) {
          const auto rule = dax::detail::matmul_rule(as, sa, bs, sb, req, false, false, true);
          const auto& c = rule.best();
          INFO(dax::detail::explain_matmul_rule(rule, as, bs, 8) << "requested " << to_string(req.spec()));
          // The target: the requested dims, unreduced over the candidate's K axes the request does not split with.
          std::vector<int> want;
          for (int x : c.out.unreduced_axes())
            if (!req.splits(x)) want.push_back(x);
          REQUIRE(rule.target == dax::detail::with_unreduced_axes(req, 2, want));
          for (const auto& cand : rule.candidates) REQUIRE(c.time <= cand.time);
          // Moving the partial sums there reduces only over the axes the request splits with.
          const auto plan = dax::detail::plan_reshard(rule.out_shape, c.out, rule.target);
          for (const auto& step : plan.steps)
            for (int x : step.reduce_axes) REQUIRE(req.splits(x));
          kept += !want.empty();
          // Simulated: each piece, summed over the kept axes, is the product's piece.
          const auto ap = dax::test::pieces_of_value(as, a, c.a), bp = dax::test::pieces_of_value(bs, b, c.b);
          dax::test::Buffers partial;
          for (int d : mesh.devices()) {
            const auto co = mesh.coords(d);
            const dax::Box ab = c.a.box_at(co, as), bb = c.b.box_at(co, bs);
            partial[d] = global_matmul(ap.at(d), bp.at(d), ab[0].size(), ab[1].size(), bb[1].size());
          }
          for (const auto& step : plan.steps) REQUIRE(dax::test::simulate_step(rule.out_shape, step, partial));
          const auto reduced = dax::detail::with_unreduced_axes(rule.target, 2, {});
          const auto expect = dax::test::pieces_of_value(rule.out_shape, value, reduced);
          for (int d : mesh.devices()) {
            const auto co = mesh.coords(d);
            std::vector<double> sum(partial.at(d).size(), 0.0);
            for (int e : mesh.devices()) {
              const auto ce = mesh.coords(e);
              bool same = true;
              for (int x = 0; x < mesh.num_axes(); ++x)
                if (!rule.target.is_unreduced_over(x)) same = same && ce[x] == co[x];
              if (!same) continue;
              for (size_t k = 0; k < sum.size(); ++k) sum[k] += partial.at(e)[k];
            }
            REQUIRE(sum == expect.at(d));
          }
          ++checked;
        }
      }
    }
  }
  CHECK(checked > 100);
  CHECK(kept > 10);
  // Without a requested sharding the option does nothing.
  const Mesh m({2}, {"x"});
  const auto r = dax::detail::matmul_rule({4, 6}, NamedSharding(m, P(dax::none, "x")), {6, 4}, NamedSharding(m, P("x")),
                                          std::nullopt, false, false, true);
  CHECK_FALSE(r.target.is_unreduced());
}

TEST_CASE("matmul rule: a leaf's cotangent summed over microbatches pays its share of the one reduction",
          "[ops][matmul][cost]") {
  // A pipeline's weight gradient dW = H^T @ dY for one microbatch of 128 tokens split over 'x' (4),
  // W (512, 128) replicated. Alone, keeping the K partial sums costs an all-reduce of dW (larger
  // than the microbatch's activations), so the rule gathers instead; when m backward passes add
  // their dW unreduced and reduce once, each pays 1/m of it and the partial sums are kept.
  const Mesh mesh({4}, {"x"});
  auto s = [&](P p) { return NamedSharding(mesh, p); };
  const Shape ht{512, 128}, dy{128, 128};
  const dax::CostModel model{5e9, 1e30};  // bytes decide
  ScopedModel scoped(model);
  auto rule = [&](int64_t sums) {
    return dax::detail::matmul_rule(ht, s(P(dax::none, "x")), dy, s(P("x")), s(P()), false, false, true, 4, {}, sums);
  };
  const auto alone = rule(1), of_four = rule(4), of_sixteen = rule(16);
  INFO(dax::detail::explain_matmul_rule(alone, ht, dy, 4) << dax::detail::explain_matmul_rule(of_four, ht, dy, 4));
  const auto role = [](const dax::detail::MatmulRule& r) { return dax::detail::role_name(r.best().roles[0], 0); };
  CHECK(role(alone) != "K");
  CHECK(role(of_four) == "K");
  CHECK(role(of_sixteen) == "K");
  // K's candidate: nothing moves now; the all-reduce of dW (2 x 3/4 x 65,536 elements) counted
  // once for all: 1/m of it here.
  const auto k_of = [&](const dax::detail::MatmulRule& r) {
    for (const auto& c : r.candidates)
      if (dax::detail::role_name(c.roles[0], 0) == "K") return c;
    FAIL("no K candidate");
    return r.best();
  };
  CHECK(k_of(alone).total() == 98304);
  CHECK(k_of(of_four).total() == 98304 / 4);
  CHECK(k_of(of_sixteen).total() == 98304 / 16);
  CHECK(of_four.target == dax::detail::with_unreduced_axes(s(P()), 2, {0}));  // kept, reduced later
  // Candidates that reduce nothing later pay the same either way.
  for (size_t i = 0; i < alone.candidates.size(); ++i)
    if (dax::detail::role_name(alone.candidates[i].roles[0], 0) != "K")
      CHECK(alone.candidates[i].total() == of_four.candidates[i].total());
}

TEST_CASE("matmul rule: a gathered weight's cotangent is priced at its gather's reduce-scatter",
          "[ops][matmul][cost]") {
  // FSDP with context parallelism: W (128, 512) stored split over 'data', gathered whole for use;
  // one microbatch's dW = H^T @ dY over 128 tokens split over data x context. Priced as the whole
  // reduction to the request (an all-reduce over data x context), keeping the K partial sums loses
  // to gathering H and dY; but the gather's transpose reduces them where W is stored (a
  // reduce-scatter over 'data', the half summed over 'context': FSDP's formula), which is cheaper.
  const Mesh mesh({2, 2}, {"data", "context"});
  auto s = [&](P p) { return NamedSharding(mesh, p); };
  const Shape ht{128, 128}, dy{128, 512}, w{128, 512};
  const NamedSharding tokens_t = s(P(dax::none, dax::axes("data", "context")));
  const NamedSharding tokens = s(P(dax::axes("data", "context")));
  const NamedSharding stored = s(P("data", dax::none));
  ScopedModel scoped(dax::CostModel{5e9, 1e30});  // bytes decide
  const auto plain = dax::detail::matmul_rule(ht, tokens_t, dy, tokens, s(P()), false, false, true, 4);
  const auto fsdp = dax::detail::matmul_rule(ht, tokens_t, dy, tokens, s(P()), false, false, true, 4, {}, 1, &stored);
  INFO(dax::detail::explain_matmul_rule(plain, ht, dy, 4) << dax::detail::explain_matmul_rule(fsdp, ht, dy, 4));
  const auto k_of = [&](const dax::detail::MatmulRule& r) {
    for (const auto& c : r.candidates)
      if (dax::detail::role_name(c.roles[0], 0) == "K" && dax::detail::role_name(c.roles[1], 0) == "K") return c;
    FAIL("no candidate contracting over both axes");
    return r.best();
  };
  // Kept sums: the all-reduce of dW (2 x 3/4 x 65,536 elements) against the gather's reduction.
  CHECK(k_of(plain).total() == 98304);
  const int64_t reduce_scatter = dax::detail::reshard_move_cost(w, k_of(fsdp).target, stored).elements;
  CHECK(reduce_scatter == 65536);  // 1/2 of dW over 'data', then 2 x 1/2 of that half over 'context'
  CHECK(k_of(fsdp).total() == reduce_scatter);
  // Without the destination the rule reduces nothing later: it gathers H and dY (61,440 elements)
  // and multiplies whole. With it, keeping sums wins: the cheapest here gathers the small H and dY
  // over 'context' and keeps the sums over 'data' for the reduce-scatter (53,248 elements).
  CHECK_FALSE(plain.target.is_unreduced());
  CHECK(plain.best().total() == 61440);
  CHECK(fsdp.target == dax::detail::with_unreduced_axes(s(P()), 2, {0}));  // reduced by the gather's transpose
  CHECK(fsdp.best().total() == 53248);
  // Candidates whose result is whole already move nothing more to reach the stored layout.
  for (size_t i = 0; i < plain.candidates.size(); ++i)
    if (plain.candidates[i].target == s(P())) CHECK(plain.candidates[i].total() == fsdp.candidates[i].total());
}
