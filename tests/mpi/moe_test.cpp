// The mixture-of-experts layer (dax/parallel/moe.hpp), with fresh random inputs in double, at every
// rank count: the output, the load-balancing loss and the routing against the layer computed on
// the host for the whole batch (dropless and with a capacity, top-1 and top-2, gates normalised or
// not, experts over one axis and tokens over two); the all_to_allv bytes against the rows that
// leave their device; gradients of every weight and of the tokens against central differences;
// the checks on bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <dax/parallel/moe.hpp>

#include "gradient_check.hpp"
#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::parallel::MoeActivation;
using dax::parallel::MoeOptions;

namespace {

struct Sizes {
  int64_t tokens, d, f, experts;
};

double activate(double v, MoeActivation a) {
  switch (a) {
    case MoeActivation::relu: return v > 0 ? v : 0;
    case MoeActivation::silu: return v / (1 + std::exp(-v));
    case MoeActivation::gelu: break;
  }
  return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

struct Reference {
  std::vector<double> y;
  double aux = 0;
  std::vector<int64_t> routed;
  int64_t dropped = 0;
  std::vector<std::vector<int64_t>> pairs_to_expert;  // per token group: kept pairs per expert
};

// The layer on the whole batch, cut into `groups` equal token groups (one per device's block):
// routing, capacity per group, experts, combine, loss.
Reference reference(const std::vector<double>& x, const std::vector<double>& router, const std::vector<double>& w_in,
                    const std::vector<double>& w_out, const Sizes& s, int groups, const MoeOptions& o) {
  const int64_t n = s.tokens / groups, E = s.experts, d = s.d, f = s.f;
  const int k = o.top_k;
  Reference r;
  r.y.assign(size_t(s.tokens * d), 0.0);
  r.routed.assign(size_t(E), 0);
  std::vector<double> mean_prob(size_t(E), 0.0);
  for (int g = 0; g < groups; ++g) {
    std::vector<int64_t> filled(size_t(E), 0);
    r.pairs_to_expert.emplace_back(size_t(E), 0);
    std::vector<std::vector<double>> probs(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(E)));
    std::vector<std::vector<int64_t>> chosen(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t tok = g * n + t;
      double top = -1e300, total = 0;
      std::vector<double>& p = probs[size_t(t)];
      for (int64_t e = 0; e < E; ++e) {
        double z = 0;
        for (int64_t i = 0; i < d; ++i) z += x[size_t(tok * d + i)] * router[size_t(i * E + e)];
        p[size_t(e)] = z, top = std::max(top, z);
      }
      for (double& v : p) total += (v = std::exp(v - top));
      for (int64_t e = 0; e < E; ++e) mean_prob[size_t(e)] += (p[size_t(e)] /= total);
      std::vector<int64_t> idx(static_cast<size_t>(E));
      std::iota(idx.begin(), idx.end(), int64_t(0));
      std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
      chosen[size_t(t)].assign(idx.begin(), idx.begin() + k);
      for (int64_t e : chosen[size_t(t)]) ++r.routed[size_t(e)];
    }
    const int64_t capacity =
        o.capacity_factor > 0 ? int64_t(std::ceil(o.capacity_factor * double(n * k) / double(E))) : -1;
    std::vector<std::vector<char>> kept(static_cast<size_t>(n), std::vector<char>(static_cast<size_t>(k), 1));
    for (int j = 0; j < k; ++j)
      for (int64_t t = 0; t < n; ++t) {
        const int64_t e = chosen[size_t(t)][size_t(j)];
        if (capacity >= 0 && filled[size_t(e)] >= capacity) kept[size_t(t)][size_t(j)] = 0, ++r.dropped;
        else ++filled[size_t(e)], ++r.pairs_to_expert.back()[size_t(e)];
      }
    for (int64_t t = 0; t < n; ++t) {
      const int64_t tok = g * n + t;
      double gate_sum = 0;
      for (int j = 0; j < k; ++j) gate_sum += probs[size_t(t)][size_t(chosen[size_t(t)][size_t(j)])];
      for (int j = 0; j < k; ++j) {
        if (!kept[size_t(t)][size_t(j)]) continue;
        const int64_t e = chosen[size_t(t)][size_t(j)];
        double gate = probs[size_t(t)][size_t(e)];
        if (o.normalize_gates) gate /= gate_sum;
        std::vector<double> h(static_cast<size_t>(f), 0.0);
        for (int64_t u = 0; u < f; ++u) {
          for (int64_t i = 0; i < d; ++i) h[size_t(u)] += x[size_t(tok * d + i)] * w_in[size_t((e * d + i) * f + u)];
          h[size_t(u)] = activate(h[size_t(u)], o.activation);
        }
        for (int64_t i = 0; i < d; ++i) {
          double out = 0;
          for (int64_t u = 0; u < f; ++u) out += h[size_t(u)] * w_out[size_t((e * f + u) * d + i)];
          r.y[size_t(tok * d + i)] += gate * out;
        }
      }
    }
  }
  for (int64_t e = 0; e < E; ++e)
    r.aux += double(E) * (mean_prob[size_t(e)] / double(s.tokens)) * (double(r.routed[size_t(e)]) / double(s.tokens * k));
  return r;
}

struct Weights {
  std::vector<double> x, router, w_in, w_out;
};

Weights random_weights(const Sizes& s, std::mt19937& rng) {
  return {dax::test::uniform(s.tokens * s.d, rng), dax::test::uniform(s.d * s.experts, rng, -2, 2),
          dax::test::uniform(s.experts * s.d * s.f, rng), dax::test::uniform(s.experts * s.f * s.d, rng)};
}

// Runs the layer on `mesh` with tokens split over `token_spec` and checks it against the host.
void check_layer_with(const Mesh& mesh, const dax::PartitionSpec::Entry& token_split, int groups, const MoeOptions& o,
                      const Weights& w, const Sizes& s) {
  const int ne = int(mesh.axis_size(mesh.find_axis("expert")));
  const NamedSharding rep(mesh, P());
  const auto x = dax::device_put(w.x, {s.tokens, s.d}, NamedSharding(mesh, P(token_split, dax::none)));
  const dax::parallel::MoeParams<double> params{
      dax::device_put(w.router, {s.d, s.experts}, rep),
      dax::device_put(w.w_in, {s.experts, s.d, s.f}, NamedSharding(mesh, P("expert"))),
      dax::device_put(w.w_out, {s.experts, s.f, s.d}, NamedSharding(mesh, P("expert")))};
  dax::comm_stats().reset();
  const auto out = dax::parallel::moe(x, params, "expert", o);
  const int64_t a2a_bytes = dax::comm_stats().of("all_to_allv").bytes;
  const Reference ref = reference(w.x, w.router, w.w_in, w.w_out, s, groups, o);
  const std::vector<double> y = out.y.to_host();
  REQUIRE(y.size() == ref.y.size());
  for (size_t i = 0; i < y.size(); ++i) REQUIRE(y[i] == Approx(ref.y[i]).margin(1e-12));
  CHECK(out.aux_loss.ndim() == 0);
  CHECK(out.aux_loss.to_host()[0] == Approx(ref.aux).epsilon(1e-12));
  CHECK(out.routing.tokens_per_expert == ref.routed);
  CHECK(out.routing.dropped == ref.dropped);
  // Bytes: this device's block is token group `rank`; its expert index is rank % ne (the expert
  // axis is the last of the mesh). Rows it sends other experts' devices, and rows it gets.
  const int me = dax::test::world_rank(), mine = me % ne, row = me - mine;
  const int64_t local_experts = s.experts / ne;
  int64_t sent = 0, received = 0;
  for (int64_t e = 0; e < s.experts; ++e) {
    const int owner = int(e / local_experts);
    if (owner != mine) sent += ref.pairs_to_expert[size_t(me)][size_t(e)];
    else
      for (int j = 0; j < ne; ++j)
        if (j != mine) received += ref.pairs_to_expert[size_t(row + j)][size_t(e)];
  }
  CHECK(out.routing.rows_sent == sent);
  CHECK(out.routing.rows_received == received);
  CHECK(a2a_bytes == (sent + received) * s.d * int64_t(sizeof(double)));
}

void check_layer(const Mesh& mesh, const dax::PartitionSpec::Entry& token_split, int groups, const MoeOptions& o,
                 unsigned seed) {
  const int ne = int(mesh.axis_size(mesh.find_axis("expert")));
  const Sizes s{8 * groups, 6, 5, 2 * std::max(ne, 2)};
  std::mt19937 rng(seed);
  check_layer_with(mesh, token_split, groups, o, random_weights(s, rng), s);
}

// The gradients of sum(y * r) + 0.3 aux with respect to the tokens, the router and both expert
// tensors against central differences, the tokens laid out by `tokens`, the experts over 'expert'.
void check_gradients(const Mesh& mesh, const NamedSharding& tokens, const Weights& w, const Sizes& s,
                     const MoeOptions& o, std::mt19937& rng) {
  const auto cot = dax::device_put(dax::test::uniform(s.tokens * s.d, rng), {s.tokens, s.d}, tokens);
  const dax::test::Loss loss = [&](const dax::test::Params& p) {
    const auto out = dax::parallel::moe(p[0], dax::parallel::MoeParams<double>{p[1], p[2], p[3]}, "expert", o);
    return dax::sum(out.y * cot) + out.aux_loss * 0.3;
  };
  dax::test::check_against_differences(
      loss, {w.x, w.router, w.w_in, w.w_out}, {{s.tokens, s.d}, {s.d, s.experts}, {s.experts, s.d, s.f}, {s.experts, s.f, s.d}},
      {tokens, NamedSharding(mesh, P()), NamedSharding(mesh, P("expert")), NamedSharding(mesh, P("expert"))}, rng);
}

}  // namespace

TEST_CASE("moe equals the layer computed on the host, with the bytes of the rows that leave", "[moe]") {
  const int n = dax::test::world_size();
  const Mesh line({n}, {"expert"});
  unsigned seed = 5100 + unsigned(n);
  SECTION("dropless, top-2") { check_layer(line, "expert", n, MoeOptions{}, seed++); }
  SECTION("capacity 1.0, top-2, gates normalised, silu") {
    check_layer(line, "expert", n,
                MoeOptions{.top_k = 2, .capacity_factor = 1.0, .normalize_gates = true, .activation = MoeActivation::silu},
                seed + 10);
  }
  SECTION("capacity 1.25, top-1, relu") {
    check_layer(line, "expert", n, MoeOptions{.top_k = 1, .capacity_factor = 1.25, .activation = MoeActivation::relu},
                seed + 20);
  }
  SECTION("tokens over data and expert, experts over expert") {
    if (n % 2 != 0) return;
    const Mesh grid({2, n / 2}, {"data", "expert"});
    check_layer(grid, dax::axes("data", "expert"), n, MoeOptions{}, seed + 30);
    // Tokens split over 'data' alone: moe adds 'expert' to their split.
    check_layer(grid, "data", n, MoeOptions{.capacity_factor = 1.0}, seed + 40);
  }
}

TEST_CASE("moe's gradients equal central differences, dropless and with a capacity", "[moe][grad]") {
  const int n = dax::test::world_size();
  const Mesh line({n}, {"expert"});
  const Sizes s{6 * n, 4, 3, 2 * std::max(n, 2)};
  for (const double cf : {0.0, 1.0}) {
    std::mt19937 rng(6200 + unsigned(n) + unsigned(cf * 10));
    const Weights w = random_weights(s, rng);
    check_gradients(line, NamedSharding(line, P("expert", dax::none)), w, s,
                    MoeOptions{.top_k = 2, .capacity_factor = cf}, rng);
  }
}

TEST_CASE("moe refuses what it cannot split, naming it", "[moe][errors]") {
  const int n = dax::test::world_size();
  const Mesh line({n}, {"expert"});
  const NamedSharding rep(line, P());
  auto params = [&](int64_t E, int64_t d, int64_t f) {
    return dax::parallel::MoeParams<double>{dax::zeros<double>({d, E}, rep), dax::zeros<double>({E, d, f}, rep),
                                            dax::zeros<double>({E, f, d}, rep)};
  };
  const auto x = dax::zeros<double>({4 * n, 6}, rep);
  using dax::test::error_of;
  CHECK(error_of([&] { dax::parallel::moe(x, params(2 * n, 6, 3), "nope"); }).find("expected the experts' axis") !=
        std::string::npos);
  CHECK(error_of([&] { dax::parallel::moe(x, params(2 * n, 5, 3), "expert"); }) ==
        dax::detail::cat("moe: expected the router of shape (6, experts), got (5, ", 2 * n, ")"));
  CHECK(error_of([&] { dax::parallel::moe(x, params(2 * n, 6, 3), "expert", MoeOptions{.top_k = 2 * n + 1}); }) ==
        dax::detail::cat("moe: expected top_k in [1, ", 2 * n, "], got ", 2 * n + 1));
  if (n > 1) {
    CHECK(error_of([&] { dax::parallel::moe(x, params(n + 1, 6, 3), "expert"); }) ==
          dax::detail::cat("moe: expected the ", n + 1, " experts to divide evenly over the ", n, " devices of 'expert'"));
    const auto odd = dax::zeros<double>({4 * n + 1, 6}, rep);
    CHECK(error_of([&] { dax::parallel::moe(odd, params(2 * n, 6, 3), "expert"); }).find("to divide evenly") !=
          std::string::npos);
  }
}

TEST_CASE("moe's gradients on two axes: the tokens over both, or over the experts' alone", "[moe][grad]") {
  const int n = dax::test::world_size();
  if (n % 2 != 0) return;
  const Mesh grid({n / 2, 2}, {"expert", "model"});
  const Sizes s{6 * n, 4, 3, 2 * std::max(n / 2, 2)};
  const bool both = GENERATE(true, false);  // else replicated over 'model', as under tensor parallelism
  std::mt19937 rng(6300 + unsigned(n) + (both ? 0u : 50u));
  const Weights w = random_weights(s, rng);
  const NamedSharding rows(grid, both ? P(dax::axes("expert", "model"), dax::none) : P("expert", dax::none));
  check_gradients(grid, rows, w, s, MoeOptions{}, rng);
}

TEST_CASE("moe with a device whose experts get no rows", "[moe][grad]") {
  // Every token's first feature is 1 and the router sends it far from the first device's experts:
  // that device computes nothing, but still takes part in every exchange, forward and backward.
  const int n = dax::test::world_size();
  const Mesh line({n}, {"expert"});
  const Sizes s{6 * n, 4, 3, 2 * std::max(n, 2)};
  std::mt19937 rng(6400 + unsigned(n));
  Weights w = random_weights(s, rng);
  const int64_t local_experts = s.experts / n;
  for (int64_t t = 0; t < s.tokens; ++t) w.x[size_t(t * s.d)] = 1;
  for (int64_t e = 0; e < local_experts; ++e) w.router[size_t(e)] = -40;
  if (n > 1) check_layer_with(line, "expert", n, MoeOptions{}, w, s);
  check_gradients(line, NamedSharding(line, P("expert", dax::none)), w, s, MoeOptions{}, rng);
}

TEST_CASE("moe where one device of a 'model' pair has rows for an expert and the other none", "[moe][grad]") {
  // Tokens over (expert, model), experts over 'expert' alone: each expert's weights are shared by
  // a 'model' pair whose tokens differ, so their gradients are summed over 'model'. The first
  // expert draws every token of the even token groups (first feature -1, router +40 through it)
  // and none of the odd ones: both devices of the pair must still reduce its gradient together.
  const int n = dax::test::world_size();
  if (n % 2 != 0) return;
  const Mesh grid({n / 2, 2}, {"expert", "model"});
  const Sizes s{4 * n, 4, 3, 2 * std::max(n / 2, 2)};
  std::mt19937 rng(6500 + unsigned(n));
  Weights w = random_weights(s, rng);
  const int64_t per_group = s.tokens / n;
  for (int64_t t = 0; t < s.tokens; ++t) w.x[size_t(t * s.d)] = (t / per_group) % 2 == 0 ? -1 : 1;
  w.router[0] = -40;
  check_gradients(grid, NamedSharding(grid, P(dax::axes("expert", "model"), dax::none)), w, s, MoeOptions{}, rng);
}
