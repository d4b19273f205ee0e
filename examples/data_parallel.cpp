// data_parallel: train a 2-layer MLP with plain SGD, data parallel. The batch is split over a 1-d
// mesh 'data' (P('data', None)) and the parameters are replicated on every device. The backward
// pass is written by hand with dax ops. Each weight gradient sums over the batch dimension, which
// is split, so dax finishes it with one all-reduce over 'data'. That all-reduce is the gradient
// averaging of data parallel training, and here it falls out of the sharding. The trained
// parameters are checked against the same training done in one process with plain loops.
// Run with `mpirun -np N` (any N) or as one process.
#include <dax/dax.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

using Host = std::vector<double>;

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
  auto w1 = put(ref.w1, {din, hidden}, replicated), b1 = put(ref.b1, {hidden}, replicated);
  auto w2 = put(ref.w2, {hidden, dout}, replicated), b2 = put(ref.b2, {dout}, replicated);

  if (rt.rank() == 0)
    std::cout << "data parallel MLP " << din << " -> " << hidden << " -> " << dout << " (tanh), batch " << batch
              << " split over " << mesh << ", parameters replicated\n";

  float first_loss = 0, last_loss = 0;
  int64_t all_reduces = 0, other_collectives = 0, bytes = 0;
  for (int step = 0; step < steps; ++step) {
    dax::comm_stats().reset();
    // Forward. Every activation keeps the batch split: no communication.
    const auto a = dax::tanh(dax::matmul(xs, w1) + b1);
    const auto out = dax::matmul(a, w2) + b2;
    const auto err = out - ys;
    const auto loss = dax::mean(dax::square(err));  // a scalar: one small all-reduce
    // Backward by hand. Products over the batch dimension (a.T() @ dy, x.T() @ dh) contract the
    // split dimension: each device's product is a partial sum, all-reduced into the replicated
    // gradient. The bias gradients sum over the batch the same way.
    const auto dy = err * (2.0f / (batch * dout));
    const auto gw2 = dax::matmul(a.T(), dy), gb2 = dax::sum(dy, {0});
    const auto dh = dax::matmul(dy, w2.T()) * (1.0f - a * a);
    const auto gw1 = dax::matmul(xs.T(), dh), gb1 = dax::sum(dh, {0});
    if (step == 0) {
      const std::string plan = dax::explain_matmul(xs.T(), dh);  // on every rank: xs.T() is an op
      if (rt.rank() == 0) std::cout << "gradient of W1, " << plan;
    }
    w1 -= gw1 * lr;
    b1 -= gb1 * lr;
    w2 -= gw2 * lr;
    b2 -= gb2 * lr;

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
      std::max({relative_error(w1.to_host(), ref.w1), relative_error(b1.to_host(), ref.b1),
                relative_error(w2.to_host(), ref.w2), relative_error(b2.to_host(), ref.b2)});
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
              << "; parameters vs host reference: max relative error " << param_error << "\n";
  if (!(last_loss < first_loss) || !(param_error < 1e-4) || !comm_ok) {
    if (rt.rank() == 0)
      std::cerr << "data_parallel: FAILED (loss must fall, parameters must match the host within 1e-4, and "
                   "gradients must be averaged by all-reduce alone)\n";
    return 1;
  }
  if (rt.rank() == 0)
    std::cout << "verified: " << steps << " data-parallel SGD steps on " << mesh.size()
              << " device(s) match single-process training\n";
  return 0;
}
