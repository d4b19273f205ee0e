// Ring attention against attention over the whole sequence on one device (issue 42): the time and
// the peak memory of one forward + backward (value_and_grad of sum(attention(q, k, v) * w)),
// causal, float32, for each sequence length, with the ring over every rank of the job (a
// 'context' axis of c devices, the sequence in zigzag order) and the unsplit attention on rank 0
// alone, one after the other. Prints one JSON line per length:
//   {"seq": S, "devices": c, "whole_s": .., "ring_s": .., "speedup": whole/ring,
//    "whole_peak_mb": .., "ring_peak_mb": .. (the largest rank's), "memory_ratio": ring/whole,
//    "ppermute_mb": .. (received per device), "ring_blocking_s": .. (the same ring with its k / v
//    exchange blocking), "exchange_s": .. (those exchanges alone: 4(c-1) blocks, forward and
//    backward), "exchange_share": exchange_s / ring_blocking_s, "hidden": (ring_blocking_s - ring_s)
//    / exchange_s (1: the exchange cost nothing; null where the exchange is under 5% of the step,
//    below the run-to-run noise of the two ring timings), "whole_fused_s", "whole_fused_peak_mb":
//    the whole sequence through dot_product_attention's fused kernel (no S x S arrays), and
//    "memory_ratio_fused": ring / that, ...}
// The ring's three timings are the best of three, taken in turn.
// Run: mpirun -np C long_context [--seq 4096,8192] [--heads H] [--dim E] [--batch B]
#include <dax/dax.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace {

using Array = dax::DistArray<float>;
using Qkv = std::vector<Array>;

using dax::bench::max_over_ranks;

/// Seconds and this rank's peak bytes above what was in use before, of one call of f.
template <class F>
std::pair<double, double> measure(F&& f) {
  const double before = double(dax::memory_stats().bytes_in_use);
  dax::reset_peak_memory();
  const double seconds = dax::bench::slowest_rank_seconds(f);
  return {seconds, double(dax::memory_stats().peak_bytes_in_use) - before};
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  std::string seq_list = "4096,8192";
  int64_t heads = 1, dim = 64, batch = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seq") seq_list = argv[i + 1];
    else if (flag == "--heads") heads = std::atoll(argv[i + 1]);
    else if (flag == "--dim") dim = std::atoll(argv[i + 1]);
    else if (flag == "--batch") batch = std::atoll(argv[i + 1]);
  }
  const int c = rt.size();
  const dax::Mesh ring({c}, {"context"});
  const dax::Mesh alone({1}, {"context"}, {0});
  std::stringstream list(seq_list);
  std::string item;
  while (std::getline(list, item, ',')) {
    const int64_t s = std::atoll(item.c_str());
    if (s % (2 * c) != 0) {
      if (rt.rank() == 0) std::fprintf(stderr, "long_context: skipping sequence %lld (not divisible by 2 x %d)\n", (long long)s, c);
      continue;
    }
    const dax::Shape shape{batch, s, heads, dim};
    const size_t n = size_t(batch * s * heads * dim);
    // The same values in both runs: the ring's inputs are the whole run's in zigzag order.
    const std::vector<float> q = dax::bench::uniform_floats(n, 1), k = dax::bench::uniform_floats(n, 2),
                             v = dax::bench::uniform_floats(n, 3), w = dax::bench::uniform_floats(n, 4);
    const std::vector<int64_t> order = dax::parallel::zigzag_order(s, c);
    auto zigzag = [&](const std::vector<float>& x) {
      std::vector<float> out(n);
      const size_t row = size_t(heads * dim);
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t p = 0; p < s; ++p)
          std::copy_n(x.begin() + long((b * s + order[size_t(p)]) * int64_t(row)), row, out.begin() + long((b * s + p) * int64_t(row)));
      return out;
    };
    const float scale = 1.0f / std::sqrt(float(dim));

    // The whole sequence on rank 0 alone (the others wait).
    double whole_s = 0, whole_bytes = 0, whole_loss = 0, whole_fused_s = 0, whole_fused_bytes = 0;
    if (rt.rank() == 0) {
      const dax::NamedSharding one(alone, dax::P());
      const Qkv p{dax::device_put(q, shape, one), dax::device_put(k, shape, one), dax::device_put(v, shape, one)};
      const Array ws = dax::device_put(w, shape, one);
      auto loss = [&](const Qkv& x) {
        const Array probs = dax::causal_softmax(dax::einsum("bqhe,bkhe->bhqk", x[0], x[1]) * scale);
        return dax::sum(dax::einsum("bhqk,bkhe->bqhe", probs, x[2]) * ws);
      };
      const double before = double(dax::memory_stats().bytes_in_use);
      dax::reset_peak_memory();
      const auto t0 = std::chrono::steady_clock::now();
      {
        auto [value, grads] = dax::value_and_grad(loss)(p);
        whole_loss = value.to_host()[0];
      }
      whole_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      whole_bytes = double(dax::memory_stats().peak_bytes_in_use) - before;
      // The same with the fused kernel (dot_product_attention: no S x S arrays at all).
      auto fused_loss = [&](const Qkv& x) {
        return dax::sum(dax::dot_product_attention(x[0], x[1], x[2], {.is_causal = true, .scale = scale}) * ws);
      };
      dax::reset_peak_memory();
      const auto t1 = std::chrono::steady_clock::now();
      (void)dax::value_and_grad(fused_loss)(p).first.to_host();
      whole_fused_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      whole_fused_bytes = double(dax::memory_stats().peak_bytes_in_use) - before;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // The ring over every rank.
    double ring_s = 0, ring_bytes = 0, ring_loss = 0, ppermute = 0, ring_blocking_s = 0, exchange_s = 0;
    {
      const dax::NamedSharding split(ring, dax::P(dax::none, "context"));
      const Qkv p{dax::device_put(zigzag(q), shape, split), dax::device_put(zigzag(k), shape, split),
                  dax::device_put(zigzag(v), shape, split)};
      const Array ws = dax::device_put(zigzag(w), shape, split);
      auto loss_with = [&](bool overlap) {
        return [&, overlap](const Qkv& x) {
          const dax::parallel::RingAttention options{.causal = true, .overlap = overlap};
          return dax::sum(dax::parallel::ring_attention(x[0], x[1], x[2], "context", options) * ws);
        };
      };
      // The overlapped exchanges alone: k and v passed on c - 1 times forward and c - 1 backward.
      std::vector<std::pair<int, int>> pairs;
      for (int d = 0; d < c; ++d) pairs.push_back({d, (d + 1) % c});
      const dax::PartitionSpec spec(dax::none, "context");
      auto exchange = dax::shard_map([&](const Array& kb, const Array& vb) {
        Array a = kb, b = vb;
        for (int i = 0; i < 2 * (c - 1); ++i) a = dax::ppermute(a, "context", pairs), b = dax::ppermute(b, "context", pairs);
        return a;
      }, ring, {spec, spec}, spec);
      ring_s = ring_blocking_s = exchange_s = 1e30;
      for (int round = 0; round < 3; ++round) {
        dax::comm_stats().reset();
        auto [t, bytes] = measure([&] {
          auto [value, grads] = dax::value_and_grad(loss_with(true))(p);
          ring_loss = value.to_host()[0];
        });
        ppermute = double(dax::comm_stats().of("ppermute").bytes);
        ring_s = std::min(ring_s, t), ring_bytes = max_over_ranks(bytes);
        ring_blocking_s = std::min(ring_blocking_s, measure([&] {
          auto [value, grads] = dax::value_and_grad(loss_with(false))(p);
          (void)value.to_host();
        }).first);
        exchange_s = std::min(exchange_s, measure([&] { (void)exchange(p[1], p[2]).local_to_host(); }).first);
      }
    }
    const std::string hidden = c > 1 && exchange_s >= 0.05 * ring_blocking_s
                                   ? std::to_string((ring_blocking_s - ring_s) / exchange_s)
                                   : std::string("null");
    if (rt.rank() == 0)
      std::printf("{\"seq\": %lld, \"devices\": %d, \"batch\": %lld, \"heads\": %lld, \"dim\": %lld, \"whole_s\": %.3f, "
                  "\"ring_s\": %.3f, \"speedup\": %.3f, \"whole_peak_mb\": %.1f, \"ring_peak_mb\": %.1f, "
                  "\"memory_ratio\": %.3f, \"one_over_c\": %.3f, \"ppermute_mb\": %.2f, \"kv_block_mb\": %.2f, "
                  "\"loss_relative_difference\": %.2e, \"ring_blocking_s\": %.4f, \"exchange_s\": %.4f, "
                  "\"exchange_share\": %.4f, \"hidden\": %s, \"whole_fused_s\": %.3f, \"whole_fused_peak_mb\": %.1f, "
                  "\"memory_ratio_fused\": %.3f}\n",
                  (long long)s, c, (long long)batch, (long long)heads, (long long)dim, whole_s, ring_s, whole_s / ring_s,
                  whole_bytes / 1e6, ring_bytes / 1e6, ring_bytes / whole_bytes, 1.0 / c, ppermute / 1e6,
                  double(n / size_t(c)) * 4 / 1e6, std::abs(ring_loss - whole_loss) / std::abs(whole_loss),
                  ring_blocking_s, exchange_s, exchange_s / ring_blocking_s, hidden.c_str(), whole_fused_s,
                  whole_fused_bytes / 1e6, ring_bytes / whole_fused_bytes);
  }
  return 0;
}
