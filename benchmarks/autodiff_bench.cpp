// An MLP training step (relu, bias, mean squared error, dax::optim::SGD) with gradients from
// dax::value_and_grad against the same step with the backward written by hand, in the same run:
// time per step (median over steps, slowest rank) and bytes moved per step. Goal: time ratio
// <= 1.05 and equal bytes. Batch split over all ranks (data parallel), parameters replicated.
//   mpirun -np 2 ./autodiff_bench [batch din hidden steps]
#include <dax/dax.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "bench_common.hpp"

namespace {

struct Mlp {
  dax::DistArray<float> w1, b1, w2, b2;
};
DAX_TREE(Mlp, w1, b1, w2, b2);

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 256, din = argc > 2 ? std::atoll(argv[2]) : 1024;
  const int64_t hidden = argc > 3 ? std::atoll(argv[3]) : 4096;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 10;
  const int64_t dout = din;
  const float lr = 1e-3f;

  dax::Mesh mesh({rt.size()}, {"data"});
  const dax::NamedSharding rows(mesh, dax::P("data")), replicated(mesh, dax::P());
  const auto keys = dax::random::split(dax::random::key(0), 4);
  const auto x = dax::random::normal<float>(keys[0], {batch, din}, rows);
  const auto t = dax::random::normal<float>(keys[1], {batch, dout}, rows);
  const Mlp init{dax::random::normal<float>(keys[2], {din, hidden}, replicated) * 0.02f,
                 dax::zeros<float>({hidden}, replicated),
                 dax::random::normal<float>(keys[3], {hidden, dout}, replicated) * 0.02f,
                 dax::zeros<float>({dout}, replicated)};

  const auto zero = dax::zeros<float>({}, replicated);
  auto loss_fn = [&](const Mlp& p) {
    const auto h = dax::relu(dax::matmul(x, p.w1) + p.b1);
    return dax::mean(dax::square(dax::matmul(h, p.w2) + p.b2 - t));
  };
  // Plain SGD through dax's optimizer, one fused kernel per parameter (PyTorch's twin uses sub_).
  using Sgd = dax::optim::SGD<Mlp>;
  auto autodiff_step = [&](Mlp& p, Sgd& sgd) {
    auto [loss, g] = dax::value_and_grad(loss_fn)(p);
    sgd.step(p, g);
    return loss;
  };
  auto by_hand_step = [&](Mlp& p, Sgd& sgd) {
    const auto z1 = dax::matmul(x, p.w1) + p.b1;
    const auto h = dax::relu(z1);
    const auto err = dax::matmul(h, p.w2) + p.b2 - t;
    const auto loss = dax::mean(dax::square(err));
    const auto dy = err * (2.0f / float(batch * dout));
    const auto dz1 = dax::matmul(dy, p.w2.T()) * dax::astype<float>(z1 > zero);
    const Mlp g{dax::matmul(x.T(), dz1), dax::sum(dz1, {0}), dax::matmul(h.T(), dy), dax::sum(dy, {0})};
    sgd.step(p, g);
    return loss;
  };

  struct Result {
    double seconds;
    int64_t bytes;
    float loss;
  };
  auto measure = [&](auto step) {
    Mlp p = init;
    Sgd sgd(p, {.lr = lr});
    step(p, sgd);  // warm-up: rules, plans and buffers cached
    std::vector<double> times;
    int64_t bytes = 0;
    float loss = 0;
    for (int s = 0; s < steps; ++s) {
      dax::comm_stats().reset();
      times.push_back(dax::bench::slowest_rank_seconds([&] { loss = step(p, sgd).to_host()[0]; }));
      bytes = dax::comm_stats().total_bytes();
    }
    return Result{dax::bench::median(times), bytes, loss};
  };
  // Interleaved twice, so drift on a shared machine hits both alike.
  const Result hand1 = measure(by_hand_step), auto1 = measure(autodiff_step);
  const Result hand2 = measure(by_hand_step), auto2 = measure(autodiff_step);
  const double hand = std::min(hand1.seconds, hand2.seconds), autod = std::min(auto1.seconds, auto2.seconds);
  if (rt.rank() == 0) {
    std::printf("MLP step %lld -> %lld -> %lld, batch %lld over %d rank(s), float32, %d steps\n", (long long)din,
                (long long)hidden, (long long)dout, (long long)batch, rt.size(), steps);
    std::printf("  hand-written backward: %8.2f ms/step, %lld bytes/step, loss %.6f\n", hand * 1e3,
                (long long)hand1.bytes, hand1.loss);
    std::printf("  dax::value_and_grad:   %8.2f ms/step, %lld bytes/step, loss %.6f\n", autod * 1e3,
                (long long)auto1.bytes, auto1.loss);
    std::printf("  time ratio autodiff / hand-written: %.3f (goal <= 1.05); bytes equal: %s\n", autod / hand,
                auto1.bytes == hand1.bytes ? "yes" : "NO");
    std::printf("{\"bench\": \"autodiff_mlp\", \"ranks\": %d, \"batch\": %lld, \"din\": %lld, \"hidden\": %lld, "
                "\"hand_ms\": %.3f, \"autodiff_ms\": %.3f, \"time_ratio\": %.4f, \"hand_bytes\": %lld, "
                "\"autodiff_bytes\": %lld}\n",
                rt.size(), (long long)batch, (long long)din, (long long)hidden, hand * 1e3, autod * 1e3, autod / hand,
                (long long)hand1.bytes, (long long)auto1.bytes);
  }
  return 0;
}
