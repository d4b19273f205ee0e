// GPipe pipeline parallelism with shard_map: a 1-d mesh 'stage', one layer per stage, several
// micro-batches. Every tick, stage 0 takes the next micro-batch, every stage with real work runs
// its layer, and ppermute passes activations one stage on. Each stage times its busy ticks, and the
// measured bubble is printed next to GPipe's formula (stages - 1) / (micro + stages - 1). The
// output is checked against running the layers in sequence on one process.
//
//   mpirun -np 4 ./pipeline
#include <dax/dax.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const int stages = rt.size();
  const int64_t micro = 8, batch = 128, d = 384;
  const dax::Mesh mesh({stages}, {"stage"});

  std::mt19937 rng(2026);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(stages * d * d), xs(micro * batch * d);
  for (auto& v : w) v = normal(rng) / std::sqrt(float(d));
  for (auto& v : xs) v = normal(rng);
  const auto W = dax::device_put(w, {stages, d, d}, dax::NamedSharding(mesh, dax::P("stage")));  // layer s on stage s
  const auto X = dax::device_put(xs, {micro, batch, d}, dax::NamedSharding(mesh, dax::P()));

  using Clock = std::chrono::steady_clock;
  auto gpipe = dax::shard_map(
      [&](const dax::DistArray<float>& wb, const dax::DistArray<float>& xb) {
        const int stage = dax::axis_index("stage");
        const auto weight = dax::reshape(wb, {d, d});
        std::vector<std::pair<int, int>> next;  // stage s sends to s + 1
        for (int s = 0; s + 1 < stages; ++s) next.push_back({s, s + 1});
        auto carry = dax::zeros<float>({batch, d}, dax::local_sharding());
        std::vector<dax::DistArray<float>> outputs;
        double busy = 0;
        const auto start = Clock::now();
        for (int t = 0; t < micro + stages - 1; ++t) {
          const bool working = t >= stage && t < stage + micro;  // micro-batch t - stage is here
          if (working) {
            const auto tick = Clock::now();
            if (stage == 0) carry = dax::reshape(dax::slice(xb, {t}, {t + 1}), {batch, d});
            carry = dax::tanh(dax::matmul(carry, weight));
            if (stage == stages - 1) outputs.push_back(carry);
            busy += std::chrono::duration<double>(Clock::now() - tick).count();
          }
          carry = dax::ppermute(carry, "stage", next);  // every stage calls it every tick
        }
        const double total = std::chrono::duration<double>(Clock::now() - start).count();
        if (stage != stages - 1) outputs.assign(micro, dax::zeros<float>({batch, d}, dax::local_sharding()));
        auto idle = dax::full<double>({1}, 1.0 - busy / total, dax::local_sharding());
        return std::make_tuple(dax::psum(dax::stack(outputs), "stage"), idle);  // last stage's results everywhere
      },
      mesh, {dax::P("stage"), dax::P()}, {dax::P(), dax::P("stage")});
  gpipe(W, X);  // the first run creates the 'stage' communicator and warms the caches
  const auto [Y, idle] = gpipe(W, X);
  const std::vector<float> y = Y.to_host();
  const std::vector<double> idle_per_stage = idle.to_host();

  // Reference: each micro-batch through the layers in order, on one process.
  double worst = 0;
  for (int64_t m = 0; m < micro; ++m) {
    std::vector<float> h(xs.begin() + m * batch * d, xs.begin() + (m + 1) * batch * d), next(batch * d);
    for (int s = 0; s < stages; ++s) {
      for (int64_t r = 0; r < batch; ++r)
        for (int64_t c = 0; c < d; ++c) {
          float acc = 0;
          for (int64_t k = 0; k < d; ++k) acc += h[r * d + k] * w[(s * d + k) * d + c];
          next[r * d + c] = std::tanh(acc);
        }
      h.swap(next);
    }
    for (int64_t e = 0; e < batch * d; ++e) worst = std::max(worst, double(std::abs(y[m * batch * d + e] - h[e])));
  }

  if (rt.rank() == 0) {
    double mean_idle = 0;
    for (int s = 0; s < stages; ++s) {
      std::printf("stage %d: idle %.2f of its time\n", s, idle_per_stage[s]);
      mean_idle += idle_per_stage[s] / stages;
    }
    const double formula = double(stages - 1) / double(micro + stages - 1);
    std::printf("%d stages, %lld micro-batches of (%lld, %lld): bubble measured %.2f (the activation transfers "
                "included), formula (S-1)/(M+S-1) = %.2f\n",
                stages, (long long)micro, (long long)batch, (long long)d, mean_idle, formula);
    const unsigned cores = std::thread::hardware_concurrency();
    if (cores != 0 && unsigned(stages) > cores)
      std::printf("(%d ranks share %u cores here, so time spent waiting for a core counts as idle)\n", stages, cores);
    std::printf("largest difference from the sequential layers: %.2e\n", worst);
  }
  if (worst > 1e-4) {
    if (rt.rank() == 0) std::fprintf(stderr, "pipeline: result differs from the sequential reference by %g\n", worst);
    return 1;
  }
  if (rt.rank() == 0)
    std::printf("verified: GPipe over %d stage(s) with %lld micro-batches equals the layers run in sequence\n", stages,
                (long long)micro);
  return 0;
}
