// Guide 003: a book chapter on data parallelism and sharding: what each device holds under ZeRO
// stages 1-3 and FSDP, GSPMD's view (a mesh, annotated tensors, collectives inserted for you) with
// one sketch of a tiled weight, and 3-d parallelism (data x tensor x pipeline).
//
//   mpirun -np 8 --oversubscribe examples/from_jax/from_jax_zero_and_3d   (or -np 1)
//
// Checks, at 8 ranks: the bytes of parameters, gradients and AdamW state each device holds at
// ZeRO stages 0-3 and under FSDP, exactly against each stage's formula (and the memory counter),
// and what each stage moves per step (data parallel: all-reduce of the gradients; ZeRO-1: plus an
// all-gather of the updated parameters; ZeRO-2: a reduce-scatter of the gradients instead; ZeRO-3:
// an all-gather of the parameters and a reduce-scatter of the gradients; FSDP: the all-gather
// again in the backward); the tiled weight's pieces and picture; and a 3-d parallel training step
// on a (2, 2, 2) ('data', 'stage', 'model') mesh — two GPipe stages passing activations with
// ppermute, each stage's MLP Megatron-split over 'model', the batch split over 'data' in
// micro-batches — with the bytes each mesh axis moves. At every rank count: every loss and
// gradient against the same model trained with plain loops on the host.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "guide.hpp"

namespace {

using Array = dax::DistArray<double>;
using HostMatrix = std::vector<double>;  // row-major

std::vector<double> normal_values(int64_t n, double scale, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& e : v) e = scale * normal(rng);
  return v;
}

/// c (m, n) = a (m, k) b (k, n), with a or b read transposed when asked.
HostMatrix host_matmul(const HostMatrix& a, const HostMatrix& b, int64_t m, int64_t k, int64_t n, bool ta = false,
                       bool tb = false) {
  HostMatrix c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double av = ta ? a[p * m + i] : a[i * k + p];
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += av * (tb ? b[j * k + p] : b[p * n + j]);
    }
  return c;
}

/// AdamW on the host, PyTorch's arithmetic (what dax::optim::AdamW documents).
struct HostAdamW {
  HostAdamW(double lr, double wd) : lr(lr), wd(wd) {}
  double lr, wd, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  std::vector<std::vector<double>> m, v;
  int t = 0;
  void step(std::vector<std::vector<double>*> params, const std::vector<std::vector<double>>& grads) {
    if (m.empty())
      for (auto* p : params) m.emplace_back(p->size(), 0.0), v.emplace_back(p->size(), 0.0);
    ++t;
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t k = 0; k < params.size(); ++k)
      for (size_t i = 0; i < params[k]->size(); ++i) {
        const double g = grads[k][i];
        m[k][i] = b1 * m[k][i] + (1 - b1) * g;
        v[k][i] = b2 * v[k][i] + (1 - b2) * g * g;
        double& p = (*params[k])[i];
        p = p * (1 - lr * wd) - (lr / bc1) * m[k][i] / (std::sqrt(v[k][i]) / std::sqrt(bc2) + eps);
      }
  }
};

double relative(double got, double want) { return std::abs(got - want) / std::max(1.0, std::abs(want)); }

// =============================================================================================
// ZeRO and FSDP: a two-layer MLP, tanh(x w1 + b1) w2 + b2, squared error, trained with AdamW on a
// 1-d 'data' mesh of 8 devices with the batch split over 'data'.

struct Mlp {
  Array w1, b1, w2, b2;
};
DAX_TREE(Mlp, w1, b1, w2, b2)

constexpr int64_t kBatch = 128, kIn = 32, kHidden = 64, kOut = 16;
constexpr int kSteps = 3;
constexpr double kLr = 0.01, kDecay = 0.01;

struct MlpData {
  std::vector<double> x, y, w1, b1, w2, b2;
};

MlpData mlp_data() {
  std::mt19937 rng(3);
  MlpData d;
  d.x = normal_values(kBatch * kIn, 1.0, rng);
  d.y = normal_values(kBatch * kOut, 1.0, rng);
  d.w1 = normal_values(kIn * kHidden, 1.0 / std::sqrt(double(kIn)), rng);
  d.b1 = normal_values(kHidden, 0.1, rng);
  d.w2 = normal_values(kHidden * kOut, 1.0 / std::sqrt(double(kHidden)), rng);
  d.b2 = normal_values(kOut, 0.1, rng);
  return d;
}

/// The same training on the host, with plain loops: the loss before each step.
std::vector<double> host_mlp_losses(MlpData d) {
  HostAdamW adam(kLr, kDecay);
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    HostMatrix h = host_matmul(d.x, d.w1, kBatch, kIn, kHidden);
    for (int64_t i = 0; i < kBatch; ++i)
      for (int64_t j = 0; j < kHidden; ++j) h[i * kHidden + j] = std::tanh(h[i * kHidden + j] + d.b1[j]);
    HostMatrix o = host_matmul(h, d.w2, kBatch, kHidden, kOut);
    double loss = 0;
    HostMatrix go(kBatch * kOut);
    for (int64_t i = 0; i < kBatch; ++i)
      for (int64_t j = 0; j < kOut; ++j) {
        const double e = o[i * kOut + j] + d.b2[j] - d.y[i * kOut + j];
        loss += e * e;
        go[i * kOut + j] = 2 * e / double(kBatch * kOut);
      }
    losses.push_back(loss / double(kBatch * kOut));
    const HostMatrix gw2 = host_matmul(h, go, kHidden, kBatch, kOut, /*ta=*/true);
    std::vector<double> gb2(kOut, 0.0), gb1(kHidden, 0.0);
    for (int64_t i = 0; i < kBatch; ++i)
      for (int64_t j = 0; j < kOut; ++j) gb2[j] += go[i * kOut + j];
    HostMatrix ga = host_matmul(go, d.w2, kBatch, kOut, kHidden, false, /*tb=*/true);
    for (int64_t i = 0; i < kBatch; ++i)
      for (int64_t j = 0; j < kHidden; ++j) {
        const double hv = h[i * kHidden + j];
        ga[i * kHidden + j] *= 1 - hv * hv;
        gb1[j] += ga[i * kHidden + j];
      }
    const HostMatrix gw1 = host_matmul(d.x, ga, kIn, kBatch, kHidden, /*ta=*/true);
    adam.step({&d.w1, &d.b1, &d.w2, &d.b2}, {gw1, gb1, gw2, gb2});
  }
  return losses;
}

enum class Scheme { data_parallel, zero1, zero2, zero3, fsdp };

const char* scheme_name(Scheme s) {
  switch (s) {
    case Scheme::data_parallel:
      return "stage 0 (data parallel)";
    case Scheme::zero1:
      return "ZeRO-1 (state split)";
    case Scheme::zero2:
      return "ZeRO-2 (+ gradients split)";
    case Scheme::zero3:
      return "ZeRO-3 (+ parameters split)";
    case Scheme::fsdp:
      return "FSDP (ZeRO-3, gathered again for the backward)";
  }
  return "";
}

/// What one training run left on this device, and what its steps moved.
struct ZeroRun {
  std::vector<double> losses;
  int64_t param_bytes = 0, grad_bytes = 0, state_bytes = 0;
  int64_t memory_delta = 0, memory_expected = 0;
  std::vector<dax::CommStats> steps;
  std::optional<Mlp> params;
  std::optional<Array> state_w1;  // AdamW's first moment of w1: where the state lives
};

template <class Tree>
int64_t bytes_held(const Tree& tree) {
  int64_t b = 0;
  dax::tree_for_each([&](const auto& leaf) { b += int64_t(leaf.local_data().size_bytes()); }, tree);
  return b;
}

ZeroRun train_mlp(Scheme scheme, const dax::Mesh& mesh, const MlpData& d) {
  const dax::NamedSharding replicated(mesh, dax::P()), batch(mesh, dax::P("data", dax::none));
  const auto owner = dax::optim::shard_over("data");  // each parameter's slice per device (ZeRO's partition)
  const auto x = dax::device_put(d.x, {kBatch, kIn}, batch);
  const auto y = dax::device_put(d.y, {kBatch, kOut}, batch);
  const bool split_params = scheme == Scheme::zero3 || scheme == Scheme::fsdp;
  auto place = [&](const std::vector<double>& v, const dax::Shape& shape) {
    return dax::device_put(v, shape, split_params ? owner("", replicated, shape) : replicated);
  };

  ZeroRun run;
  const int64_t base = dax::memory_stats().bytes_in_use;
  Mlp params{place(d.w1, {kIn, kHidden}), place(d.b1, {kHidden}), place(d.w2, {kHidden, kOut}), place(d.b2, {kOut})};
  dax::optim::AdamWOptions options{.lr = kLr, .weight_decay = kDecay};
  if (scheme == Scheme::zero1 || scheme == Scheme::zero2) options.state_sharding = owner;  // state split
  if (scheme == Scheme::zero2) options.grad_sharding = owner;  // gradients reduced to their owners
  dax::optim::AdamW opt(params, options);

  // The layers, each using the whole of its weights: replicated parameters are used as they are;
  // split ones (ZeRO-3, FSDP) are all-gathered for the layer (a reshard, whose pullback turns the
  // gradient's partial sums into a reduce-scatter back to the slices).
  // (A reshard of a replicated parameter to itself would be no op forward, but its pullback, the
  // reverse reshard, would all-reduce the gradient before ZeRO-2 could reduce-scatter it.)
  auto whole = [&](const Array& p) { return p.sharding().is_fully_replicated() ? p : dax::reshard(p, replicated); };
  auto hidden = [&](const Array& w1, const Array& b1) { return dax::tanh(dax::matmul(x, whole(w1)) + whole(b1)); };
  auto output = [&](const Array& h, const Array& w2, const Array& b2) { return dax::matmul(h, whole(w2)) + whole(b2); };
  auto mse = [&](const Array& o) { return dax::mean(dax::square(o - y)); };

  // ZeRO-2: every device keeps (and computes with) the whole parameters, but a gradient goes
  // straight to the device that owns its slice. The differentiated tree is the parameters' owner
  // slices; the forward reads the device's whole copy, and the backward reduce-scatters the
  // gradient's partial sums to the owners.
  auto owners_get_the_gradient = dax::custom_vjp(
      "zero2_gradient_to_owner",
      [](const Array& slice, const Array& whole_copy) {
        return std::pair{whole_copy, slice.sharding()};
      },
      [](const dax::NamedSharding& slice_sharding, const Array& g) {
        return std::tuple{dax::reshard(g, slice_sharding), std::optional<Array>{}};
      });

  std::optional<Mlp> grads;
  for (int step = 0; step < kSteps; ++step) {
    dax::comm_stats().reset();
    double loss = 0;
    if (scheme == Scheme::zero2) {
      const Mlp slices =
          dax::tree_map([&](const Array& p) { return dax::reshard(p, owner("", p.sharding(), p.shape())); },
                        params);  // a local slice: no communication
      auto loss_fn = [&](const Mlp& s) {
        const auto h = hidden(owners_get_the_gradient(s.w1, params.w1), owners_get_the_gradient(s.b1, params.b1));
        return mse(output(h, owners_get_the_gradient(s.w2, params.w2), owners_get_the_gradient(s.b2, params.b2)));
      };
      auto [l, g] = dax::value_and_grad(loss_fn)(slices);
      loss = l.to_host()[0];
      grads = std::move(g);
    } else if (scheme == Scheme::fsdp) {
      // Each layer under remat: its gathered weights are not kept for the backward, which gathers
      // them again.
      auto loss_fn = [&](const Mlp& p) {
        const auto h = dax::remat(hidden)(p.w1, p.b1);
        return mse(dax::remat(output)(h, p.w2, p.b2));
      };
      auto [l, g] = dax::value_and_grad(loss_fn)(params);
      loss = l.to_host()[0];
      grads = std::move(g);
    } else {
      auto loss_fn = [&](const Mlp& p) { return mse(output(hidden(p.w1, p.b1), p.w2, p.b2)); };
      auto [l, g] = dax::value_and_grad(loss_fn)(params);
      loss = l.to_host()[0];
      grads = std::move(g);
    }
    opt.step(params, *grads);
    run.steps.push_back(dax::comm_stats());
    run.losses.push_back(loss);
  }
  const auto state = opt.state();
  run.param_bytes = bytes_held(params);
  run.grad_bytes = bytes_held(*grads);
  run.state_bytes = bytes_held(state.mu) + bytes_held(state.nu);
  // What the device's memory counter says it holds now: exactly the parameters, the last step's
  // gradients, the two moments and the step counter (the activations and gathered weights are gone).
  run.memory_delta = dax::memory_stats().bytes_in_use - base;
  run.memory_expected = run.param_bytes + run.grad_bytes + run.state_bytes + bytes_held(state.count);
  run.params = params;
  run.state_w1 = state.mu.w1;
  return run;
}

/// The parameters' bytes on one device holding all of them.
int64_t whole_model_bytes() { return (kIn * kHidden + kHidden + kHidden * kOut + kOut) * int64_t(sizeof(double)); }

/// Checks one step's traffic: for each (kind, axes) the calls and bytes given, nothing else.
void expect_traffic(const dax::CommStats& got, const std::vector<std::tuple<std::string, int64_t, int64_t>>& want,
                    const std::string& what) {
  int64_t listed = 0;
  for (const auto& [kind, calls, bytes] : want) {
    const auto c = got.of(kind, "('data',)");
    from_jax::expect_eq(c.calls, calls, what + ": " + kind + " calls");
    from_jax::expect_eq(c.bytes, bytes, what + ": " + kind + " bytes");
    listed += c.bytes;
  }
  from_jax::expect_eq(got.total_bytes(), listed, what + ": bytes moved in all");
}

// ZeRO stages 0-3 (L27-L48): each stage keeps less on each device. Stage 1 splits the optimizer
// state, stage 2 the gradients too, stage 3 the parameters too.
std::vector<ZeroRun> zero_stages(const MlpData& data, const std::vector<double>& want_losses) {
  from_jax::block("003", "ZeRO stages 1-3 (L27-L48): what each device holds and moves");
  const auto [mesh, full] = from_jax::guide_mesh({8}, {"data"});
  const int64_t n = mesh.size(), P = whole_model_bytes();
  std::vector<ZeroRun> runs;
  for (Scheme s : {Scheme::data_parallel, Scheme::zero1, Scheme::zero2, Scheme::zero3})
    runs.push_back(train_mlp(s, mesh, data));

  from_jax::say("MLP ", kIn, " -> ", kHidden, " -> ", kOut, " (", P, " bytes of float64 parameters), AdamW, batch ",
                kBatch, " split over ", mesh);
  from_jax::say("bytes on device 0:  parameters  gradients  AdamW state  (all, vs stage 0)");
  const int64_t stage0 = runs[0].param_bytes + runs[0].grad_bytes + runs[0].state_bytes;
  for (size_t k = 0; k < runs.size(); ++k) {
    const auto& r = runs[k];
    const int64_t all = r.param_bytes + r.grad_bytes + r.state_bytes;
    from_jax::say("  ", scheme_name(Scheme(k)), ": ", r.param_bytes, "  ", r.grad_bytes, "  ", r.state_bytes, "  (",
                  all, ", ", double(stage0) / double(all), "x less)");
  }

  // Each stage's formula, with P the parameters' bytes and n the devices: AdamW's state is 2P.
  const int64_t want[4][3] = {{P, P, 2 * P}, {P, P, 2 * P / n}, {P, P / n, 2 * P / n}, {P / n, P / n, 2 * P / n}};
  for (size_t k = 0; k < runs.size(); ++k) {
    const std::string stage = "stage " + std::to_string(k);
    from_jax::expect_eq(runs[k].param_bytes, want[k][0], stage + ": parameter bytes on this device");
    from_jax::expect_eq(runs[k].grad_bytes, want[k][1], stage + ": gradient bytes on this device");
    from_jax::expect_eq(runs[k].state_bytes, want[k][2], stage + ": optimizer-state bytes on this device");
    from_jax::expect_eq(runs[k].memory_delta, runs[k].memory_expected, stage + ": bytes in use (memory_stats)");
    for (int step = 0; step < kSteps; ++step) {
      from_jax::expect_near(runs[k].losses[step], runs[0].losses[step], 1e-12 * std::abs(runs[0].losses[step]),
                            stage + ": loss at step " + std::to_string(step) + " against stage 0");
      from_jax::expect_near(relative(runs[k].losses[step], want_losses[step]), 0.0, 1e-10,
                            stage + ": loss at step " + std::to_string(step) + " against the host (relative)");
    }
  }
  from_jax::say("losses (every stage, and the host's):");
  for (int step = 0; step < kSteps; ++step)
    from_jax::say("  step ", step, ": ", runs[0].losses[step], "  host ", want_losses[step]);

  if (full) {
    // Stage 1: device r updates (and keeps the moments of) rows 4r..4r+4 of w1, and so on.
    const auto& state = *runs[1].state_w1;
    from_jax::expect_eq(state.sharding().spec(), dax::P("data", dax::none), "ZeRO-1: the spec of w1's moments");
    const int rank = dax::Runtime::current().rank();
    from_jax::expect_eq(state.local_index()[0].start, int64_t(4 * rank), "ZeRO-1: first row of w1 this device updates");
    from_jax::expect_eq(dax::to_string(state.local_shape()), std::string("(4, 64)"), "ZeRO-1: w1's moments per device");
    from_jax::expect(runs[1].params->w1.sharding().is_fully_replicated(), "ZeRO-1: parameters to stay whole");
    // Stage 3: device r holds slice r of each weight (rows 4r..4r+4 of w1), and nothing more.
    from_jax::expect_eq(runs[3].params->w1.sharding().spec(), dax::P("data", dax::none), "ZeRO-3: w1's spec");
    from_jax::expect_eq(runs[3].params->w1.local_index()[0].start, int64_t(4 * rank), "ZeRO-3: w1's slice here");
    // Stage 3's saving is linear in the devices: 1/n of everything stage 0 keeps.
    const auto total = [](const ZeroRun& r) { return r.param_bytes + r.grad_bytes + r.state_bytes; };
    from_jax::expect_eq(total(runs[0]), n * total(runs[3]), "stage 0's bytes against n times stage 3's");

    // What one step moves per device (bytes received): A = 2(n-1)/n per all-reduced byte, G =
    // (n-1)/n per gathered or scattered byte; the loss's mean adds one all-reduce of 8 bytes.
    const int64_t all_reduced = 2 * (n - 1) * P / n, gathered = (n - 1) * P / n, loss = 2 * (n - 1) / n * 8;
    for (int step = 0; step < kSteps; ++step) {
      const std::string at = " (step " + std::to_string(step) + ")";
      expect_traffic(runs[0].steps[step], {{"all_reduce", 5, all_reduced + loss}}, "data parallel" + at);
      expect_traffic(runs[1].steps[step], {{"all_reduce", 5, all_reduced + loss}, {"all_gather", 4, gathered}},
                     "ZeRO-1" + at);
      expect_traffic(runs[2].steps[step],
                     {{"all_reduce", 1, loss}, {"reduce_scatter", 4, gathered}, {"all_gather", 4, gathered}},
                     "ZeRO-2" + at);
      expect_traffic(runs[3].steps[step],
                     {{"all_reduce", 1, loss}, {"all_gather", 4, gathered}, {"reduce_scatter", 4, gathered}},
                     "ZeRO-3" + at);
    }
    from_jax::say("per step and device: data parallel all-reduces ", all_reduced,
                  " B of gradients; ZeRO-1 adds an all-gather of ", gathered,
                  " B of updated parameters; ZeRO-2 reduce-scatters the gradients (", gathered,
                  " B) instead of all-reducing them; ZeRO-3 all-gathers the parameters for the forward (", gathered,
                  " B) and reduce-scatters the gradients (", gathered, " B); each step also all-reduces the loss (",
                  loss, " B)");
  }
  return runs;
}

// FSDP (L50-L64): ZeRO-3 with the weights all-gathered again for the backward and not kept between.
void fsdp(const MlpData& data, const std::vector<double>& want_losses, const ZeroRun& zero3) {
  from_jax::block("003", "FSDP (L50-L64): all-gather forward and backward, reduce-scatter, local update");
  const auto [mesh, full] = from_jax::guide_mesh({8}, {"data"});
  const int64_t n = mesh.size(), P = whole_model_bytes();
  const ZeroRun run = train_mlp(Scheme::fsdp, mesh, data);
  from_jax::say("bytes on device 0: parameters ", run.param_bytes, ", gradients ", run.grad_bytes, ", AdamW state ",
                run.state_bytes);
  from_jax::expect_eq(run.param_bytes, P / n, "parameter bytes on this device");
  from_jax::expect_eq(run.grad_bytes, P / n, "gradient bytes on this device");
  from_jax::expect_eq(run.state_bytes, 2 * P / n, "optimizer-state bytes on this device");
  from_jax::expect_eq(run.memory_delta, run.memory_expected, "bytes in use (memory_stats)");
  for (int step = 0; step < kSteps; ++step) {
    from_jax::expect_near(run.losses[step], zero3.losses[step], 1e-12 * std::abs(zero3.losses[step]),
                          "loss at step " + std::to_string(step) + " against ZeRO-3");
    from_jax::expect_near(relative(run.losses[step], want_losses[step]), 0.0, 1e-10,
                          "loss at step " + std::to_string(step) + " against the host (relative)");
  }
  if (full) {
    const int64_t gathered = (n - 1) * P / n, loss = 2 * (n - 1) / n * 8;
    for (int step = 0; step < kSteps; ++step)
      expect_traffic(run.steps[step],
                     {{"all_reduce", 1, loss}, {"all_gather", 8, 2 * gathered}, {"reduce_scatter", 4, gathered}},
                     "FSDP (step " + std::to_string(step) + ")");
    from_jax::say("per step and device: all-gather ", gathered, " B forward and again ", gathered,
                  " B backward, reduce-scatter ", gathered, " B; the update moves nothing");
  }
}

// =============================================================================================
// Block 1 (L79): GSPMD's sketch, a weight tiled over both axes of a 2-d mesh: dimension 0 over
// mesh axis 0, dimension 1 over mesh axis 1.
void tiled_weight() {
  from_jax::block("003", "block 1: a weight tiled over a 2-d mesh (L79: create_mesh(4, 8), HloSharding::tile)");
  // The guide's mesh is 4 x 8 (32 devices); at 8 ranks it is 2 x 4, the same shape halved.
  const auto [mesh, full] = from_jax::guide_mesh({2, 4}, {"x", "y"});
  const dax::NamedSharding tiled(mesh, dax::P("x", "y"));
  const int64_t rows = 256, cols = 512, batch = 64;
  std::mt19937 rng(79);
  const auto w_host = normal_values(rows * cols, 1.0, rng), x_host = normal_values(batch * rows, 1.0, rng);
  const Array w = dax::device_put(w_host, {rows, cols}, tiled);
  from_jax::say("w ", dax::to_string(w.shape()), ": ", w.sharding());
  dax::visualize_sharding(w);

  // Each device's piece is its tile of the host's weight.
  if (w.is_addressable()) {
    const auto& box = w.local_index();
    const auto data = w.local_data();
    int64_t k = 0;
    bool same = true;
    for (int64_t r = box[0].start; r < box[0].stop; ++r)
      for (int64_t c = box[1].start; c < box[1].stop; ++c) same = same && data[k++] == w_host[r * cols + c];
    from_jax::expect(same, "this device's tile to hold the host's values");
  }
  if (full) {
    for (int dev = 0; dev < 8; ++dev) {
      const auto box = tiled.devices_indices_map(w.shape()).at(dev);
      const int64_t i = dev / 4, j = dev % 4;  // mesh coordinates
      from_jax::expect(box[0].start == 128 * i && box[0].stop == 128 * i + 128 && box[1].start == 128 * j &&
                           box[1].stop == 128 * j + 128,
                       "device " + std::to_string(dev) + " to hold rows 128i.., columns 128j.. of w");
    }
    from_jax::expect_eq(dax::to_string(w.local_shape()), std::string("(128, 128)"), "a tile's shape");
  }

  // The text's example of inserted collectives: a replicated activation times the tiled weight,
  // with the result wanted whole on every device. dax picks the collectives as XLA would.
  const dax::NamedSharding replicated(mesh, dax::P());
  const Array x = dax::device_put(x_host, {batch, rows}, replicated);
  {  // the rule's choice (explain_matmul ranks every candidate; its header and the chosen one)
    std::istringstream lines(dax::explain_matmul(x, w, replicated));
    int k = 0;
    for (std::string line; std::getline(lines, line); ++k)
      if (k < 2 || line.rfind("* ", 0) == 0) from_jax::say(line);
  }
  dax::comm_stats().reset();
  const Array out = dax::matmul(x, w, replicated);
  const auto stats = dax::comm_stats();
  for (const auto& [key, c] : stats.entries())
    from_jax::say("  ", key.first, " over ", key.second, ": ", c.calls, " call(s), ", c.bytes, " B");
  const auto got = out.to_host();
  const auto want = host_matmul(x_host, w_host, batch, rows, cols);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  from_jax::expect_near(worst, 0.0, 1e-10, "x @ w against the host");
  from_jax::expect(out.sharding().is_fully_replicated(), "the result to be whole on every device");
  if (full) {
    // Each device multiplies its (64, 128) columns of x by its tile, a partial sum over 'x' of
    // its 128 output columns: one all-reduce over 'x', then one all-gather over 'y' of the columns.
    const int64_t piece = batch * (cols / 4) * 8;
    const auto reduced = stats.of("all_reduce", "('x',)"), gathered = stats.of("all_gather", "('y',)");
    from_jax::expect_eq(reduced.calls, int64_t(1), "all-reduces over 'x'");
    from_jax::expect_eq(reduced.bytes, 2 * (2 - 1) * piece / 2, "bytes all-reduced over 'x'");
    from_jax::expect_eq(gathered.calls, int64_t(1), "all-gathers over 'y'");
    from_jax::expect_eq(gathered.bytes, (4 - 1) * piece, "bytes all-gathered over 'y'");
    from_jax::expect_eq(stats.total_bytes(), reduced.bytes + gathered.bytes, "bytes moved in all");
  }
}

// =============================================================================================
// 3-d parallelism (L88-L103): data x pipeline x tensor on a (2, 2, 2) mesh. The model is two
// residual MLP blocks, h + tanh(h w1 + b1) w2 + b2, one per pipeline stage; within a stage w1 is
// split by columns and w2 by rows over 'model' (Megatron: one all-reduce of the block's output);
// the batch of 16 is split over 'data', and each data shard runs through the pipeline in 4
// micro-batches of 2 rows (GPipe: the stages pass activations with ppermute).

struct Stack {
  Array w1, b1, w2, b2;  // (stages, d, f), (stages, f), (stages, f, d), (stages, d)
};
DAX_TREE(Stack, w1, b1, w2, b2)

constexpr int64_t kStages = 2, kRows = 16, kDim = 8, kFfn = 16, kMicro = 4;

struct StackData {
  std::vector<double> x, y, w1, b1, w2, b2;
};

/// The stack's loss and gradients on the host (plain loops), in the parameters' row-major layout.
double host_stack(const StackData& d, std::vector<std::vector<double>>* grads) {
  std::vector<HostMatrix> hs{d.x}, us;  // each stage's input, and its tanh activations
  for (int64_t s = 0; s < kStages; ++s) {
    const HostMatrix w1(d.w1.begin() + s * kDim * kFfn, d.w1.begin() + (s + 1) * kDim * kFfn);
    const HostMatrix w2(d.w2.begin() + s * kFfn * kDim, d.w2.begin() + (s + 1) * kFfn * kDim);
    HostMatrix u = host_matmul(hs.back(), w1, kRows, kDim, kFfn);
    for (int64_t i = 0; i < kRows; ++i)
      for (int64_t j = 0; j < kFfn; ++j) u[i * kFfn + j] = std::tanh(u[i * kFfn + j] + d.b1[s * kFfn + j]);
    HostMatrix h = host_matmul(u, w2, kRows, kFfn, kDim);
    for (int64_t i = 0; i < kRows; ++i)
      for (int64_t j = 0; j < kDim; ++j) h[i * kDim + j] += hs.back()[i * kDim + j] + d.b2[s * kDim + j];
    us.push_back(u);
    hs.push_back(h);
  }
  double loss = 0;
  HostMatrix g(kRows * kDim);
  for (int64_t i = 0; i < kRows * kDim; ++i) {
    const double e = hs.back()[i] - d.y[i];
    loss += e * e;
    g[i] = 2 * e / double(kRows * kDim);
  }
  if (grads) {
    grads->assign(4, {});
    (*grads)[0].assign(d.w1.size(), 0.0), (*grads)[1].assign(d.b1.size(), 0.0);
    (*grads)[2].assign(d.w2.size(), 0.0), (*grads)[3].assign(d.b2.size(), 0.0);
    for (int64_t s = kStages; s-- > 0;) {
      const HostMatrix w1(d.w1.begin() + s * kDim * kFfn, d.w1.begin() + (s + 1) * kDim * kFfn);
      const HostMatrix w2(d.w2.begin() + s * kFfn * kDim, d.w2.begin() + (s + 1) * kFfn * kDim);
      const HostMatrix gw2 = host_matmul(us[s], g, kFfn, kRows, kDim, true);
      HostMatrix gu = host_matmul(g, w2, kRows, kDim, kFfn, false, true);
      for (int64_t i = 0; i < kRows; ++i)
        for (int64_t j = 0; j < kFfn; ++j) gu[i * kFfn + j] *= 1 - us[s][i * kFfn + j] * us[s][i * kFfn + j];
      const HostMatrix gw1 = host_matmul(hs[s], gu, kDim, kRows, kFfn, true);
      for (int64_t e = 0; e < kDim * kFfn; ++e) (*grads)[0][s * kDim * kFfn + e] = gw1[e];
      for (int64_t e = 0; e < kFfn * kDim; ++e) (*grads)[2][s * kFfn * kDim + e] = gw2[e];
      for (int64_t i = 0; i < kRows; ++i) {
        for (int64_t j = 0; j < kFfn; ++j) (*grads)[1][s * kFfn + j] += gu[i * kFfn + j];
        for (int64_t j = 0; j < kDim; ++j) (*grads)[3][s * kDim + j] += g[i * kDim + j];
      }
      const HostMatrix back = host_matmul(gu, w1, kRows, kFfn, kDim, false, true);
      for (int64_t e = 0; e < kRows * kDim; ++e) g[e] += back[e];  // the residual's path plus the MLP's
    }
  }
  return loss / double(kRows * kDim);
}

void three_d() {
  from_jax::block("003", "3-D parallelism (L88-L103): data x pipeline x tensor on a (2, 2, 2) mesh");
  const auto [mesh, full] = from_jax::guide_mesh({2, 2, 2}, {"data", "stage", "model"});
  auto& rt = dax::Runtime::current();
  // dax takes a gradient through shard_map only on a mesh of every rank (manual/shard_map.hpp); on
  // a lone device of a larger job (2 to 7 ranks here) the training step is out of reach.
  const bool trainable = mesh.size() == rt.size();
  const int64_t n_data = mesh.shape()[0];
  const int64_t mb = kRows / n_data / kMicro;  // rows per micro-batch

  std::mt19937 rng(88);
  StackData d;
  d.x = normal_values(kRows * kDim, 1.0, rng);
  d.y = normal_values(kRows * kDim, 1.0, rng);
  d.w1 = normal_values(kStages * kDim * kFfn, 1.0 / std::sqrt(double(kDim)), rng);
  d.b1 = normal_values(kStages * kFfn, 0.1, rng);
  d.w2 = normal_values(kStages * kFfn * kDim, 1.0 / std::sqrt(double(kFfn)), rng);
  d.b2 = normal_values(kStages * kDim, 0.1, rng);

  using dax::none;
  const dax::P w1_spec("stage", none, "model"), b1_spec("stage", "model"), w2_spec("stage", "model", none),
      b2_spec("stage", none), batch_spec("data", none);
  auto put = [&](const std::vector<double>& v, const dax::Shape& shape, const dax::P& spec) {
    return dax::device_put(v, shape, dax::NamedSharding(mesh, spec));
  };
  Stack params{put(d.w1, {kStages, kDim, kFfn}, w1_spec), put(d.b1, {kStages, kFfn}, b1_spec),
               put(d.w2, {kStages, kFfn, kDim}, w2_spec), put(d.b2, {kStages, kDim}, b2_spec)};
  const Array x = put(d.x, {kRows, kDim}, batch_spec), y = put(d.y, {kRows, kDim}, batch_spec);

  // One device's program: its stage's block(s), its columns / rows of them, its data shard's
  // micro-batches. Every stage runs every time step's ppermute, and each stage's activations are
  // typed as varying over ('data', 'stage'), as autodiff's replication typing wants them.
  auto pipeline = dax::shard_map(
      [&](const Array& w1, const Array& b1, const Array& w2, const Array& b2, const Array& xb, const Array& yb) {
        const int stage = dax::axis_index("stage"), stages = dax::axis_size("stage");
        const int64_t blocks = w1.shape()[0];  // blocks on this stage: 2 / stages
        // The weights are the same on both data shards; typing them as varying over 'data' once
        // makes their gradient one all-reduce over 'data' per array, not one per use.
        const Array w1d = dax::pvary(w1, "data"), b1d = dax::pvary(b1, "data"), w2d = dax::pvary(w2, "data"),
                    b2d = dax::pvary(b2, "data");
        auto block = [&](const Array& h, int64_t k) {
          const int64_t f = w1.shape()[2];  // this device's columns of w1 (rows of w2)
          const auto a = dax::reshape(dax::slice(w1d, {k, 0, 0}, {k + 1, kDim, f}), {kDim, f});
          const auto c = dax::reshape(dax::slice(b1d, {k, 0}, {k + 1, f}), {f});
          const auto e = dax::reshape(dax::slice(w2d, {k, 0, 0}, {k + 1, f, kDim}), {f, kDim});
          const auto g = dax::reshape(dax::slice(b2d, {k, 0}, {k + 1, kDim}), {kDim});
          const auto u = dax::tanh(dax::matmul(h, a) + c);       // column-parallel: this device's f columns
          return h + dax::psum(dax::matmul(u, e), "model") + g;  // row-parallel, summed over 'model'
        };
        std::vector<std::pair<int, int>> next;
        for (int s = 0; s + 1 < stages; ++s) next.push_back({s, s + 1});
        const dax::AxisNames data_stage = dax::axes("data", "stage");
        // dax's backward runs a collective's transpose only on the devices where the collective's
        // input was on the tape and its result got a cotangent. Here the first stage drops what it
        // receives and the second starts from zeros, so the stages would disagree on which reverse
        // ppermutes to run; the zero-weighted terms below put every ppermute's input on the tape
        // and every received value on the path to the loss, on every device.
        auto carry =
            dax::pvary(dax::zeros<double>({mb, kDim}, dax::local_sharding()), data_stage) + dax::sum(b2d) * 0.0;
        auto sse = dax::pvary(dax::zeros<double>({}, dax::local_sharding()), data_stage);
        for (int64_t t = 0; t < kMicro + stages - 1; ++t) {
          const int64_t m = t - stage;  // the micro-batch this stage works on now, if any
          if (m >= 0 && m < kMicro) {
            if (stage == 0) carry = dax::slice(xb, {m * mb, 0}, {(m + 1) * mb, kDim});
            for (int64_t k = 0; k < blocks; ++k) carry = block(carry, k);
            if (stage == stages - 1)
              sse = sse + dax::sum(dax::square(carry - dax::slice(yb, {m * mb, 0}, {(m + 1) * mb, kDim})));
          }
          carry = dax::ppermute(carry, "stage", next);
          sse = sse + dax::sum(carry) * 0.0;
        }
        return dax::psum(sse, data_stage);  // the last stage's sums, over the data shards
      },
      mesh, {w1_spec, b1_spec, w2_spec, b2_spec, batch_spec, batch_spec}, dax::P());
  auto loss_fn = [&](const Stack& p) { return pipeline(p.w1, p.b1, p.w2, p.b2, x, y) * (1.0 / double(kRows * kDim)); };

  std::vector<std::vector<double>> want_grads;
  const double want_loss = host_stack(d, &want_grads);
  if (!trainable) {
    const double loss = loss_fn(params).to_host()[0];
    from_jax::say("loss ", loss, " (host ", want_loss, "); a lone device of ", rt.size(),
                  " ranks: the gradient through shard_map needs a mesh of every rank, so the forward only");
    from_jax::expect_near(relative(loss, want_loss), 0.0, 1e-12, "the loss against the host (relative)");
    return;
  }

  dax::optim::AdamW opt(params, {.lr = kLr, .weight_decay = kDecay});
  dax::comm_stats().reset();
  auto [loss, grads] = dax::value_and_grad(loss_fn)(params);
  opt.step(params, grads);
  const dax::CommStats step = dax::comm_stats();

  const double got_loss = loss.to_host()[0];
  from_jax::say("step 1: loss ", got_loss, " (host ", want_loss, ")");
  from_jax::expect_near(relative(got_loss, want_loss), 0.0, 1e-12, "step 1's loss against the host (relative)");
  const std::vector<std::vector<double>> got_grads{grads.w1.to_host(), grads.b1.to_host(), grads.w2.to_host(),
                                                   grads.b2.to_host()};
  const char* names[4] = {"w1", "b1", "w2", "b2"};
  double worst = 0;
  for (int k = 0; k < 4; ++k)
    for (size_t i = 0; i < want_grads[k].size(); ++i) {
      const double err = std::abs(got_grads[k][i] - want_grads[k][i]);
      worst = std::max(worst, err);
      if (err > 1e-12)
        from_jax::expect_near(got_grads[k][i], want_grads[k][i], 1e-12, std::string("gradient of ") + names[k]);
    }
  from_jax::say("gradients: largest difference from the host's ", worst, " (allowed 1e-12)");
  from_jax::expect_eq(grads.w1.sharding(), params.w1.sharding(), "w1's gradient sharding");

  // The update, then the loss of the updated model.
  HostAdamW adam(kLr, kDecay);
  StackData d2 = d;
  adam.step({&d2.w1, &d2.b1, &d2.w2, &d2.b2}, want_grads);
  const double want_loss2 = host_stack(d2, nullptr), got_loss2 = loss_fn(params).to_host()[0];
  from_jax::say("after one AdamW step: loss ", got_loss2, " (host ", want_loss2, ")");
  from_jax::expect_near(relative(got_loss2, want_loss2), 0.0, 1e-12, "the updated model's loss against the host");

  for (const auto& [key, c] : step.entries())
    from_jax::say("  ", key.first, " over ", key.second, ": ", c.calls, " call(s), ", c.bytes, " B (device 0)");
  if (full) {
    // What one device holds: its stage's block, its half of the block's columns / rows.
    from_jax::expect_eq(dax::to_string(params.w1.local_shape()), std::string("(1, 8, 8)"), "w1's piece");
    from_jax::expect_eq(dax::to_string(params.w2.local_shape()), std::string("(1, 8, 8)"), "w2's piece");
    const auto coords = mesh.coords(rt.rank());
    const int64_t stage = coords[1];
    from_jax::expect_eq(params.w1.local_index()[0].start, stage, "the stage's block this device holds");
    from_jax::expect_eq(params.w1.local_index()[2].start, 8 * coords[2], "w1's columns this device holds");
    // What one training step moves per device (float64, every axis of size 2):
    const int64_t act = mb * kDim * 8, ticks = kMicro + kStages - 1;
    const int64_t blocks_bytes = (kDim * kFfn / 2 + kFfn / 2 + kFfn / 2 * kDim + kDim) * 8;
    // 'model': Megatron's all-reduce of each micro-batch's block output (forward), and on the
    // second stage of its input's gradient (backward; the first stage's input is the data).
    const auto model = step.of("all_reduce", "('model',)");
    from_jax::expect_eq(model.bytes, (stage == 0 ? 1 : 2) * kMicro * act, "'model' all-reduce bytes");
    // 'stage': activations forward into stage 1 and their gradients back into stage 0, one per time step.
    const auto passed = step.of("ppermute", "('stage',)");
    from_jax::expect_eq(passed.bytes, ticks * act, "'stage' ppermute bytes");
    // 'data': one all-reduce of each weight block's gradient.
    const auto data = step.of("all_reduce", "('data',)");
    from_jax::expect_eq(data.bytes, blocks_bytes, "'data' all-reduce bytes");
    from_jax::expect_eq(data.calls, int64_t(4), "'data' all-reduces");
    // The loss: one all-reduce of one double over the 4 devices of ('data', 'stage'), counted in whole
    // elements: 2 * 3 / 4 -> 1 element, 8 B.
    const auto total = step.of("all_reduce", "('data', 'stage')");
    from_jax::expect_eq(total.bytes, int64_t(2 * 3 / 4 * 8), "the loss's all-reduce bytes");
    from_jax::expect_eq(step.total_bytes(), model.bytes + passed.bytes + data.bytes + total.bytes, "bytes in all");
  }
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  int blocks = 0;
  const MlpData data = mlp_data();
  const std::vector<double> want_losses = host_mlp_losses(data);
  const auto runs = zero_stages(data, want_losses);
  ++blocks;
  fsdp(data, want_losses, runs[3]), ++blocks;
  tiled_weight(), ++blocks;
  three_d(), ++blocks;
  return from_jax::finish("zero_and_3d", blocks);
}
