// fsdp: fully sharded data parallel training (ZeRO-3 / PyTorch FSDP) of a 3-layer MLP with Adam,
// on a 1-d mesh 'data'. The batch is split over 'data', as in data parallel training. In addition,
// every weight, its gradient and its Adam moments (m, v) are split by rows, P('data', None), so each
// device keeps only 1/n of the model state. A layer's whole weight exists only while it is used:
//   forward:  W = reshard(W_shard, replicated)            -> all-gather
//   backward: dax::value_and_grad: the gathered W is kept for its pullback (not gathered again);
//             grad = a.T() @ g stays a partial sum over the batch split, and the all-gather's
//             pullback, the reverse reshard to P('data', None), makes it  -> reduce-scatter
//   update:   dax::optim::AdamW on the shards, elementwise, its moments split like the weights
//                                                          -> no communication
// The example prints each rank's memory for the model state against the replicated version. It
// checks the parameters after a few steps against the same training in double with Eigen.
// Run with `mpirun -np N` (any N) or as one process.
#include <dax/dax.hpp>

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <vector>

using HostMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Array = dax::DistArray<float>;

constexpr float lr = 0.01f, beta1 = 0.9f, beta2 = 0.999f;
// eps is larger than the usual 1e-8: Adam's g / sqrt(v) would otherwise turn float rounding in a
// near-zero gradient into a visible difference from the double-precision reference.
constexpr float eps = 1e-4f;

// The host reference: the same network and Adam in double, with Eigen.
struct HostModel {
  std::vector<HostMatrix> w, m, v;

  double step(const HostMatrix& x, const HostMatrix& y, int t) {
    const size_t layers = w.size();
    std::vector<HostMatrix> acts{x};
    for (size_t l = 0; l < layers; ++l) {
      HostMatrix z = acts[l] * w[l];
      acts.push_back(l + 1 < layers ? HostMatrix(z.array().tanh()) : z);
    }
    const HostMatrix err = acts.back() - y;
    HostMatrix g = err * (2.0 / err.size());
    std::vector<HostMatrix> grad(layers);
    for (size_t l = layers; l-- > 0;) {
      grad[l] = acts[l].transpose() * g;
      if (l > 0) g = ((g * w[l].transpose()).array() * (1 - acts[l].array().square())).matrix();
    }
    for (size_t l = 0; l < layers; ++l) {
      m[l] = beta1 * m[l] + (1 - beta1) * grad[l];
      v[l] = beta2 * v[l] + (1 - beta2) * HostMatrix(grad[l].array().square());
      const auto m_hat = m[l].array() / (1 - std::pow(beta1, t));
      const auto v_hat = v[l].array() / (1 - std::pow(beta2, t));
      w[l] -= (lr * m_hat / (v_hat.sqrt() + eps)).matrix();
    }
    return err.squaredNorm() / err.size();
  }
};

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const int64_t batch = 128, steps = 8;
  const std::vector<int64_t> widths{32, 64, 64, 8};  // 3 layers: 32 -> 64 -> 64 -> 8
  const size_t layers = widths.size() - 1;

  // Host data, the same on every rank.
  std::mt19937 gen(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto random = [&](int64_t rows, int64_t cols, double scale) {
    HostMatrix a(rows, cols);
    for (Eigen::Index i = 0; i < a.size(); ++i) a.data()[i] = scale * normal(gen);
    return a;
  };
  const HostMatrix x_host = random(batch, widths[0], 1.0);
  const HostMatrix y_host = (x_host * random(widths[0], widths.back(), 0.3)).array().sin().matrix();
  HostModel ref;
  for (size_t l = 0; l < layers; ++l) {
    ref.w.push_back(random(widths[l], widths[l + 1], 1.0 / std::sqrt(double(widths[l]))));
    ref.m.push_back(HostMatrix::Zero(widths[l], widths[l + 1]));
    ref.v.push_back(HostMatrix::Zero(widths[l], widths[l + 1]));
  }

  dax::Mesh mesh({rt.size()}, {"data"});
  const dax::NamedSharding sharded(mesh, dax::P("data", dax::none)), replicated(mesh, dax::P());
  const dax::NamedSharding partial(mesh, dax::P().with_unreduced("data"));  // partial sums over 'data'
  auto put = [](const HostMatrix& a, const dax::NamedSharding& s) {
    const std::vector<float> host(a.data(), a.data() + a.size());
    return dax::device_put(host, {a.rows(), a.cols()}, s);
  };
  const Array x = put(x_host, sharded), y = put(y_host, sharded);
  std::vector<Array> w;  // each split by rows over 'data'
  for (size_t l = 0; l < layers; ++l) w.push_back(put(ref.w[l], sharded));
  // Adam (AdamW without decay); its moments take each weight's sharding: ZeRO-3 state for free.
  dax::optim::AdamW opt(w, {.lr = lr, .b1 = beta1, .b2 = beta2, .eps = eps, .weight_decay = 0});

  if (rt.rank() == 0) {
    std::cout << "FSDP: MLP 32 -> 64 -> 64 -> 8 with Adam, batch " << batch << ", on " << mesh << "\n"
              << "forward, layer 2: " << dax::explain(w[1], replicated)
              << "backward, layer 2 gradient: a.T() @ g -> " << partial.spec() << ", then "
              << dax::explain(w[1].shape(), w[1].dtype(), partial, sharded);
  }

  // The loss as a function of the weight shards; each layer gathers its weight for its matmul.
  auto loss_fn = [&](const std::vector<Array>& ws) {
    Array a = x;
    for (size_t l = 0; l < layers; ++l) {
      const Array z = dax::matmul(a, dax::reshard(ws[l], replicated));
      a = l + 1 < layers ? dax::tanh(z) : z;
    }
    return dax::mean(dax::square(a - y));
  };

  std::vector<Array> grads;  // the gradients' shards, split like the weights
  float first_loss = 0, last_loss = 0;
  dax::CommStats per_step;
  for (int t = 1; t <= steps; ++t) {
    dax::comm_stats().reset();
    auto [loss, g] = dax::value_and_grad(loss_fn)(w);
    grads = std::move(g);
    opt.step(w, grads);  // on the shards: no communication
    per_step = dax::comm_stats();

    const float l_dax = loss.to_host()[0];
    const double l_ref = ref.step(x_host, y_host, t);
    if (t == 1) first_loss = l_dax;
    last_loss = l_dax;
    if (rt.rank() == 0) std::cout << "step " << t << "  loss " << l_dax << "  (host reference " << l_ref << ")\n";
  }

  // Memory for the model state, per device: its pieces of the weights, gradients and Adam moments
  // (4 arrays per layer, all split alike), against every device holding all of them. Activations
  // and the briefly gathered weights are left out.
  std::vector<int64_t> state_bytes(mesh.size(), 0);
  int64_t replicated_bytes = 0;
  for (size_t l = 0; l < layers; ++l) {
    for (const auto& [device, index] : sharded.devices_indices_map(w[l].shape()))
      state_bytes[device] += 4 * dax::numel(index) * 4;  // 4 arrays of 4-byte floats
    replicated_bytes += 4 * w[l].size() * 4;
  }
  // This rank's own pieces must add up to its line of that table.
  int64_t held = 0;
  for (size_t l = 0; l < layers; ++l) held += (w[l].local_size() + grads[l].local_size()) * 4;
  dax::tree_for_each([&](const auto& leaf) {  // the optimizer's moments (not its step counter)
    if constexpr (std::is_same_v<typename std::decay_t<decltype(leaf)>::value_type, float>) held += leaf.local_size() * 4;
  }, opt.state());
  const bool memory_ok = held == state_bytes[rt.rank()];
  // Collectives in one step: one all-gather per layer (forward; the backward reuses the gathered
  // weight its pullback kept), one reduce-scatter per layer, and the loss's all-reduce.
  const auto gathers = per_step.of("all_gather"), scatters = per_step.of("reduce_scatter");
  const int64_t nl = static_cast<int64_t>(layers);
  const bool comm_ok = rt.size() == 1 || (gathers.calls == nl && scatters.calls == nl &&
                                          per_step.of("all_reduce").calls == 1 && per_step.total_calls() == 2 * nl + 1);
  double diff = 0, scale = 0;
  for (size_t l = 0; l < layers; ++l) {
    const auto got = w[l].to_host();
    for (size_t i = 0; i < got.size(); ++i) {
      diff = std::max(diff, std::abs(got[i] - ref.w[l].data()[i]));
      scale = std::max(scale, std::abs(ref.w[l].data()[i]));
    }
  }
  if (rt.rank() == 0) {
    std::cout << "per step: " << gathers.calls << " all-gathers (" << gathers.bytes << " B), " << scatters.calls
              << " reduce-scatters (" << scatters.bytes << " B), " << per_step.of("all_reduce").calls
              << " all-reduce; received " << per_step.total_bytes() << " bytes per device\n"
              << "model state (weights + gradients + Adam m, v), replicated: " << replicated_bytes << " bytes\n";
    for (int d = 0; d < mesh.size(); ++d)
      std::cout << "  device " << d << ": " << state_bytes[d] << " bytes ("
                << double(replicated_bytes) / state_bytes[d] << "x less)\n";
    std::cout << "weights vs host reference after " << steps << " steps: max relative error " << diff / scale
              << "\n";
  }
  if (!comm_ok || !memory_ok || !(last_loss < first_loss) || !(diff <= 1e-4 * scale)) {
    if (rt.rank() == 0)
      std::cerr << "fsdp: FAILED (expected L all-gathers and L reduce-scatters per step, a falling loss, and "
                   "weights within 1e-4 of the host)\n";
    return 1;
  }
  if (rt.rank() == 0)
    std::cout << "verified: " << steps << " FSDP Adam steps on " << mesh.size()
              << " device(s) match single-process training\n";
  return 0;
}
