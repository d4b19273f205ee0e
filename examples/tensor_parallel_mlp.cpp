// tensor_parallel_mlp: the Megatron-LM MLP block, y = gelu(x @ W1) @ W2, on a 1-d mesh 'model'.
// x is replicated, W1 is split by columns (column-parallel) and W2 by rows (row-parallel). Plain
// dax ops do the rest. x @ W1 needs no communication and leaves the hidden layer split by columns,
// and gelu works on each piece. The second matmul contracts the split dimension, so each device
// holds a partial sum of y (an unreduced value), and one all-reduce makes y replicated. The
// example prints the matmul rule's choice and the bytes comm_stats counted. It checks them against
// the all-reduce formula and checks y against loops on the host. Then it takes the gradients of a
// squared loss with dax::grad and checks them against loops too: the backward moves nothing, since
// each weight's gradient is computed where its piece lives (Megatron's backward all-reduce is of the
// input's gradient, which this block's input, data, does not need).
// Run with `mpirun -np N` (any N) or as one process.
#include <dax/dax.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const int64_t batch = 16, d = 256, f = 1024;  // f = 4 d, as in a transformer

  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&](int64_t n, float scale) {
    std::vector<float> v(n);
    for (float& e : v) e = scale * normal(gen);
    return v;
  };
  const auto x_host = random(batch * d, 1.0f);
  const auto w1_host = random(d * f, 1.0f / std::sqrt(float(d)));
  const auto w2_host = random(f * d, 1.0f / std::sqrt(float(f)));

  dax::Mesh mesh({rt.size()}, {"model"});
  const dax::NamedSharding replicated(mesh, dax::P());
  const auto x = dax::device_put(x_host, {batch, d}, replicated);
  const auto w1 = dax::device_put(w1_host, {d, f}, dax::NamedSharding(mesh, dax::P(dax::none, "model")));
  const auto w2 = dax::device_put(w2_host, {f, d}, dax::NamedSharding(mesh, dax::P("model", dax::none)));

  dax::comm_stats().reset();
  const auto h = dax::gelu(dax::matmul(x, w1));  // (batch, f), split by columns
  const auto y = dax::matmul(h, w2);             // partial sums, then one all-reduce
  const auto stats = dax::comm_stats();          // a copy, before to_host() below counts anything

  if (rt.rank() == 0) {
    std::cout << "Megatron MLP (" << batch << ", " << d << ") -> " << f << " -> " << d << " on " << mesh << "\n"
              << "x " << x.sharding().spec() << ", W1 " << w1.sharding().spec() << ", W2 "
              << w2.sharding().spec() << "\n"
              << "h = gelu(x @ W1): " << h.sharding().spec() << "\n"
              << dax::explain_matmul(h, w2) << "y = h @ W2: " << y.sharding().spec() << "\n";
  }

  // The same thing in two visible steps: ask matmul for the partial sums (no communication), then
  // reshard them to replicated, which is the all-reduce.
  const dax::NamedSharding partial(mesh, dax::P().with_unreduced("model"));
  const auto y_partial = dax::matmul(h, w2, partial);
  if (rt.rank() == 0)
    std::cout << "as two steps: h @ W2 -> " << y_partial.sharding().spec() << ", then\n"
              << dax::explain(y_partial, replicated);
  const bool two_steps_ok = dax::reshard(y_partial, replicated).to_host() == y.to_host();

  // Each device receives 2(n-1)/n of y's bytes in the all-reduce (the bandwidth-optimal ring's
  // traffic, which comm_stats counts), and nothing else moves.
  const int64_t n = rt.size();
  const int64_t expected = 2 * (n - 1) * (batch * d) / n * int64_t(sizeof(float));
  const auto all_reduce = stats.of("all_reduce", "('model',)");
  const bool comm_ok = stats.total_bytes() == expected && all_reduce.bytes == expected &&
                       stats.total_calls() == all_reduce.calls && all_reduce.calls == (n > 1 ? 1 : 0);
  if (rt.rank() == 0)
    std::cout << "communicated: " << all_reduce.calls << " all-reduce(s), " << stats.total_bytes()
              << " bytes received per device; formula 2(n-1)/n * " << batch << " * " << d << " * 4 = " << expected
              << "\n";

  // The host reference: the same formulas with plain loops, in double.
  std::vector<double> hidden(batch * f), ref(batch * d, 0.0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < f; ++j) {
      double s = 0;
      for (int64_t k = 0; k < d; ++k) s += double(x_host[i * d + k]) * w1_host[k * f + j];
      hidden[i * f + j] = 0.5 * s * (1 + std::tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
    }
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t k = 0; k < f; ++k)
      for (int64_t j = 0; j < d; ++j) ref[i * d + j] += hidden[i * f + k] * w2_host[k * d + j];
  const auto got = y.to_host();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  const bool layout_ok = y.sharding().is_fully_replicated();
  if (rt.rank() == 0) std::cout << "y vs host loops: max error " << diff << " (largest |y| " << scale << ")\n";

  // Training: the gradients of mean((y - t)^2) with respect to (W1, W2), by dax::grad.
  const auto t_host = random(batch * d, 1.0f);
  const auto t = dax::device_put(t_host, {batch, d}, replicated);
  auto loss_fn = [&](const std::vector<dax::DistArray<float>>& w) {
    return dax::mean(dax::square(dax::matmul(dax::gelu(dax::matmul(x, w[0])), w[1]) - t));
  };
  const std::vector<dax::DistArray<float>> weights{w1, w2};
  loss_fn(weights);  // the forward alone, to count what the backward adds
  dax::comm_stats().reset();
  loss_fn(weights);
  const int64_t forward_bytes = dax::comm_stats().total_bytes();
  dax::comm_stats().reset();
  const auto grads = dax::grad(loss_fn)(weights);
  const int64_t backward_bytes = dax::comm_stats().total_bytes() - forward_bytes;
  // Host gradients: gy = 2 (y - t) / numel; dW2 = h^T gy; dW1 = x^T ((gy W2^T) * gelu'(z)).
  std::vector<double> z(batch * f), gy(batch * d), dz(batch * f, 0.0), dw1(d * f, 0.0), dw2(f * d, 0.0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < f; ++j) {
      double s = 0;
      for (int64_t k = 0; k < d; ++k) s += double(x_host[i * d + k]) * w1_host[k * f + j];
      z[i * f + j] = s;
    }
  for (size_t i = 0; i < gy.size(); ++i) gy[i] = 2.0 * (ref[i] - t_host[i]) / double(batch * d);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t k = 0; k < f; ++k) {
      double g = 0;
      for (int64_t j = 0; j < d; ++j) {
        g += gy[i * d + j] * w2_host[k * d + j];
        dw2[k * d + j] += hidden[i * f + k] * gy[i * d + j];
      }
      const double v = z[i * f + k], c = 0.7978845608028654, u = std::tanh(c * (v + 0.044715 * v * v * v));
      dz[i * f + k] = g * (0.5 * (1 + u) + 0.5 * v * (1 - u * u) * c * (1 + 3 * 0.044715 * v * v));
    }
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t k = 0; k < d; ++k)
      for (int64_t j = 0; j < f; ++j) dw1[k * f + j] += double(x_host[i * d + k]) * dz[i * f + j];
  auto max_relative = [](const std::vector<float>& got, const std::vector<double>& want) {
    double e = 0, s = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      e = std::max(e, std::abs(got[i] - want[i]));
      s = std::max(s, std::abs(want[i]));
    }
    return e / s;
  };
  const double grad_error = std::max(max_relative(grads[0].to_host(), dw1), max_relative(grads[1].to_host(), dw2));
  const bool grads_ok = grad_error < 1e-4 && grads[0].sharding() == w1.sharding() &&
                        grads[1].sharding() == w2.sharding() && backward_bytes == 0;
  if (rt.rank() == 0)
    std::cout << "dax::grad: dW1 " << grads[0].sharding().spec() << ", dW2 " << grads[1].sharding().spec()
              << ", max relative error vs host " << grad_error << ", backward moved " << backward_bytes
              << " bytes\n";
  if (!comm_ok || !layout_ok || !two_steps_ok || !(diff <= 1e-5 * scale) || !grads_ok) {
    if (rt.rank() == 0)
      std::cerr << "tensor_parallel_mlp: FAILED (expected one all-reduce of " << expected
                << " bytes, a replicated y equal to the two-step result, y within 1e-5 of the host, and "
                   "gradients within 1e-4 of the host, in the weights' shardings, with no backward traffic)\n";
    return 1;
  }
  if (rt.rank() == 0)
    std::cout << "verified: column- then row-parallel MLP on " << n << " device(s) equals the host, with "
              << (n > 1 ? "one all-reduce of y" : "no communication on one device") << "\n";
  return 0;
}
