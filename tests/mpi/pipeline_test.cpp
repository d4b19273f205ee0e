// dax::pipeline::Pipeline against the same model run unsplit on one device: the loss and every
// chunk's gradients (double, relative 1e-9), for GPipe, 1F1B, interleaved 1F1B and ZB-H1 (whose
// backward is split into input and weight passes) over every
// stage count the world allows, a few microbatch counts, uneven layers per chunk, with and
// without a data axis beside the stage axis; each stage's peak of held activations against the
// schedule's simulator and its bytes sent against the count of its transfers; chunks under
// dax::remat alike.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include <dax/training.hpp>

#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::pipeline::ScheduleKind;
using dax::test::world_rank;
using dax::test::world_size;

namespace {

using Chunk = std::vector<DistArray<double>>;  // W0, b0, W1, b1, ...
constexpr int64_t kWidth = 5, kBatch = 4;

int layers_of(int chunk) { return 1 + chunk % 2; }  // uneven: 1, 2, 1, 2, ...

DistArray<double> run_chunk(const Chunk& p, DistArray<double> x) {
  for (size_t k = 0; k + 1 < p.size(); k += 2) x = dax::tanh(dax::matmul(x, p[k]) + p[k + 1]);
  return x;
}

DistArray<double> squared_error(const DistArray<double>& y, const DistArray<double>& t) {
  const auto e = y - t;
  return dax::mean(e * e);
}

std::vector<double> normal_values(int64_t n, std::mt19937& rng, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

/// Every chunk's weights and biases as host values (the same on every rank: one seed).
std::vector<std::vector<std::vector<double>>> model_values(int chunks, std::mt19937& rng) {
  std::vector<std::vector<std::vector<double>>> out(chunks);
  for (int c = 0; c < chunks; ++c)
    for (int l = 0; l < layers_of(c); ++l) {
      out[c].push_back(normal_values(kWidth * kWidth, rng, 0.6));
      out[c].push_back(normal_values(kWidth, rng, 0.1));
    }
  return out;
}

Chunk put_chunk(const std::vector<std::vector<double>>& values, const NamedSharding& s) {
  Chunk p;
  for (size_t k = 0; k < values.size(); ++k)
    p.push_back(dax::device_put(values[k], k % 2 == 0 ? Shape{kWidth, kWidth} : Shape{kWidth}, s));
  return p;
}

double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

/// One step of `kind` on `mesh` (its 'stage' axis the pipeline's; a 'data' axis, when there,
/// splits each microbatch), checked against the unsplit model on this rank alone.
void check_step(const Mesh& mesh, ScheduleKind kind, int microbatches, int virtual_stages, unsigned seed,
                bool remat = false) {
  const int stages = static_cast<int>(mesh.axis_size("stage"));
  const bool data = mesh.find_axis("data") >= 0;
  const auto schedule = dax::pipeline::make_schedule(kind, stages, microbatches, virtual_stages);
  const int chunks = schedule.chunks();
  std::mt19937 rng(seed);
  const auto values = model_values(chunks, rng);
  std::vector<std::vector<double>> xs, ts;
  for (int i = 0; i < microbatches; ++i) {
    xs.push_back(normal_values(kBatch * kWidth, rng, 1.0));
    ts.push_back(normal_values(kBatch * kWidth, rng, 0.5));
  }

  // With remat, each chunk keeps only its inputs and runs again in its backward (dax::remat).
  auto pipe = dax::pipeline::make<double>(
      mesh, schedule,
      [remat](int, const Chunk& p, const DistArray<double>& x) {
        return remat ? dax::remat([](const Chunk& q, const DistArray<double>& y) { return run_chunk(q, y); })(p, x)
                     : run_chunk(p, x);
      },
      [](const DistArray<double>& y, const DistArray<double>& t) { return squared_error(y, t); });
  const auto batch_spec = data ? P("data") : P();
  std::vector<Chunk> params;
  for (int c = 0; c < chunks; ++c) params.push_back(put_chunk(values[c], NamedSharding(pipe.chunk_mesh(c), P())));
  std::vector<DistArray<double>> inputs, targets;
  for (int i = 0; i < microbatches; ++i) {
    inputs.push_back(dax::device_put(xs[i], {kBatch, kWidth}, NamedSharding(pipe.chunk_mesh(0), batch_spec)));
    targets.push_back(dax::device_put(ts[i], {kBatch, kWidth}, NamedSharding(pipe.chunk_mesh(chunks - 1), batch_spec)));
  }
  const auto [loss, grads] = pipe.value_and_grad(params, inputs, targets);

  // The unsplit model: every chunk in turn, on this rank alone.
  const Mesh alone({1}, {"one"}, {world_rank()});
  const NamedSharding here(alone, P());
  std::vector<Chunk> whole;
  for (int c = 0; c < chunks; ++c) whole.push_back(put_chunk(values[c], here));
  auto reference = dax::value_and_grad([&](const std::vector<Chunk>& ps) {
    DistArray<double> total = dax::zeros<double>({}, here);
    for (int i = 0; i < microbatches; ++i) {
      auto h = dax::device_put(xs[i], {kBatch, kWidth}, here);
      for (int c = 0; c < chunks; ++c) h = run_chunk(ps[c], h);
      total = total + squared_error(h, dax::device_put(ts[i], {kBatch, kWidth}, here));
    }
    return total / double(microbatches);
  });
  const auto [want_loss, want_grads] = reference(whole);

  const std::string what = std::string(dax::pipeline::to_string(kind)) + " on " + dax::to_string(mesh) + ", " +
                           std::to_string(microbatches) + " microbatches";
  INFO(what);
  CHECK(relative_error(loss.to_host(), want_loss.to_host()) < 1e-9);
  for (int c = 0; c < chunks; ++c) {
    if (!pipe.chunk_mesh(c).contains(world_rank())) continue;
    for (size_t k = 0; k < grads[c].size(); ++k) {
      INFO("chunk " << c << ", leaf " << k);
      CHECK(grads[c][k].sharding() == params[c][k].sharding());
      CHECK(relative_error(grads[c][k].to_host(), want_grads[c][k].to_host()) < 1e-9);
    }
  }

  // Memory and traffic as the schedule says.
  const auto& stats = pipe.last_stats();
  const auto simulated = dax::pipeline::simulate(schedule);
  CHECK(stats.peak_activations == simulated.peak_activations);
  const int stage = pipe.stage();
  int transfers = 0;  // each chunk boundary that crosses stages moves m activations and m gradients
  for (int c = 0; c < chunks; ++c) {
    if (schedule.stage_of(c) != stage) continue;
    if (c + 1 < chunks && schedule.stage_of(c + 1) != stage) transfers += microbatches;
    if (c > 0 && schedule.stage_of(c - 1) != stage) transfers += microbatches;
  }
  const int64_t piece = (data ? kBatch / mesh.axis_size("data") : kBatch) * kWidth * int64_t(sizeof(double));
  CHECK(stats.bytes_sent == transfers * piece);
  CHECK(stats.bubble >= 0);
  CHECK(stats.bubble < 1);
}

}  // namespace

TEST_CASE("pipeline schedules give the unsplit model's loss and gradients", "[parallel][pipeline]") {
  const int n = world_size();
  std::vector<Mesh> meshes{Mesh({n}, {"stage"})};
  if (n % 2 == 0 && n >= 4) meshes.push_back(Mesh({n / 2, 2}, {"stage", "data"}));
  unsigned seed = 7;
  for (const Mesh& mesh : meshes) {
    const int p = static_cast<int>(mesh.axis_size("stage"));
    for (int m : {1, 3, 2 * p + 1}) {
      check_step(mesh, ScheduleKind::gpipe, m, 1, seed++);
      check_step(mesh, ScheduleKind::one_f_one_b, m, 1, seed++);
      check_step(mesh, ScheduleKind::zero_bubble_h1, m, 1, seed++);
    }
    for (int m : {p, 2 * p}) check_step(mesh, ScheduleKind::interleaved_1f1b, m, 2, seed++);
    check_step(mesh, ScheduleKind::one_f_one_b, 2 * p, 1, seed++, /*remat=*/true);
  }
}

TEST_CASE("pipeline: what it refuses, on every rank", "[parallel][pipeline]") {
  const int n = world_size();
  const Mesh mesh({n}, {"stage"});
  auto chunk = [](int, const Chunk& p, const DistArray<double>& x) { return run_chunk(p, x); };
  auto loss = [](const DistArray<double>& y, const DistArray<double>& t) { return squared_error(y, t); };
  using dax::pipeline::make_schedule;
  CHECK_THAT(dax::test::error_of([&] { dax::pipeline::make<double>(mesh, make_schedule(ScheduleKind::gpipe, n + 1, 2), chunk, loss); }),
             Catch::Contains("the schedule has " + std::to_string(n + 1) + " stages but mesh axis 'stage' has " +
                             std::to_string(n) + " devices"));
  auto pipe = dax::pipeline::make<double>(mesh, make_schedule(ScheduleKind::gpipe, n, 2), chunk, loss);
  const std::vector<Chunk> params(n - 1);
  const std::vector<DistArray<double>> none;
  CHECK_THAT(dax::test::error_of([&] { pipe.value_and_grad(params, none, none); }),
             Catch::Contains(std::to_string(n) + " chunks' parameters expected, got " + std::to_string(n - 1)));
}

TEST_CASE("a split backward: the input's gradient first, the weights' GEMMs in a pass of their own",
          "[autodiff][pipeline]") {
  const Mesh alone({1}, {"one"}, {world_rank()});
  const NamedSharding here(alone, P());
  std::mt19937 rng(11);
  const auto w1 = dax::device_put(normal_values(20, rng, 0.5), {4, 5}, here);
  const auto w2 = dax::device_put(normal_values(15, rng, 0.5), {5, 3}, here);
  const auto x0 = dax::device_put(normal_values(8, rng, 1.0), {2, 4}, here);
  auto record = [&](dax::detail::Tape& tape, DistArray<double>& x, DistArray<double>& a, DistArray<double>& b) {
    dax::detail::TapeScope scope(tape);
    x.set_trace_id(tape.watch());
    a.set_trace_id(tape.watch());
    b.set_trace_id(tape.watch());
    return dax::sum(dax::matmul(dax::tanh(dax::matmul(x, a)), b));
  };
  const auto seed = dax::ones<double>({}, here);
  dax::detail::Tape whole, split;
  auto x = x0, a = w1, b = w2;
  const auto y = record(whole, x, a, b);
  const auto all = whole.backward(y.trace_id(), seed, {x.trace_id(), a.trace_id(), b.trace_id()});
  auto xs = x0, as = w1, bs = w2;
  const auto ys = record(split, xs, as, bs);
  dax::detail::Tape::WeightPass later;
  const auto input = split.backward_input(ys.trace_id(), seed, xs.trace_id(), later);
  // Both matmuls left their weight side for later, and no weight has a cotangent yet.
  CHECK(later.deferred.size() == 2);
  CHECK(!later.cotangents.contains(as.trace_id()));
  CHECK(!later.cotangents.contains(bs.trace_id()));
  REQUIRE(input.contains(xs.trace_id()));
  CHECK(relative_error(input.at(xs.trace_id()).as<double>().to_host(), all.at(x.trace_id()).as<double>().to_host()) <
        1e-12);
  const auto weights = split.backward_weight(later, {as.trace_id(), bs.trace_id()});
  CHECK(relative_error(weights.at(as.trace_id()).as<double>().to_host(), all.at(a.trace_id()).as<double>().to_host()) <
        1e-12);
  CHECK(relative_error(weights.at(bs.trace_id()).as<double>().to_host(), all.at(b.trace_id()).as<double>().to_host()) <
        1e-12);
}

TEST_CASE("a split backward leaves a bias's sum and a layer norm's gain and shift to the weight pass",
          "[autodiff][pipeline]") {
  const Mesh alone({1}, {"one"}, {world_rank()});
  const NamedSharding here(alone, P());
  std::mt19937 rng(12);
  const int64_t tokens = 6, d = 4;
  const auto w0 = dax::device_put(normal_values(size_t(d * d), rng, 0.5), {d, d}, here);
  const auto b0 = dax::device_put(normal_values(size_t(d), rng, 0.5), {d}, here);
  const auto g0 = dax::device_put(normal_values(size_t(d), rng, 0.5), {d}, here);
  const auto s0 = dax::device_put(normal_values(size_t(d), rng, 0.5), {d}, here);
  const auto x0 = dax::device_put(normal_values(size_t(tokens * d), rng, 1.0), {tokens, d}, here);
  const auto r = dax::device_put(normal_values(size_t(tokens * d), rng, 1.0), {tokens, d}, here);
  auto record = [&](dax::detail::Tape& tape, std::vector<DistArray<double>>& v) {
    dax::detail::TapeScope scope(tape);
    for (auto& leaf : v) leaf.set_trace_id(tape.watch());
    return dax::sum(dax::layer_norm(dax::matmul(v[0], v[1]) + v[2], v[3], v[4]) * r);
  };
  const auto seed = dax::ones<double>({}, here);
  dax::detail::Tape whole, split;
  std::vector<DistArray<double>> v{x0, w0, b0, g0, s0}, vs{x0, w0, b0, g0, s0};
  const auto y = record(whole, v);
  std::vector<uint64_t> ids, split_ids;
  for (size_t k = 0; k < v.size(); ++k) {
    ids.push_back(v[k].trace_id());
    split_ids.push_back(vs[k].trace_id());
  }
  const auto all = whole.backward(y.trace_id(), seed, ids);
  const auto ys = record(split, vs);
  for (size_t k = 0; k < vs.size(); ++k) split_ids[k] = vs[k].trace_id();
  dax::detail::Tape::WeightPass later;
  const auto input = split.backward_input(ys.trace_id(), seed, vs[0].trace_id(), later);
  // The product, the bias's add and the layer norm each left their weight side for later; no
  // weight has a cotangent yet (the add computed none for b, the norm none for its gain and shift).
  CHECK(later.deferred.size() == 3);
  for (size_t k = 1; k < vs.size(); ++k) CHECK(!later.cotangents.contains(vs[k].trace_id()));
  REQUIRE(input.contains(vs[0].trace_id()));
  CHECK(relative_error(input.at(vs[0].trace_id()).as<double>().to_host(), all.at(ids[0]).as<double>().to_host()) < 1e-12);
  const auto weights = split.backward_weight(later, {split_ids.begin() + 1, split_ids.end()});
  for (size_t k = 1; k < vs.size(); ++k) {
    INFO("weight " << k);
    REQUIRE(weights.contains(split_ids[k]));
    CHECK(relative_error(weights.at(split_ids[k]).as<double>().to_host(), all.at(ids[k]).as<double>().to_host()) < 1e-12);
  }
}

TEST_CASE("a split backward moves a row-parallel product's cotangent once, as the whole backward does",
          "[autodiff][pipeline]") {
  // Under sequence parallelism a row-parallel product's output is reduce-scattered over the
  // tokens; its cotangent is gathered back for both halves of the backward (dX = g W^T and
  // dW = X^T g). ZB-H1 runs the halves in separate passes: the gathered g is kept between them.
  const int n = world_size();
  const Mesh mesh({n}, {"model"});
  std::mt19937 rng(23);
  const int64_t tokens = 4 * n, f = 2 * n, d = 3;
  const auto x0 = dax::device_put(normal_values(size_t(tokens * f), rng, 1.0), {tokens, f}, NamedSharding(mesh, P(dax::none, "model")));
  const auto w0 = dax::device_put(normal_values(size_t(f * d), rng, 0.5), {f, d}, NamedSharding(mesh, P("model")));
  const auto r = dax::device_put(normal_values(size_t(tokens * d), rng, 1.0), {tokens, d}, NamedSharding(mesh, P("model")));
  const NamedSharding sequence(mesh, P("model", dax::none));
  auto record = [&](dax::detail::Tape& tape, DistArray<double>& x, DistArray<double>& w) {
    dax::detail::TapeScope scope(tape);
    x.set_trace_id(tape.watch());
    w.set_trace_id(tape.watch());
    return dax::sum(dax::matmul(x, w, sequence) * r);
  };
  const auto seed = dax::ones<double>({}, NamedSharding(mesh, P()));
  dax::detail::Tape whole, split;
  auto x = x0, w = w0;
  const auto y = record(whole, x, w);
  dax::comm_stats().reset();
  const auto all = whole.backward(y.trace_id(), seed, {x.trace_id(), w.trace_id()});
  const auto whole_moves = dax::comm_stats().of("all_gather");
  auto xs = x0, ws = w0;
  const auto ys = record(split, xs, ws);
  dax::comm_stats().reset();
  dax::detail::Tape::WeightPass later;
  const auto input = split.backward_input(ys.trace_id(), seed, xs.trace_id(), later);
  const auto weights = split.backward_weight(later, {ws.trace_id()});
  const auto split_moves = dax::comm_stats().of("all_gather");
  CHECK(split_moves.calls == whole_moves.calls);
  CHECK(split_moves.bytes == whole_moves.bytes);
  if (n > 1) CHECK(whole_moves.bytes == (n - 1) * (tokens / n) * d * int64_t(sizeof(double)));
  CHECK(relative_error(input.at(xs.trace_id()).as<double>().to_host(), all.at(x.trace_id()).as<double>().to_host()) < 1e-12);
  CHECK(relative_error(weights.at(ws.trace_id()).as<double>().to_host(), all.at(w.trace_id()).as<double>().to_host()) <
        1e-12);
}
