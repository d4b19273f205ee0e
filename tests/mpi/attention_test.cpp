// dax::dot_product_attention: the fused kernels (FlashAttention: blocks of queries, the saved
// log-sum-exp, the recomputing backward) and the composite, against attention computed on the host
// over the gathered arrays, on random uneven shapes (0-2 batch dimensions, q_len != k_len, causal
// and not, lengths across the kernels' 64-query blocks) and random shardings of q, k and v each;
// gradients against central finite differences in double and fused against composite; bfloat16
// and half against the host's attention of the rounded inputs; the fused path's memory (no
// length x length scores); errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <dax/backend/memory_stats.hpp>
#include <dax/nn/nn.hpp>

#include "gradient_check.hpp"
#include "helpers.hpp"

using dax::AttentionImplementation;
using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::host;
using dax::test::Pick;
using dax::test::random_mesh;
using dax::test::random_sharding;
using dax::test::shared_seed;

namespace {

/// A case: q (batch..., q_len, heads, head_dim), k and v (batch..., k_len, heads, head_dim).
struct AttentionCase {
  Shape q, k;
  bool causal;
  int64_t batch() const { return dax::numel(Shape(q.begin(), q.end() - 3)); }
  int64_t q_len() const { return q[q.size() - 3]; }
  int64_t k_len() const { return k[k.size() - 3]; }
  int64_t heads() const { return q[q.size() - 2]; }
  int64_t head_dim() const { return q.back(); }
};

AttentionCase random_case(std::mt19937& rng, int64_t max_len) {
  auto draw = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Shape q;
  for (int64_t d = draw(0, 2); d > 0; --d) q.push_back(draw(1, 3));
  Shape k = q;
  const int64_t q_len = draw(1, max_len), k_len = q_len + (draw(0, 1) ? draw(0, 5) : 0);
  const int64_t heads = draw(1, 4), head_dim = draw(1, 9);
  q.insert(q.end(), {q_len, heads, head_dim});
  k.insert(k.end(), {k_len, heads, head_dim});
  return {q, k, draw(0, 1) == 1};
}

/// softmax(scale q k^T) v on the host, the case's layouts row-major.
std::vector<double> host_attention(const AttentionCase& c, const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, double scale) {
  const int64_t tq = c.q_len(), tk = c.k_len(), n = c.heads(), e = c.head_dim();
  std::vector<double> out(q.size(), 0.0);
  for (int64_t b = 0; b < c.batch(); ++b)
    for (int64_t h = 0; h < n; ++h)
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t seen = c.causal ? i + (tk - tq) + 1 : tk;
        std::vector<double> w(static_cast<size_t>(seen));
        double top = -INFINITY, total = 0;
        for (int64_t j = 0; j < seen; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < e; ++x) dot += q[((b * tq + i) * n + h) * e + x] * k[((b * tk + j) * n + h) * e + x];
          top = std::max(top, w[j] = dot * scale);
        }
        for (double& x : w) total += (x = std::exp(x - top));
        for (int64_t j = 0; j < seen; ++j)
          for (int64_t x = 0; x < e; ++x) out[((b * tq + i) * n + h) * e + x] += w[j] / total * v[((b * tk + j) * n + h) * e + x];
      }
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(tol).margin(tol));
}

/// sum(y * w) for fixed random weights laid out like y: every output element its own cotangent.
DistArray<double> contract(const DistArray<double>& y, unsigned seed) {
  std::mt19937 rng(seed);
  const auto w = dax::device_put(dax::test::uniform(y.size(), rng), y.shape(),
                                 dax::detail::with_unreduced_axes(y.sharding(), y.ndim(), {}));
  return dax::sum(y * w);
}

dax::AttentionOptions options(bool causal, AttentionImplementation implementation, double scale) {
  return {.is_causal = causal, .scale = scale, .implementation = implementation};
}

}  // namespace

TEST_CASE("dot_product_attention equals attention on the host: fused and composite, any sharding", "[attention]") {
  Pick pick(shared_seed());
  std::mt19937 rng(shared_seed());
  for (int trial = 0; trial < 16; ++trial) {
    // Most cases short; every fourth long enough to cross the fused kernels' 64-query blocks.
    const AttentionCase c = random_case(rng, trial % 4 == 3 ? 150 : 9);
    const Mesh& mesh = random_mesh(pick);
    const NamedSharding qs = random_sharding(pick, mesh, c.q.size(), trial % 3 == 0);  // some with pending sums
    const NamedSharding ks = random_sharding(pick, mesh, c.k.size()), vs = random_sharding(pick, mesh, c.k.size());
    INFO(dax::to_string(c.q) << " " << dax::to_string(c.k) << (c.causal ? " causal " : " ") << dax::to_string(qs)
                             << " " << dax::to_string(ks) << " " << dax::to_string(vs));
    const auto qv = dax::test::uniform(dax::numel(c.q), rng, -2, 2), kv = dax::test::uniform(dax::numel(c.k), rng, -2, 2),
               vv = dax::test::uniform(dax::numel(c.k), rng);
    const double scale = trial % 2 ? 0.7 : 1.0 / std::sqrt(double(c.head_dim()));
    const auto want = host_attention(c, qv, kv, vv, scale);
    const auto q = dax::device_put(qv, c.q, qs), k = dax::device_put(kv, c.k, ks), v = dax::device_put(vv, c.k, vs);
    for (const auto implementation : {AttentionImplementation::fused, AttentionImplementation::composite}) {
      // The default scale is 1 / sqrt(head_dim): passed only on odd trials.
      const auto o = trial % 2 ? dax::dot_product_attention(q, k, v, options(c.causal, implementation, scale))
                               : dax::dot_product_attention(q, k, v, {.is_causal = c.causal, .implementation = implementation});
      CHECK(o.shape() == c.q);
      if (implementation == AttentionImplementation::fused)  // batch and heads split as q's, the rest whole
        CHECK(o.sharding() == dax::detail::attention_layout(qs, c.q.size()));
      if (mesh.contains(dax::test::world_rank())) check_close(host(o), want, 1e-12);
    }
  }
}

TEST_CASE("dot_product_attention's gradients: finite differences, fused equal to composite", "[attention]") {
  Pick pick(shared_seed());
  std::mt19937 rng(shared_seed());
  for (int trial = 0; trial < 8; ++trial) {
    const AttentionCase c = random_case(rng, trial % 4 == 3 ? 70 : 7);
    const Mesh& mesh = random_mesh(pick);
    const std::vector<NamedSharding> shardings{random_sharding(pick, mesh, c.q.size()),
                                               random_sharding(pick, mesh, c.k.size()),
                                               random_sharding(pick, mesh, c.k.size())};
    INFO(dax::to_string(c.q) << " " << dax::to_string(c.k) << (c.causal ? " causal " : " ")
                             << dax::to_string(shardings[0]) << " " << dax::to_string(shardings[1]));
    const std::vector<std::vector<double>> values{dax::test::uniform(dax::numel(c.q), rng, -2, 2),
                                                  dax::test::uniform(dax::numel(c.k), rng, -2, 2),
                                                  dax::test::uniform(dax::numel(c.k), rng)};
    const auto loss_with = [&](AttentionImplementation implementation) -> dax::test::Loss {
      return [&c, implementation](const dax::test::Params& p) {
        return contract(dax::dot_product_attention(p[0], p[1], p[2], options(c.causal, implementation, 0.6)), 7);
      };
    };
    const auto fused = dax::test::check_against_differences(loss_with(AttentionImplementation::fused), values,
                                                            {c.q, c.k, c.k}, shardings, rng);
    const auto params = dax::test::put_all(values, {c.q, c.k, c.k}, shardings);
    const auto [value, composite] = dax::value_and_grad(loss_with(AttentionImplementation::composite))(params);
    if (mesh.contains(dax::test::world_rank()))
      for (size_t i = 0; i < 3; ++i) check_close(fused[i], composite[i].to_host(), 1e-10);
  }
}

TEST_CASE("dot_product_attention in bfloat16 and half: scores and probabilities in float", "[attention]") {
  std::mt19937 rng(shared_seed());
  const Mesh line({dax::test::world_size()}, {"x"});
  // Batch 2 split where it can be, 100 queries over 130 keys (two 64-blocks, a partial one), head_dim 64.
  const AttentionCase c{{2, 100, 2, 64}, {2, 130, 2, 64}, true};
  const NamedSharding s = dax::test::world_size() <= 2 ? NamedSharding(line, P("x")) : NamedSharding(line, P());
  const auto run = [&]<class T>(double tol) {
    std::vector<std::vector<double>> rounded;  // the inputs as T holds them, in double
    std::vector<DistArray<T>> in;
    for (const Shape& shape : {c.q, c.k, c.k}) {
      const auto x = dax::test::uniform(dax::numel(shape), rng, -2, 2);
      std::vector<T> t(x.begin(), x.end());
      rounded.emplace_back(t.begin(), t.end());
      in.push_back(dax::device_put(t, shape, s));
    }
    const auto want = host_attention(c, rounded[0], rounded[1], rounded[2], 0.125);
    const auto o = dax::dot_product_attention(in[0], in[1], in[2], {.is_causal = true});
    const auto got = dax::astype<double>(o).to_host();
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    CHECK(worst < tol);  // the output's one rounding to T (|o| < 1) and float's sums
    // The gradients against double's of the rounded inputs, relative to the largest.
    const auto loss = [](const std::vector<DistArray<T>>& p) {
      return dax::sum(dax::astype<float>(dax::dot_product_attention(p[0], p[1], p[2], {.is_causal = true})));
    };
    const auto [value, grads] = dax::value_and_grad(loss)(in);
    std::vector<DistArray<double>> exact_in;
    for (size_t i = 0; i < 3; ++i) exact_in.push_back(dax::device_put(rounded[i], i ? c.k : c.q, s));
    const auto exact_loss = [](const std::vector<DistArray<double>>& p) {
      return dax::sum(dax::dot_product_attention(p[0], p[1], p[2], {.is_causal = true}));
    };
    const auto [exact_value, exact] = dax::value_and_grad(exact_loss)(exact_in);
    for (size_t i = 0; i < 3; ++i) {
      const auto g = dax::astype<double>(grads[i]).to_host(), e = exact[i].to_host();
      double top = 0, err = 0;
      for (size_t j = 0; j < g.size(); ++j) top = std::max(top, std::abs(e[j])), err = std::max(err, std::abs(g[j] - e[j]));
      INFO("gradient " << i << ": largest " << top << ", worst error " << err);
      CHECK(err <= 4 * tol * top);
    }
  };
  run.operator()<dax::bfloat16>(1e-2);
  run.operator()<dax::half>(2e-3);
}

TEST_CASE("fused attention never holds the length x length scores", "[attention]") {
  const Mesh one({1}, {"x"});
  if (dax::test::world_rank() != 0) return;  // one device: the bytes of one rank
  std::mt19937 rng(5);
  const Shape shape{1, 512, 2, 16};  // scores (1, 2, 512, 512) doubles: 4 MiB; q, k, v, o 128 KiB each
  const NamedSharding s(one, P());
  const auto q = dax::device_put(dax::test::uniform(dax::numel(shape), rng), shape, s);
  const auto peak_of = [&](AttentionImplementation implementation) {
    dax::reset_peak_memory();
    const int64_t before = dax::memory_stats().bytes_in_use;
    const auto loss = [&](const DistArray<double>& x) {
      return dax::sum(dax::dot_product_attention(x, x, x, options(true, implementation, 0.25)));
    };
    (void)dax::value_and_grad(loss)(q);
    return dax::memory_stats().peak_bytes_in_use - before;
  };
  const int64_t scores = 2 * 512 * 512 * 8, operand = dax::numel(shape) * 8;
  const int64_t fused = peak_of(AttentionImplementation::fused), composite = peak_of(AttentionImplementation::composite);
  INFO("peak above the inputs: fused " << fused << " B, composite " << composite << " B, scores " << scores << " B");
  CHECK(composite >= scores);       // the composite holds the scores (and the probabilities)
  CHECK(fused <= 10 * operand);     // the fused: outputs, lse and gradients, a few operands' worth
}

TEST_CASE("dot_product_attention's errors name what was expected and what came", "[attention]") {
  const Mesh line({dax::test::world_size()}, {"x"});
  const NamedSharding r(line, P());
  const auto q = dax::zeros<double>({2, 4, 2, 8}, r);
  CHECK_THAT(dax::test::error_of([&] { dax::dot_product_attention(dax::zeros<double>({4, 8}, r), q, q); }),
             Catch::Contains("q must be (batch..., length, heads, head_dim), got shape (4, 8)"));
  CHECK_THAT(dax::test::error_of([&] { dax::dot_product_attention(q, q, dax::zeros<double>({2, 5, 2, 8}, r)); }),
             Catch::Contains("k and v must have one shape"));
  CHECK_THAT(dax::test::error_of([&] { dax::dot_product_attention(q, dax::zeros<double>({2, 4, 3, 8}, r),
                                                                  dax::zeros<double>({2, 4, 3, 8}, r)); }),
             Catch::Contains("must agree in every dimension but the length"));
  const auto short_k = dax::zeros<double>({2, 3, 2, 8}, r);
  CHECK_THAT(dax::test::error_of([&] { dax::dot_product_attention(q, short_k, short_k, {.is_causal = true}); }),
             Catch::Contains("causal attention needs q_len <= k_len, got 4 queries and 3 keys"));
  const auto no_k = dax::zeros<double>({2, 0, 2, 8}, r);
  CHECK_THAT(dax::test::error_of([&] { dax::dot_product_attention(q, no_k, no_k); }), Catch::Contains("no keys"));
}
