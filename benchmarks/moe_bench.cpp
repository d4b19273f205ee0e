// The mixture-of-experts layer with its experts split over the ranks (expert parallel) against the
// same layer with all experts on every rank (the tokens split alike, the weights' gradients
// all-reduced), issue 42: one forward + backward (value_and_grad of sum(y * w) + 0.01 aux), float32,
// the same inputs in both. Prints one JSON line:
//   {"devices": n, "tokens": .., "experts": E, ..., "replicated_s": .., "expert_parallel_s": ..,
//    "speedup": replicated / expert parallel, "replicated_peak_mb": .., "expert_parallel_peak_mb": ..
//    (the largest rank's), "memory_ratio": .., "weights_ratio": 1/n, "all_to_allv_mb": .. (received
//    by all ranks, forward and backward), "rows_formula_mb": .. (4 x the rows that leave their rank
//    x d x 4 bytes: there and back, forward and backward),
//    "all_reduce_mb": .. (the replicated layer's), "loss_relative_difference": ..}
// Run: mpirun -np N moe_bench [--tokens T] [--d D] [--f F] [--experts E] [--top-k K] [--reps R]
#include <dax/dax.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench_common.hpp"

namespace {

using Array = dax::DistArray<float>;

using dax::bench::max_over_ranks;
using dax::bench::sum_over_ranks;
using dax::bench::uniform_floats;

struct Measured {
  double seconds = 0, peak_bytes = 0, loss = 0, a2a_bytes = 0, all_reduce_bytes = 0, rows_sent = 0;
};

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  int64_t tokens = 4096, d = 256, f = 512, experts = 8;
  int top_k = 2, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (flag == "--tokens") tokens = v;
    else if (flag == "--d") d = v;
    else if (flag == "--f") f = v;
    else if (flag == "--experts") experts = v;
    else if (flag == "--top-k") top_k = int(v);
    else if (flag == "--reps") reps = int(v);
  }
  const int n = rt.size();
  const std::vector<float> x = uniform_floats(size_t(tokens * d), 1, 1), w = uniform_floats(size_t(tokens * d), 2, 1);
  const std::vector<float> router = uniform_floats(size_t(d * experts), 3, 1.0f / std::sqrt(float(d)));
  const std::vector<float> w_in = uniform_floats(size_t(experts * d * f), 4, 1.0f / std::sqrt(float(d)));
  const std::vector<float> w_out = uniform_floats(size_t(experts * f * d), 5, 1.0f / std::sqrt(float(f)));

  // mesh: ('data', 'expert'); the tokens split over both; the experts over 'expert' when `split`.
  auto run = [&](const dax::Mesh& mesh, bool split) {
    const dax::NamedSharding rows(mesh, dax::P(dax::axes("data", "expert"), dax::none));
    const dax::NamedSharding weights(mesh, split ? dax::P("expert") : dax::P());
    const Array xs = dax::device_put(x, {tokens, d}, rows), ws = dax::device_put(w, {tokens, d}, rows);
    const dax::parallel::MoeParams<float> p{dax::device_put(router, {d, experts}, dax::NamedSharding(mesh, dax::P())),
                                           dax::device_put(w_in, {experts, d, f}, weights),
                                           dax::device_put(w_out, {experts, f, d}, weights)};
    int64_t rows_sent = 0;
    // The tokens' gradient too, as a layer inside a model needs it (and it is what sends the
    // dispatch's cotangents home).
    using Inputs = std::tuple<Array, dax::parallel::MoeParams<float>>;
    auto loss = [&](const Inputs& in) {
      const auto out = dax::parallel::moe(std::get<0>(in), std::get<1>(in), "expert",
                                          dax::parallel::MoeOptions{.top_k = top_k});
      rows_sent = out.routing.rows_sent;
      return dax::sum(out.y * ws) + out.aux_loss * 0.01f;
    };
    Measured m;
    std::vector<double> times;
    for (int r = 0; r < reps + 1; ++r) {  // the first call warms the rule and plan caches
      const double before = double(dax::memory_stats().bytes_in_use);
      dax::reset_peak_memory();
      dax::comm_stats().reset();
      const double t = dax::bench::slowest_rank_seconds([&] {
        auto [value, grads] = dax::value_and_grad(loss)(Inputs{xs, p});
        m.loss = value.to_host()[0];
      });
      if (r == 0) continue;
      times.push_back(t);
      m.peak_bytes = max_over_ranks(double(dax::memory_stats().peak_bytes_in_use) - before);
      m.a2a_bytes = sum_over_ranks(double(dax::comm_stats().of("all_to_allv").bytes));
      m.all_reduce_bytes = max_over_ranks(double(dax::comm_stats().of("all_reduce").bytes));
      m.rows_sent = sum_over_ranks(double(rows_sent));
    }
    m.seconds = dax::bench::median(times);
    return m;
  };
  const Measured rep = run(dax::Mesh({n, 1}, {"data", "expert"}), false);
  const Measured ep = run(dax::Mesh({1, n}, {"data", "expert"}), true);
  if (rt.rank() == 0)
    std::printf("{\"devices\": %d, \"tokens\": %lld, \"d\": %lld, \"f\": %lld, \"experts\": %lld, \"top_k\": %d, "
                "\"replicated_s\": %.4f, \"expert_parallel_s\": %.4f, \"speedup\": %.3f, "
                "\"replicated_peak_mb\": %.2f, \"expert_parallel_peak_mb\": %.2f, \"memory_ratio\": %.3f, "
                "\"weights_ratio\": %.3f, \"all_to_allv_mb\": %.3f, \"rows_formula_mb\": %.3f, "
                "\"replicated_all_reduce_mb\": %.3f, \"loss_relative_difference\": %.2e}\n",
                n, (long long)tokens, (long long)d, (long long)f, (long long)experts, top_k, rep.seconds, ep.seconds,
                rep.seconds / ep.seconds, rep.peak_bytes / 1e6, ep.peak_bytes / 1e6, ep.peak_bytes / rep.peak_bytes,
                1.0 / n, ep.a2a_bytes / 1e6, 4 * ep.rows_sent * double(d) * 4 / 1e6, rep.all_reduce_bytes / 1e6,
                std::abs(ep.loss - rep.loss) / std::abs(rep.loss));
  return 0;
}
