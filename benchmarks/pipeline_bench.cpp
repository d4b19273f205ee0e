// benchmarks/pipeline: one forward + backward step of an MLP through dax::pipeline, for a schedule
// and microbatch counts, on a 1-d 'stage' mesh of every rank: the step time, each stage's busy
// time and the measured bubble next to the formula's. Equal stages (the same layers each), so the
// formula applies (chunk 0 scales its input by a learned scalar, so its first layer also computes an
// input gradient, as every other chunk does). benchmarks/pipeline.py runs it beside the same pipeline written by hand in
// PyTorch (benchmarks/pipeline_torch.py). Prints one JSON line per microbatch count.
//   mpirun -np P pipeline_bench --schedule 1F1B [--microbatches 4,8,16] [--width D] [--rows R]
//                               [--layers L] [--steps S] [--warmup W]
// `--layers` is per stage (split over the virtual stages of Interleaved1F1B); `--rows` per microbatch.
#include <dax/dax.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace {

using Layers = std::vector<dax::DistArray<float>>;  // W0, b0, W1, b1, ...

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  std::string schedule_name = "1F1B", microbatch_list = "4,8,16";
  int64_t width = 512, rows = 64;
  int layers = 2, steps = 10, warmup = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--schedule") schedule_name = argv[i + 1];
    else if (flag == "--microbatches") microbatch_list = argv[i + 1];
    else if (flag == "--width") width = std::atoll(argv[i + 1]);
    else if (flag == "--rows") rows = std::atoll(argv[i + 1]);
    else if (flag == "--layers") layers = std::atoi(argv[i + 1]);
    else if (flag == "--steps") steps = std::atoi(argv[i + 1]);
    else if (flag == "--warmup") warmup = std::atoi(argv[i + 1]);
  }
  const auto named = dax::pipeline::schedule_kind(schedule_name);
  if (!named) {
    std::fprintf(stderr, "pipeline_bench: --schedule expects GPipe, 1F1B, Interleaved1F1B or ZBH1, got '%s'\n",
                 schedule_name.c_str());
    return 2;
  }
  const dax::pipeline::ScheduleKind kind = *named;
  const int p = rt.size();
  const int v = kind == dax::pipeline::ScheduleKind::interleaved_1f1b ? 2 : 1;
  const dax::Mesh mesh({p}, {"stage"});
  std::stringstream list(microbatch_list);
  std::string item;
  while (std::getline(list, item, ',')) {
    const int m = std::atoi(item.c_str());
    const auto schedule = dax::pipeline::make_schedule(kind, p, m, v);
    auto pipe = dax::pipeline::make<float>(
        mesh, schedule,
        [](int chunk, const Layers& w, const dax::DistArray<float>& x) {
          // Chunk 0 scales its input by a learned scalar (its last leaf), so its first layer computes
          // its input's gradient as every other chunk's does: equal stages, where the formula holds.
          dax::DistArray<float> h = chunk == 0 ? x * w.back() : x;
          for (size_t k = 0; k + 1 < w.size(); k += 2) h = dax::tanh(dax::matmul(h, w[k]) + w[k + 1]);
          return h;
        },
        [](const dax::DistArray<float>& y, const dax::DistArray<float>&) { return dax::mean(y * y); });
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto values = [&](int64_t n, float scale) {
      std::vector<float> out(static_cast<size_t>(n));
      for (auto& x : out) x = normal(rng) * scale;
      return out;
    };
    std::vector<Layers> params;
    for (int c = 0; c < schedule.chunks(); ++c) {
      const dax::NamedSharding s(pipe.chunk_mesh(c), dax::P());
      Layers w;
      for (int l = 0; l < layers / v; ++l) {
        w.push_back(dax::device_put(values(width * width, 1.0f / std::sqrt(float(width))), {width, width}, s));
        w.push_back(dax::device_put(values(width, 0.1f), {width}, s));
      }
      if (c == 0) w.push_back(dax::full<float>({}, 1.0f, s));
      params.push_back(std::move(w));
    }
    std::vector<dax::DistArray<float>> inputs, targets;
    for (int i = 0; i < m; ++i) {
      inputs.push_back(dax::device_put(values(rows * width, 1.0f), {rows, width},
                                       dax::NamedSharding(pipe.chunk_mesh(0), dax::P())));
      targets.push_back(dax::zeros<float>({1}, dax::NamedSharding(pipe.chunk_mesh(schedule.chunks() - 1), dax::P())));
    }
    std::vector<double> times, bubbles;
    for (int s = 0; s < warmup + steps; ++s) {
      const double t = dax::bench::slowest_rank_seconds([&] { pipe.value_and_grad(params, inputs, targets); });
      if (s < warmup) continue;
      times.push_back(t);
      bubbles.push_back(pipe.last_stats().bubble);
    }
    const double formula = dax::pipeline::bubble_formula(kind, p, m, v);
    const double bubble = dax::bench::median(bubbles), step = dax::bench::median(times);
    if (rt.rank() == 0) {
      std::printf("# %s, %d stages, %d microbatches of (%lld, %lld), %d layers a stage: step %.2f ms, bubble %.3f "
                  "(formula %.3f, %.0f%% of it); last step busy / step ms per stage:",
                  schedule_name.c_str(), p, m, (long long)rows, (long long)width, layers, step * 1e3, bubble, formula,
                  formula > 0 ? 100 * bubble / formula : 0.0);
      const auto& st = pipe.last_stats();
      for (int s = 0; s < p; ++s) std::printf(" %.2f / %.2f", st.busy[s] * 1e3, st.seconds[s] * 1e3);
      std::printf("\n");
      std::printf("{\"schedule\": \"%s\", \"stages\": %d, \"microbatches\": %d, \"rows\": %lld, \"width\": %lld, "
                  "\"layers_per_stage\": %d, \"step_s\": %.6f, \"bubble\": %.4f, \"bubble_formula\": %.4f}\n",
                  schedule_name.c_str(), p, m, (long long)rows, (long long)width, layers, step, bubble, formula);
    }
  }
  return 0;
}
