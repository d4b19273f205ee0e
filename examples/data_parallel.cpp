// data_parallel: train a 2-layer MLP with SGD, data parallel. The batch is split over a 1-d mesh
// 'data' (P('data', None)) and the parameters are replicated on every device. The gradients come
// from dax::value_and_grad and dax::optim::SGD applies them. Each weight gradient sums over the
// batch dimension, which is split, so dax finishes it with one all-reduce over 'data'. That
// all-reduce is the gradient averaging of data parallel training, and here it falls out of the
// sharding. The first step's gradients are checked against a backward written by hand with dax
// ops, and the trained parameters against the same training done in one process with plain loops.
// Run with `mpirun -np N` (any N) or as one process.
#include <dax/dax.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

using Host = std::vector<double>;

// The parameters as a tree: value_and_grad returns gradients of the same shape, SGD updates it.
struct Params {
  dax::DistArray<float> w1, b1, w2, b2;
};
DAX_TREE(Params, w1, b1, w2, b2);

// The host reference: the same network and the same SGD in double, with plain loops.
struct HostMlp {
  int din, hidden, dout;
  Host w1, b1, w2, b2;

  // One SGD step on (x, y); returns the loss before the step.
  double step(const Host& x, const Host& y, int batch, double lr) {
    Host a(batch * hidden);
    for (int i = 0; i < batch; ++i)
      for (int j = 0; j < hidden; ++j) {
        double s = b1[j];
        for (int k = 0; k < din; ++k) s += x[i * din + k] * w1[k * hidden + j];
        a[i * hidden + j] = std::tanh(s);
      }
    double loss = 0;
    Host dy(batch * dout);
    for (int i = 0; i < batch; ++i)
      for (int j = 0; j < dout; ++j) {
        double s = b2[j];
        for (int k = 0; k < hidden; ++k) s += a[i * hidden + k] * w2[k * dout + j];
        const double e = s - y[i * dout + j];
        loss += e * e / (batch * dout);
        dy[i * dout + j] = 2 * e / (batch * dout);
      }
    Host gw1(din * hidden, 0), gb1(hidden, 0), gw2(hidden * dout, 0), gb2(dout, 0);
    for (int i = 0; i < batch; ++i)
      for (int j = 0; j < hidden; ++j) {
        double da = 0;
        for (int k = 0; k < dout; ++k) da += dy[i * dout + k] * w2[j * dout + k];
        const double ai = a[i * hidden + j], dh = da * (1 - ai * ai);
        gb1[j] += dh;
        for (int k = 0; k < din; ++k) gw1[k * hidden + j] += x[i * din + k] * dh;
        for (int k = 0; k < dout; ++k) gw2[j * dout + k] += ai * dy[i * dout + k];
      }
    for (int i = 0; i < batch; ++i)
      for (int k = 0; k < dout; ++k) gb2[k] += dy[i * dout + k];
    for (size_t i = 0; i < w1.size(); ++i) w1[i] -= lr * gw1[i];
    for (size_t i = 0; i < b1.size(); ++i) b1[i] -= lr * gb1[i];
    for (size_t i = 0; i < w2.size(); ++i) w2[i] -= lr * gw2[i];
    for (size_t i = 0; i < b2.size(); ++i) b2[i] -= lr * gb2[i];
    return loss;
  }
};

// Largest |a - b| over the largest |b|.
double relative_error(const std::vector<float>& a, const Host& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const int batch = 96, din = 16, hidden = 32, dout = 4, steps = 40;
  const float lr = 0.1f;

  // Host data, the same on every rank (fixed seed): a random teacher network makes the targets.
  std::mt19937 gen(42);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto random = [&](size_t n, double scale) {
    Host v(n);
    for (double& e : v) e = scale * normal(gen);
    return v;
  };
  const Host x = random(batch * din, 1.0);
  const Host teacher1 = random(din * hidden, 0.5), teacher2 = random(hidden * dout, 0.5);
  Host y(batch * dout, 0.0);
  for (int i = 0; i < batch; ++i)
    for (int j = 0; j < hidden; ++j) {
      double s = 0;
      for (int k = 0; k < din; ++k) s += x[i * din + k] * teacher1[k * hidden + j];
      for (int o = 0; o < dout; ++o) y[i * dout + o] += std::tanh(s) * teacher2[j * dout + o];
    }
  HostMlp ref{din, hidden, dout, random(din * hidden, 1.0 / std::sqrt(din)), random(hidden, 0.1),
              random(hidden * dout, 1.0 / std::sqrt(hidden)), random(dout, 0.1)};

  // The mesh, the batch split over it, the parameters replicated.
  dax::Mesh mesh({rt.size()}, {"data"});
  const dax::NamedSharding batch_split(mesh, dax::P("data", dax::none)), replicated(mesh, dax::P());
  auto put = [](const Host& h, const dax::Shape& shape, const dax::NamedSharding& s) {
    return dax::device_put(std::vector<float>(h.begin(), h.end()), shape, s);
  };
  const auto xs = put(x, {batch, din}, batch_split), ys = put(y, {batch, dout}, batch_split);
  Params params{put(ref.w1, {din, hidden}, replicated), put(ref.b1, {hidden}, replicated),
                put(ref.w2, {hidden, dout}, replicated), put(ref.b2, {dout}, replicated)};
  dax::optim::SGD opt(params, {.lr = lr});

  if (rt.rank() == 0)
    std::cout << "data parallel MLP " << din << " -> " << hidden << " -> " << dout << " (tanh), batch " << batch
              << " split over " << mesh << ", parameters replicated\n";

  // The loss, as a function of the parameters: value_and_grad differentiates it.
  auto loss_fn = [&](const Params& p) {
    const auto a = dax::tanh(dax::matmul(xs, p.w1) + p.b1);  // every activation keeps the batch split
    return dax::mean(dax::square(dax::matmul(a, p.w2) + p.b2 - ys));  // a scalar: one small all-reduce
  };
  // The same gradients by hand (the check of the first step). Products over the batch dimension
  // (a.T() @ dy, x.T() @ dh) contract the split dimension: each device's product is a partial sum,
  // all-reduced into the replicated gradient. The bias gradients sum over the batch the same way.
  auto by_hand = [&](const Params& p) {
    const auto a = dax::tanh(dax::matmul(xs, p.w1) + p.b1);
    const auto dy = (dax::matmul(a, p.w2) + p.b2 - ys) * (2.0f / (batch * dout));
    const auto dh = dax::matmul(dy, p.w2.T()) * (1.0f - a * a);
    return Params{dax::matmul(xs.T(), dh), dax::sum(dh, {0}), dax::matmul(a.T(), dy), dax::sum(dy, {0})};
  };

  float first_loss = 0, last_loss = 0;
  int64_t all_reduces = 0, other_collectives = 0, bytes = 0;
  double gradient_error = 0;
  for (int step = 0; step < steps; ++step) {
    const std::optional<Params> hand = step == 0 ? std::optional(by_hand(params)) : std::nullopt;
    dax::comm_stats().reset();
    auto [loss, grads] = dax::value_and_grad(loss_fn)(params);
    if (hand) {  // replicated gradients: to_host moves nothing
      dax::tree_for_each([&](const auto& g, const auto& h) {
        const auto got = g.to_host(), want = h.to_host();
        gradient_error = std::max(gradient_error, relative_error(got, Host(want.begin(), want.end())));
      }, grads, *hand);
    }
    opt.step(params, grads);  // replicated gradients on replicated parameters: no communication
    const auto& stats = dax::comm_stats();
    all_reduces += stats.of("all_reduce").calls;
    bytes += stats.total_bytes();
    other_collectives += stats.total_calls() - stats.of("all_reduce").calls;
    const float l = loss.to_host()[0];  // replicated already: to_host moves nothing
    const double l_ref = ref.step(x, y, batch, lr);
    if (step == 0) first_loss = l;
    last_loss = l;
    if (rt.rank() == 0 && (step % 5 == 0 || step == steps - 1))
      std::cout << "step " << step << "  loss " << l << "  (host reference " << l_ref << ")\n";
  }

  const double param_error =
      std::max({relative_error(params.w1.to_host(), ref.w1), relative_error(params.b1.to_host(), ref.b1),
                relative_error(params.w2.to_host(), ref.w2), relative_error(params.b2.to_host(), ref.b2)});
  // Per step: 5 all-reduces (the loss, 2 weight and 2 bias gradients), none on one device.
  // comm_stats counts an all-reduce of m floats over k devices as the 2(k-1)/k * m floats that the
  // bandwidth-optimal algorithm receives.
  const int64_t k = rt.size();
  auto all_reduce_bytes = [&](int64_t m) { return 2 * (k - 1) * m / k * int64_t(sizeof(float)); };
  const int64_t expected_bytes = all_reduce_bytes(1) + all_reduce_bytes(din * hidden) + all_reduce_bytes(hidden) +
                                 all_reduce_bytes(hidden * dout) + all_reduce_bytes(dout);
  const bool comm_ok = all_reduces == (k == 1 ? 0 : 5 * steps) && other_collectives == 0 &&
                       bytes == expected_bytes * steps;
  if (rt.rank() == 0)
    std::cout << "per step: " << all_reduces / steps << " all-reduces, " << other_collectives / steps
              << " other collectives, " << bytes / steps << " bytes received per device (expected "
              << expected_bytes << ")\n"
              << "loss " << first_loss << " -> " << last_loss
              << "; parameters vs host reference: max relative error " << param_error
              << "; autodiff vs hand-written gradients: max relative error " << gradient_error << "\n";
  if (!(last_loss < first_loss) || !(param_error < 1e-4) || !(gradient_error < 1e-5) || !comm_ok) {
    if (rt.rank() == 0)
      std::cerr << "data_parallel: FAILED (loss must fall, parameters must match the host within 1e-4, "
                   "value_and_grad must match the hand-written backward within 1e-5, and gradients must be "
                   "averaged by all-reduce alone)\n";
    return 1;
  }
  if (rt.rank() == 0)
    std::cout << "verified: " << steps << " data-parallel SGD steps on " << mesh.size()
              << " device(s) match single-process training\n";
  return 0;
}
