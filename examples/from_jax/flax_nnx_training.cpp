// flax_nnx_training: guide 004, "SPMD: automatic sharding with jax.jit" (Flax NNX) — its
// "Implementation Guide" (the device meshes, a table of shardings, a model's parameters sharded by
// rules on their paths, the sharded train step, Adam and the training loop) and the blocks about
// what training moves: with_sharding_constraint inside a step, the traffic of data, tensor and
// FSDP parallelism per step, and a profile of a step. The guide's other blocks are in flax_nnx.cpp.
//
// Run: mpirun -np 8 --oversubscribe examples/from_jax/from_jax_flax_nnx_training   (8 devices)
//      examples/from_jax/from_jax_flax_nnx_training                                  (one device)
//
// Checks: the model (embeddings, six residual MLP blocks of width 512, a classifier) against the
// same network in double on the host: loss, accuracy and every gradient, then Adam's first update
// from those gradients, and that training lowers the loss. At 8 ranks also each parameter's
// sharding and piece by its path, the bytes each step moves against the textbook formulas
// (dax::comm_stats), and a Chrome trace of a step (dax::profile) read back: its collectives are
// the ones comm_stats counted, on every rank.
#include "guide.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Array = dax::DistArray<float>;
using Ids = dax::DistArray<int32_t>;
using Host = std::vector<double>;
using dax::P;
using from_jax::expect;
using from_jax::expect_eq;
using from_jax::expect_near;
using from_jax::say;

const std::string guide = "004";

/// The block `box` of a row-major host array of `shape`.
template <class T>
std::vector<T> host_block(const std::vector<T>& global, const dax::Shape& shape, const dax::Box& box) {
  std::vector<T> out(dax::numel(box));
  dax::for_each_in_box(shape, box, [&](int64_t k, int64_t flat) { out[k] = global[flat]; });
  return out;
}

/// The largest difference between this device's piece of x and the same block of `want`, over
/// the largest |want| in that block (0 where the device holds nothing).
double piece_error(const Array& x, const Host& want) {
  if (!x.is_addressable()) return 0;
  const auto got = x.local_to_host();
  const auto ref = host_block(want, x.shape(), x.local_index());
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, std::abs(got[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return diff / scale;
}

std::string shape_of(const dax::Shape& s) { return dax::to_string(s); }
std::string spec_of(const dax::DistArray<float>& x) { return dax::to_string(x.sharding().spec()); }

/// Bytes an all-reduce of `elements` floats over n devices receives per device, as comm_stats
/// counts a reshard's: 2 (n-1)/n of the elements (rounded down), 4 bytes each.
int64_t all_reduce_bytes(int64_t elements, int64_t n) { return 2 * (n - 1) * elements / n * 4; }

// ---------------------------------------------------------------------------------------------
// Step 1 and 2: meshes and a table of shardings

struct Meshes {
  from_jax::GuideMesh data, hybrid, fsdp;
};

Meshes block_6_meshes() {
  from_jax::block(guide, "block 6: Step 1: create the device meshes");
  const int num_devices = dax::Runtime::current().size();
  say("Devices: ", num_devices);
  // Strategy 1, pure data parallelism; strategy 3, FSDP: every device on one axis.
  const auto data = from_jax::guide_mesh({num_devices}, {"data"});
  const auto fsdp = from_jax::guide_mesh({num_devices}, {"fsdp"});
  // Strategy 2, (4 data, 2 model), needs 8 devices; with fewer each rank runs it on its own device.
  const auto hybrid = from_jax::guide_mesh({4, 2}, {"data", "model"});
  say("strategy 1: ", data.mesh, "\nstrategy 2: ", hybrid.mesh, "\nstrategy 3: ", fsdp.mesh);
  expect_eq(data.mesh.size(), num_devices, "devices in the data mesh");
  expect(data.mesh.devices() == fsdp.mesh.devices(), "strategies 1 and 3 use the same devices in the same order");
  for (int d = 0; d < num_devices; ++d) expect_eq(data.mesh.device_at({d}), d, "device order");
  if (hybrid.full)
    for (int d = 0; d < 8; ++d) expect_eq(hybrid.mesh.devices()[d], d, "the (4, 2) mesh holds the first 8 devices, row-major");
  return {data, hybrid, fsdp};
}

using Shardings = std::map<std::string, dax::NamedSharding>;

Shardings create_sharding_specs(const dax::Mesh& mesh) {
  return {{"data_parallel", dax::NamedSharding(mesh, P("data", dax::none))},
          {"model_parallel", dax::NamedSharding(mesh, P(dax::none, "model"))},
          {"hybrid", dax::NamedSharding(mesh, P("data", "model"))},
          {"replicated", dax::NamedSharding(mesh, P())}};
}

Shardings block_7_sharding_specs(const from_jax::GuideMesh& hybrid) {
  from_jax::block(guide, "block 7: Step 2: create_sharding_specs(mesh)");
  const Shardings shardings = create_sharding_specs(hybrid.mesh);
  const std::map<std::string, std::pair<std::string, std::string>> want{
      {"data_parallel", {"P('data', None)", "(32, 512)"}},
      {"model_parallel", {"P(None, 'model')", "(128, 256)"}},
      {"hybrid", {"P('data', 'model')", "(32, 256)"}},
      {"replicated", {"P()", "(128, 512)"}}};
  expect_eq(shardings.size(), want.size(), "entries");
  for (const auto& [name, s] : shardings) {
    say("  ", name, ": ", s, ", a (128, 512) array in pieces of ", shape_of(s.shard_shape({128, 512})));
    expect_eq(dax::to_string(s.spec()), want.at(name).first, name + " spec");
    if (hybrid.full) expect_eq(shape_of(s.shard_shape({128, 512})), want.at(name).second, name + " piece");
  }
  return shardings;
}

// ---------------------------------------------------------------------------------------------
// Step 3: the model. The guide's MyTransformer is not defined there; this one has its parameter
// names: an embedding table, residual MLP blocks of two Dense layers, a Dense classifier.

struct Dense {
  Array kernel, bias;
};
DAX_TREE(Dense, kernel, bias)
struct Embed {
  Array embedding;
};
DAX_TREE(Embed, embedding)
struct Block {
  Dense ffn_in, ffn_out;
};
DAX_TREE(Block, ffn_in, ffn_out)
struct MyTransformer {
  Embed embed;
  std::vector<Block> layers;
  Dense head;
};
DAX_TREE(MyTransformer, embed, layers, head)

constexpr int64_t d_model = 512, vocab = 64, classes = 10, batch_size = 8, seq_len = 2;
constexpr int num_layers = 6;

MyTransformer init_model(const dax::NamedSharding& s) {
  const auto key = dax::random::key(0);  // nnx.Rngs(0)
  uint32_t next = 0;
  auto normal = [&](dax::Shape shape, float stddev) {
    return dax::random::normal<float>(dax::random::fold_in(key, next++), shape, s, 0.0f, stddev);
  };
  auto dense = [&](int64_t in, int64_t out) { return Dense{normal({in, out}, 0.7f / std::sqrt(float(in))), normal({out}, 0.02f)}; };
  MyTransformer m{Embed{normal({vocab, d_model}, 1.0f)}, {}, dense(d_model, classes)};
  for (int l = 0; l < num_layers; ++l) m.layers.push_back(Block{dense(d_model, d_model), dense(d_model, d_model)});
  return m;
}

/// The model's forward: token ids (batch, seq) -> class logits (batch, classes).
Array apply(const MyTransformer& m, const Ids& ids) {
  const int64_t b = ids.shape()[0], s = ids.shape()[1];
  Array h = dax::reshape(dax::take(m.embed.embedding, ids, 0), {b * s, d_model});
  for (const Block& layer : m.layers) {
    const Array r = dax::relu(dax::matmul(h, layer.ffn_in.kernel) + layer.ffn_in.bias);
    h = h + (dax::matmul(r, layer.ffn_out.kernel) + layer.ffn_out.bias);
  }
  const Array pooled = dax::mean(dax::reshape(h, {b, s, d_model}), {1});
  return dax::matmul(pooled, m.head.kernel) + m.head.bias;
}

/// The guide's shard_params: kernels with more than 256 rows split by columns over 'model', the
/// rest (embeddings, biases, small kernels) replicated.
MyTransformer shard_params(const MyTransformer& params, const Shardings& shardings) {
  return dax::tree_map_with_path([&](const std::string& path, const Array& array) {
    if (path.find("kernel") != std::string::npos && array.shape()[0] > 256)
      return dax::device_put(array, shardings.at("model_parallel"));
    return dax::device_put(array, shardings.at("replicated"));
  }, params);
}

// The same network in double on the host, with its gradients by hand.
using HostParams = std::map<std::string, Host>;

HostParams to_host_params(const MyTransformer& m) {
  HostParams out;
  dax::tree_for_each_with_path([&](const std::string& path, const Array& p) {
    const auto v = p.to_host();
    out[path] = Host(v.begin(), v.end());
  }, m);
  return out;
}

// c (n, m) += a (n, k) @ b (k, m), with a and b read through strides so that transposes are free.
void host_gemm(const double* a, int64_t ars, int64_t acs, const double* b, int64_t brs, int64_t bcs, double* c,
               int64_t n, int64_t k, int64_t m) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double aip = a[i * ars + p * acs];
      for (int64_t j = 0; j < m; ++j) c[i * m + j] += aip * b[p * brs + j * bcs];
    }
}
Host mm(const Host& a, const Host& b, int64_t n, int64_t k, int64_t m) {  // a @ b
  Host c(n * m, 0.0);
  host_gemm(a.data(), k, 1, b.data(), m, 1, c.data(), n, k, m);
  return c;
}
Host mm_tn(const Host& a, const Host& b, int64_t n, int64_t k, int64_t m) {  // a (n, k)^T @ b (n, m)
  Host c(k * m, 0.0);
  host_gemm(a.data(), 1, k, b.data(), m, 1, c.data(), k, n, m);
  return c;
}
Host mm_nt(const Host& a, const Host& b, int64_t n, int64_t m, int64_t k) {  // a (n, m) @ b (k, m)^T
  Host c(n * k, 0.0);
  host_gemm(a.data(), m, 1, b.data(), 1, m, c.data(), n, m, k);
  return c;
}
void add_bias(Host& x, const Host& bias) {
  for (size_t i = 0; i < x.size(); ++i) x[i] += bias[i % bias.size()];
}
Host column_sums(const Host& x, int64_t cols) {
  Host s(cols, 0.0);
  for (size_t i = 0; i < x.size(); ++i) s[i % cols] += x[i];
  return s;
}

struct HostStep {
  double loss = 0, accuracy = 0;
  HostParams grads;
};

HostStep host_step(const HostParams& p, const std::vector<int32_t>& ids, const std::vector<int32_t>& labels) {
  const int64_t b = batch_size, s = seq_len, t = b * s, d = d_model, c = classes;
  HostStep out;
  const Host& table = p.at("embed/embedding");
  Host h(t * d);
  for (int64_t i = 0; i < t; ++i) std::copy_n(&table[ids[i] * d], d, &h[i * d]);
  std::vector<Host> inputs, pre;
  for (int l = 0; l < num_layers; ++l) {
    const std::string n = "layers/" + std::to_string(l) + "/";
    Host a = mm(h, p.at(n + "ffn_in/kernel"), t, d, d);
    add_bias(a, p.at(n + "ffn_in/bias"));
    Host r = a;
    for (double& e : r) e = std::max(e, 0.0);
    Host o = mm(r, p.at(n + "ffn_out/kernel"), t, d, d);
    add_bias(o, p.at(n + "ffn_out/bias"));
    inputs.push_back(h), pre.push_back(std::move(a));
    for (int64_t i = 0; i < t * d; ++i) h[i] += o[i];
  }
  Host pooled(b * d, 0.0);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < d; ++j) pooled[(i / s) * d + j] += h[i * d + j] / s;
  Host logits = mm(pooled, p.at("head/kernel"), b, d, c);
  add_bias(logits, p.at("head/bias"));
  Host dlogits(b * c);
  for (int64_t i = 0; i < b; ++i) {
    const double* z = &logits[i * c];
    const double zmax = *std::max_element(z, z + c);
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(z[j] - zmax);
    out.loss += (zmax + std::log(sum) - z[labels[i]]) / b;
    out.accuracy += (std::max_element(z, z + c) - z == labels[i]) ? 1.0 / b : 0.0;
    for (int64_t j = 0; j < c; ++j) dlogits[i * c + j] = (std::exp(z[j] - zmax) / sum - (j == labels[i])) / b;
  }
  auto& g = out.grads;
  g["head/kernel"] = mm_tn(pooled, dlogits, b, d, c);
  g["head/bias"] = column_sums(dlogits, c);
  const Host dpooled = mm_nt(dlogits, p.at("head/kernel"), b, c, d);
  Host dh(t * d);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < d; ++j) dh[i * d + j] = dpooled[(i / s) * d + j] / s;
  for (int l = num_layers - 1; l >= 0; --l) {
    const std::string n = "layers/" + std::to_string(l) + "/";
    Host r = pre[l];
    for (double& e : r) e = std::max(e, 0.0);
    g[n + "ffn_out/kernel"] = mm_tn(r, dh, t, d, d);
    g[n + "ffn_out/bias"] = column_sums(dh, d);
    Host da = mm_nt(dh, p.at(n + "ffn_out/kernel"), t, d, d);
    for (int64_t i = 0; i < t * d; ++i) da[i] = pre[l][i] > 0 ? da[i] : 0.0;
    g[n + "ffn_in/kernel"] = mm_tn(inputs[l], da, t, d, d);
    g[n + "ffn_in/bias"] = column_sums(da, d);
    const Host back = mm_nt(da, p.at(n + "ffn_in/kernel"), t, d, d);
    for (int64_t i = 0; i < t * d; ++i) dh[i] += back[i];
  }
  Host dtable(vocab * d, 0.0);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < d; ++j) dtable[ids[i] * d + j] += dh[i * d + j];
  g["embed/embedding"] = std::move(dtable);
  return out;
}

MyTransformer block_8_shard_params(const Shardings& shardings, const from_jax::GuideMesh& hybrid,
                                   HostParams& host_params) {
  from_jax::block(guide, "block 8: Step 3: shard the model's parameters by their paths");
  // nnx.split gives the parameters on one device; here they start replicated on the mesh.
  const MyTransformer model = init_model(shardings.at("replicated"));
  host_params = to_host_params(model);
  dax::comm_stats().reset();
  const MyTransformer params_sharded = shard_params(model, shardings);
  // Replicated to split is a slice of what each device holds: nothing moves.
  expect_eq(dax::comm_stats().total_bytes(), int64_t{0}, "bytes moved by shard_params");
  int64_t split = 0;
  dax::tree_for_each_with_path([&](const std::string& path, const Array& p) {
    const bool kernel = path.find("kernel") != std::string::npos && p.shape()[0] > 256;
    if (path.starts_with("layers/") && !path.starts_with("layers/0/")) return;  // the other layers print alike
    say("  ", path, " ", shape_of(p.shape()), " -> ", spec_of(p), ", piece ", shape_of(p.local_shape()));
    expect_eq(spec_of(p), std::string(kernel ? "P(None, 'model')" : "P()"), path + " spec");
    if (hybrid.full && kernel)
      expect_eq(p.local_shape()[1] * 2, p.shape()[1], path + ": half the columns");
    split += kernel;
  }, params_sharded);
  expect_eq(split, int64_t{3}, "kernels split among the printed ones (layer 0's two and the head's)");
  dax::tree_for_each_with_path([&](const std::string& path, const Array& p) {
    expect_eq(piece_error(p, host_params.at(path)), 0.0, path + ": values unchanged");
  }, params_sharded);
  return params_sharded;  // nnx.merge: the tree is the model
}

// ---------------------------------------------------------------------------------------------
// Step 4 and 5: the train step, the optimizer, the loop

struct Batch {
  Ids input_ids;
  Ids label;
};
DAX_TREE(Batch, input_ids, label)

/// The loss and the accuracy of the model on a batch (the guide's loss_fn, with has_aux).
std::pair<Array, Array> loss_fn(const MyTransformer& model, const Batch& batch) {
  const Array logits = apply(model, batch.input_ids);
  const Array labels_onehot = dax::one_hot<float>(batch.label, classes);
  const Array loss = -dax::mean(dax::sum(labels_onehot * dax::log_softmax(logits, -1), {1}));
  const auto predictions = dax::argmax(logits, 1);
  const Array accuracy = dax::mean(dax::astype<float>(predictions == dax::astype<int64_t>(batch.label)));
  return {loss, accuracy};
}

/// nnx.Optimizer: the model and its optimizer together.
struct TrainState {
  MyTransformer model;
  dax::optim::AdamW<MyTransformer> tx;
};

struct StepOutput {
  Array loss;
  std::map<std::string, Array> metrics;
};

auto create_train_step(const Shardings& shardings) {
  const dax::Mesh mesh = shardings.at("replicated").mesh();
  const dax::NamedSharding batch_rows(mesh, P("data")), replicated = shardings.at("replicated");
  return [=](TrainState& state, const Batch& batch_in) {
    // in_shardings: the batch split over 'data' (P('data', None) for the ids, P('data') for the
    // labels, which have one dimension); the state keeps its parameters' own shardings.
    const Batch batch = dax::tree_map([&](const auto& x) { return dax::with_sharding_constraint(x, batch_rows); }, batch_in);
    auto [value, grads] = dax::value_and_grad([&](const MyTransformer& m) { return loss_fn(m, batch); })(state.model);
    state.tx.step(state.model, grads);
    // out_shardings: replicated.
    return StepOutput{dax::reshard(value.first, replicated), {{"accuracy", dax::reshard(value.second, replicated)}}};
  };
}

/// The guide's data_loader: two batches of token ids and labels, made on the host.
std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> host_batches() {
  std::mt19937 gen(9);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1), label(0, classes - 1);
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> out(2);
  for (auto& [ids, labels] : out) {
    for (int64_t i = 0; i < batch_size * seq_len; ++i) ids.push_back(token(gen));
    for (int64_t i = 0; i < batch_size; ++i) labels.push_back(label(gen));
  }
  return out;
}

Batch put_batch(const std::vector<int32_t>& ids, const std::vector<int32_t>& labels, const dax::NamedSharding& s) {
  return Batch{dax::device_put(ids, {batch_size, seq_len}, s), dax::device_put(labels, {batch_size}, s)};
}

MyTransformer block_9_train_step(const MyTransformer& model, const Shardings& shardings, const HostParams& host_params) {
  from_jax::block(guide, "block 9: Step 4: create_train_step (value_and_grad with aux)");
  const auto data = host_batches();
  const dax::NamedSharding rows(shardings.at("replicated").mesh(), P("data"));
  const Batch batch = put_batch(data[0].first, data[0].second, rows);
  // The gradient the train step takes, checked against the host.
  auto [value, grads] = dax::value_and_grad([&](const MyTransformer& m) { return loss_fn(m, batch); })(model);
  const HostStep want = host_step(host_params, data[0].first, data[0].second);
  const float loss = value.first.to_host()[0], accuracy = value.second.to_host()[0];
  say("loss ", loss, " (host ", want.loss, "), accuracy ", accuracy, " (host ", want.accuracy, ")");
  expect_near(loss, want.loss, 1e-5 * std::abs(want.loss), "loss");
  expect_near(accuracy, want.accuracy, 1e-6, "accuracy");
  expect(value.first.sharding().is_fully_replicated() && value.second.sharding().is_fully_replicated(),
         "loss and accuracy replicated");
  double worst = 0;
  dax::tree_for_each_with_path([&](const std::string& path, const Array& g, const Array& p) {
    expect(g.sharding() == p.sharding(), path + ": the gradient has the parameter's sharding");
    const double e = piece_error(g, want.grads.at(path));
    worst = std::max(worst, e);
    expect(e < 1e-4, path + ": gradient within 1e-4 (relative) of the host's, got " + std::to_string(e));
  }, grads, model);
  say("gradients of ", dax::tree_size(grads), " parameters: largest relative difference from the host ", worst);
  return grads;
}

void block_10_training_loop(const MyTransformer& model, const MyTransformer& grads0, const Shardings& shardings) {
  from_jax::block(guide, "block 10: Step 5: Adam and the training loop");
  const float lr = 1e-3f;
  TrainState state{model, dax::optim::AdamW<MyTransformer>(model, {.lr = lr, .weight_decay = 0.0})};  // optax.adam
  auto train_step = create_train_step(shardings);
  const dax::Mesh mesh = shardings.at("replicated").mesh();
  const dax::NamedSharding data_split(mesh, P("data"));
  std::vector<Batch> data_loader;  // host data, on the mesh as loaded (replicated)
  for (const auto& [ids, labels] : host_batches()) data_loader.push_back(put_batch(ids, labels, dax::NamedSharding(mesh, P())));
  const int num_epochs = 2;
  std::vector<float> first_batch_loss;
  for (int epoch = 0; epoch < num_epochs; ++epoch) {
    for (size_t i = 0; i < data_loader.size(); ++i) {
      const Batch batch_sharded = dax::tree_map([&](const auto& x) { return dax::device_put(x, data_split); }, data_loader[i]);
      const MyTransformer before = state.model;
      const StepOutput out = train_step(state, batch_sharded);
      const float loss = out.loss.to_host()[0], accuracy = out.metrics.at("accuracy").to_host()[0];
      say("epoch ", epoch, " batch ", i, ": Loss: ", loss, ", Acc: ", accuracy);
      if (i == 0) first_batch_loss.push_back(loss);
      if (epoch == 0 && i == 0) {
        // Adam's first update from the gradients block 9 checked (same model, same batch):
        // p - lr / (1 - b1) * m / (sqrt(v) / sqrt(1 - b2) + eps), m = (1 - b1) g, v = (1 - b2) g^2.
        double worst = 0;
        dax::tree_for_each_with_path([&](const std::string& path, const Array& p1, const Array& p0, const Array& g) {
          if (!p1.is_addressable()) return;
          const auto now = p1.local_to_host(), old = p0.local_to_host(), gl = g.local_to_host();
          for (size_t k = 0; k < now.size(); ++k) {
            const double m = 0.1 * gl[k], v = 0.001 * double(gl[k]) * gl[k];
            const double want = old[k] - lr / 0.1 * m / (std::sqrt(v) / std::sqrt(0.001) + 1e-8);
            worst = std::max(worst, std::abs(now[k] - want));
          }
          expect(p1.sharding() == p0.sharding(), path + " keeps its sharding");
        }, state.model, before, grads0);
        say("Adam's first update: largest difference from the formula ", worst, " (lr ", lr, ")");
        expect(worst < 1e-3 * lr, "the first update is Adam's, within 1e-3 of lr");
      }
    }
  }
  expect(first_batch_loss.back() < first_batch_loss.front(), "training lowers the loss on a batch it has seen");
}

// ---------------------------------------------------------------------------------------------
// with_sharding_constraint, communication per step, profiling

/// Normal samples from a fixed seed, on the host.
std::vector<float> host_normal(int64_t n, unsigned seed, double stddev) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal(0.0, stddev);
  std::vector<float> v(n);
  for (float& e : v) e = static_cast<float>(normal(gen));
  return v;
}

std::vector<int32_t> host_labels(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> pick(0, classes - 1);
  std::vector<int32_t> v(n);
  for (auto& e : v) e = pick(gen);
  return v;
}

/// Mean cross-entropy of logits (rows, classes) and its gradient, in double.
double host_cross_entropy(const Host& logits, const std::vector<int32_t>& labels, Host* dlogits) {
  const int64_t rows = static_cast<int64_t>(labels.size());
  double loss = 0;
  if (dlogits) dlogits->assign(logits.size(), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const double* z = &logits[i * classes];
    const double zmax = *std::max_element(z, z + classes);
    double sum = 0;
    for (int64_t j = 0; j < classes; ++j) sum += std::exp(z[j] - zmax);
    loss += (zmax + std::log(sum) - z[labels[i]]) / rows;
    if (dlogits)
      for (int64_t j = 0; j < classes; ++j) (*dlogits)[i * classes + j] = (std::exp(z[j] - zmax) / sum - (j == labels[i])) / rows;
  }
  return loss;
}

Host to_double(const std::vector<float>& v) { return Host(v.begin(), v.end()); }

struct Linear {
  Array kernel, bias;
};
DAX_TREE(Linear, kernel, bias)
struct Features {
  Array x;
  Ids label;
};
DAX_TREE(Features, x, label)

void block_21_constraints() {
  from_jax::block(guide, "block 21: with_sharding_constraint in a train step (and the same with shard_map)");
  const auto [mesh, full] = from_jax::guide_mesh({8}, {"data"});
  const int64_t n = mesh.size(), b = 32, f = 64;
  const auto x_host = host_normal(b * f, 211, 1.0), k_host = host_normal(f * classes, 212, 0.2),
             bias_host = host_normal(classes, 213, 0.1);
  const auto labels_host = host_labels(b, 214);
  const dax::NamedSharding data(mesh, P("data")), replicated(mesh, P());
  const Linear params{dax::device_put(k_host, {f, classes}, replicated), dax::device_put(bias_host, {classes}, replicated)};
  const Features batch_in{dax::device_put(x_host, {b, f}, replicated), dax::device_put(labels_host, {b}, replicated)};

  auto model = [](const Linear& p, const Array& x) { return dax::matmul(x, p.kernel) + p.bias; };
  auto compute_loss = [](const Array& logits, const Ids& labels) { return dax::cross_entropy(logits, labels); };
  auto train_step = [&](const Linear& p, const Features& batch_arg) {
    const Features batch = dax::tree_map([&](const auto& x) { return dax::with_sharding_constraint(x, data); }, batch_arg);
    const Array logits = dax::with_sharding_constraint(model(p, batch.x), replicated);
    return compute_loss(logits, batch.label);
  };

  dax::comm_stats().reset();
  const auto [loss, grads] = dax::value_and_grad(train_step)(params, batch_in);
  const auto stats = dax::comm_stats();
  for (const auto& [key, c] : stats.entries())
    say("  ", key.first, " over ", key.second, ": ", c.calls, " call(s), ", c.bytes, " bytes");
  // Forward: the logits gathered to P(), and the labels with them (the loss reads both whole).
  // Backward: the constraint keeps the logits' cotangent replicated (JAX's transpose rule), so
  // the bias gradient, a sum of it over the batch, needs nothing. For the kernel's, x^T dlogits,
  // dax either all-reduces the devices' partial sums (one collective), or moves x from batch rows
  // to feature columns (an all-to-all), computes its rows of the gradient and all-gathers them
  // (two collectives, fewer bytes). The cost model decides (docs/planning.md: bytes over the link
  // plus 5 us a collective on the CPU); on 8 devices the all-reduce wins. Either way the bytes must
  // be that plan's exactly.
  const int64_t rows = b / n;
  const int64_t forward = (n - 1) * rows * classes * 4 + (n - 1) * rows * 4;  // logits, labels
  const int64_t gathered = forward + (n - 1) * f * classes * 4 / n, exchanged = (n - 1) * rows * f * 4 / n;
  const int64_t reduced = all_reduce_bytes(f * classes, n);
  const bool reduce_way = stats.of("all_reduce").calls > 0;  // which of the two plans ran (each checked below)
  say("  the kernel gradient ", reduce_way ? "all-reduced" : "exchanged and gathered", " (", forward + reduced,
      " bytes in 3 collectives against ", gathered + exchanged, " in 4)");
  if (full) expect(reduce_way, "on 8 devices the all-reduce wins");
  if (reduce_way) {
    expect_eq(stats.of("all_gather").calls, int64_t{2}, "all-gathers (logits, labels)");
    expect_eq(stats.of("all_reduce").calls, int64_t{1}, "all-reduces (the kernel gradient)");
    expect_eq(stats.total_bytes(), forward + reduced, "nothing else moves");
  } else {
    if (full) {
      expect_eq(stats.of("all_gather").calls, int64_t{3}, "all-gathers (logits, labels, kernel gradient)");
      expect_eq(stats.of("all_to_all").calls, int64_t{1}, "all-to-alls (x, batch rows to feature columns)");
    }
    expect_eq(stats.of("all_gather").bytes, gathered, "all-gather bytes");
    expect_eq(stats.of("all_to_all").bytes, exchanged, "all-to-all bytes");
    expect_eq(stats.total_bytes(), gathered + exchanged, "nothing else moves");
  }

  // The host: loss and gradients.
  const Host xd = to_double(x_host);
  Host logits = mm(xd, to_double(k_host), b, f, classes), dlogits;
  add_bias(logits, to_double(bias_host));
  const double want = host_cross_entropy(logits, labels_host, &dlogits);
  expect_near(loss.to_host()[0], want, 1e-5 * want, "loss");
  expect(piece_error(grads.kernel, mm_tn(xd, dlogits, b, f, classes)) < 1e-5, "kernel gradient");
  expect(piece_error(grads.bias, column_sums(dlogits, classes)) < 1e-5, "bias gradient");
  say("loss ", loss.to_host()[0], " (host ", want, ")");

  // The same logits written per device with shard_map: each device's rows, then one all-gather.
  auto logits_per_device = dax::shard_map(
      [](const Array& x_rows, const Array& kernel, const Array& bias) {
        return dax::all_gather(dax::matmul(x_rows, kernel) + bias, "data", 0, true);
      },
      mesh, {P("data"), P(), P()}, P());
  dax::comm_stats().reset();
  const Array by_hand = logits_per_device(dax::reshard(batch_in.x, data), params.kernel, params.bias);
  expect_eq(dax::comm_stats().total_bytes(), (n - 1) * rows * classes * 4, "shard_map: one all-gather of the logits");
  const Array constrained = dax::with_sharding_constraint(model(params, dax::reshard(batch_in.x, data)), replicated);
  expect(by_hand.to_host() == constrained.to_host(), "shard_map's logits equal the constrained ones");
}

struct Mlp {
  Array w1, b1, w2, b2;
};
DAX_TREE(Mlp, w1, b1, w2, b2)

constexpr int64_t mlp_batch = 256, mlp_in = 64, mlp_hidden = 128;  // batch > hidden: see block 22

/// A small MLP classifier's parameters, each in the sharding `sharding_of(shape)` gives.
template <class ShardingOf>
Mlp make_mlp(ShardingOf sharding_of) {
  auto put = [&](dax::Shape shape, unsigned seed, double stddev) {
    return dax::device_put(host_normal(dax::numel(shape), seed, stddev), shape, sharding_of(shape));
  };
  return Mlp{put({mlp_in, mlp_hidden}, 221, 0.15), put({mlp_hidden}, 222, 0.1), put({mlp_hidden, classes}, 223, 0.1),
             put({classes}, 224, 0.1)};
}

Array mlp_loss(const Mlp& p, const Array& x, const Ids& labels) {
  return dax::cross_entropy(dax::matmul(dax::relu(dax::matmul(x, p.w1) + p.b1), p.w2) + p.b2, labels);
}

/// The host's loss and gradients of the MLP on (x, labels), in the order w1, b1, w2, b2.
std::pair<double, std::vector<Host>> host_mlp(const std::vector<float>& x_host, const std::vector<int32_t>& labels) {
  const Host x = to_double(x_host), w1 = to_double(host_normal(mlp_in * mlp_hidden, 221, 0.15)),
             b1 = to_double(host_normal(mlp_hidden, 222, 0.1)), w2 = to_double(host_normal(mlp_hidden * classes, 223, 0.1)),
             b2 = to_double(host_normal(classes, 224, 0.1));
  Host a = mm(x, w1, mlp_batch, mlp_in, mlp_hidden);
  add_bias(a, b1);
  Host r = a;
  for (double& e : r) e = std::max(e, 0.0);
  Host logits = mm(r, w2, mlp_batch, mlp_hidden, classes), dlogits;
  add_bias(logits, b2);
  const double loss = host_cross_entropy(logits, labels, &dlogits);
  Host dr = mm_nt(dlogits, w2, mlp_batch, classes, mlp_hidden);
  for (size_t i = 0; i < dr.size(); ++i) dr[i] = a[i] > 0 ? dr[i] : 0.0;
  return {loss, {mm_tn(x, dr, mlp_batch, mlp_in, mlp_hidden), column_sums(dr, mlp_hidden),
                 mm_tn(r, dlogits, mlp_batch, mlp_hidden, classes), column_sums(dlogits, classes)}};
}

/// One FSDP step on a 1-D mesh ('fsdp',): parameters of more than 1024 elements split on their
/// first dimension, the batch split too; each layer gathers its weights for the forward, and the
/// gradients come back in the parameters' shardings. Returns the loss and the gradients.
std::pair<Array, Mlp> fsdp_step(const dax::Mesh& mesh) {
  const dax::NamedSharding rows(mesh, P("fsdp")), replicated(mesh, P());
  Mlp params = make_mlp([&](const dax::Shape& s) { return dax::numel(s) > 1024 ? rows : replicated; });
  const auto x = dax::device_put(host_normal(mlp_batch * mlp_in, 225, 1.0), {mlp_batch, mlp_in}, rows);
  const auto labels = dax::device_put(host_labels(mlp_batch, 226), {mlp_batch}, rows);
  auto loss_fn = [&](const Mlp& p) {
    const Mlp whole = dax::tree_map([&](const Array& w) { return dax::reshard(w, replicated); }, p);  // all-gather
    return mlp_loss(whole, x, labels);
  };
  auto [loss, grads] = dax::value_and_grad(loss_fn)(params);
  dax::optim::SGD opt(params, {.lr = 0.1});
  opt.step(params, grads);  // on the shards: no communication
  return {loss, grads};
}

void expect_mlp_grads(const Mlp& grads, const std::vector<Host>& want, const std::string& strategy) {
  const std::vector<const Array*> got{&grads.w1, &grads.b1, &grads.w2, &grads.b2};
  for (size_t i = 0; i < got.size(); ++i)
    expect(piece_error(*got[i], want[i]) < 1e-5, strategy + ": gradient " + std::to_string(i) + " equals the host's");
}

void block_22_communication() {
  from_jax::block(guide, "block 22: communication per step: data, tensor, FSDP");
  const auto x_host = host_normal(mlp_batch * mlp_in, 225, 1.0);
  const auto labels_host = host_labels(mlp_batch, 226);
  const auto [want_loss, want_grads] = host_mlp(x_host, labels_host);
  const int64_t w_bytes[] = {mlp_in * mlp_hidden * 4, mlp_hidden * 4, mlp_hidden * classes * 4, classes * 4};

  {  // Data parallelism: one all-reduce per gradient, 2 (n-1)/n of the parameters in all.
    const auto [mesh, full] = from_jax::guide_mesh({8}, {"data"});
    const int64_t n = mesh.size();
    const dax::NamedSharding rows(mesh, P("data")), replicated(mesh, P());
    Mlp params = make_mlp([&](const dax::Shape&) { return replicated; });
    const auto x = dax::device_put(x_host, {mlp_batch, mlp_in}, rows);
    const auto labels = dax::device_put(labels_host, {mlp_batch}, rows);
    dax::comm_stats().reset();
    auto [loss, grads] = dax::value_and_grad([&](const Mlp& p) { return mlp_loss(p, x, labels); })(params);
    dax::optim::SGD opt(params, {.lr = 0.1});
    opt.step(params, grads);
    const auto stats = dax::comm_stats();
    for (const auto& [key, c] : stats.entries())
      say("  ", key.first, " over ", key.second, ": ", c.calls, " call(s), ", c.bytes, " bytes");
    int64_t want = all_reduce_bytes(1, n);  // the loss: a mean over the split batch
    for (int64_t w : w_bytes) want += all_reduce_bytes(w / 4, n);
    say("data parallel: ", stats.of("all_reduce").calls, " all-reduces, ", stats.total_bytes(),
        " bytes per device per step (2 (n-1)/n x ", w_bytes[0] + w_bytes[1] + w_bytes[2] + w_bytes[3],
        " parameter bytes + the loss)");
    if (full) expect_eq(stats.of("all_reduce").calls, int64_t{5}, "all-reduces: four gradients and the loss");
    expect_eq(stats.of("all_reduce").bytes, want, "all-reduce bytes");
    expect_eq(stats.total_bytes(), want, "nothing else moves");
    expect_near(loss.to_host()[0], want_loss, 1e-5 * want_loss, "data parallel loss");
    expect_mlp_grads(grads, want_grads, "data parallel");
  }
  {  // Tensor parallelism: one all-reduce of the activations per layer (Megatron column -> row).
    const auto [mesh, full] = from_jax::guide_mesh({8}, {"model"});
    const int64_t n = mesh.size(), width = 256, layers = 2;
    const dax::NamedSharding replicated(mesh, P());
    const auto w1_host = host_normal(mlp_in * width, 227, 0.1), w2_host = host_normal(width * mlp_in, 228, 0.1);
    const auto w1 = dax::device_put(w1_host, {mlp_in, width}, dax::NamedSharding(mesh, P(dax::none, "model")));
    const auto w2 = dax::device_put(w2_host, {width, mlp_in}, dax::NamedSharding(mesh, P("model", dax::none)));
    Array h = dax::device_put(x_host, {mlp_batch, mlp_in}, replicated);
    Host hd = to_double(x_host);
    dax::comm_stats().reset();
    for (int l = 0; l < layers; ++l) {
      h = dax::matmul(dax::relu(dax::matmul(h, w1)), w2, replicated);
      Host z = mm(hd, to_double(w1_host), mlp_batch, mlp_in, width);
      for (double& e : z) e = std::max(e, 0.0);
      hd = mm(z, to_double(w2_host), mlp_batch, width, mlp_in);
    }
    const auto stats = dax::comm_stats();
    const int64_t want = layers * all_reduce_bytes(mlp_batch * mlp_in, n);
    say("tensor parallel: ", stats.of("all_reduce").calls, " all-reduces, ", stats.total_bytes(),
        " bytes per device for ", layers, " layers (2 (n-1)/n x ", mlp_batch * mlp_in * 4, " activation bytes each)");
    if (full) expect_eq(stats.of("all_reduce").calls, layers, "all-reduces: one per layer");
    expect_eq(stats.total_bytes(), want, "bytes: the activations' all-reduces only");
    expect(piece_error(h, hd) < 1e-5, "tensor-parallel activations equal the host's");
  }
  {  // FSDP: all-gather each large weight before its layer, reduce-scatter its gradient after.
    const auto [mesh, full] = from_jax::guide_mesh({8}, {"fsdp"});
    const int64_t n = mesh.size();
    dax::comm_stats().reset();
    const auto [loss, grads] = fsdp_step(mesh);
    const auto stats = dax::comm_stats();
    const int64_t split = (n - 1) * (w_bytes[0] + w_bytes[2]) / n;  // w1 and w2: over 1024 elements
    const int64_t small = all_reduce_bytes(w_bytes[1] / 4, n) + all_reduce_bytes(w_bytes[3] / 4, n) + all_reduce_bytes(1, n);
    say("FSDP: ", stats.of("all_gather").bytes, " bytes all-gathered, ", stats.of("reduce_scatter").bytes,
        " reduce-scattered, ", stats.of("all_reduce").bytes, " all-reduced (biases, loss) per device per step");
    if (full) {
      expect_eq(stats.of("all_gather").calls, int64_t{2}, "all-gathers: w1, w2");
      expect_eq(stats.of("reduce_scatter").calls, int64_t{2}, "reduce-scatters: their gradients");
      expect_eq(stats.of("all_reduce").calls, int64_t{3}, "all-reduces: b1, b2, the loss");
    }
    expect_eq(stats.of("all_gather").bytes, split, "all-gather bytes: (n-1)/n of the split weights");
    expect_eq(stats.of("reduce_scatter").bytes, split, "reduce-scatter bytes: (n-1)/n of their gradients");
    expect_eq(stats.total_bytes(), 2 * split + small, "nothing else moves");
    expect_near(loss.to_host()[0], want_loss, 1e-5 * want_loss, "FSDP loss");
    expect_mlp_grads(grads, want_grads, "FSDP");
  }
}

/// The value of "key" in one line of a Chrome trace: a number, or a string without its quotes.
std::string trace_field(const std::string& line, const std::string& key) {
  const std::string tag = "\"" + key + "\": ";
  const auto at = line.find(tag);
  if (at == std::string::npos) return "";
  size_t start = at + tag.size();
  if (line[start] == '"') return line.substr(start + 1, line.find('"', start + 1) - start - 1);
  return line.substr(start, line.find_first_of(",}", start) - start);
}

void block_24_profile(const MyTransformer& model, const Shardings& shardings, const from_jax::GuideMesh& hybrid,
                      const from_jax::GuideMesh& fsdp) {
  from_jax::block(guide, "block 24: profile a train step and read its collectives back");
  auto& rt = dax::Runtime::current();
  TrainState state{model, dax::optim::AdamW<MyTransformer>(model, {.lr = 1e-3, .weight_decay = 0.0})};
  auto train_step = create_train_step(shardings);
  const auto data = host_batches();
  const Batch batch = put_batch(data[0].first, data[0].second, dax::NamedSharding(hybrid.mesh, P("data")));
  const std::string path = "/tmp/from_jax_flax_nnx_training_" + std::to_string(getpid()) + ".json";  // rank 0's
  dax::comm_stats().reset();
  {
    auto scope = dax::profile(path);  // jax.profiler.trace
    const StepOutput out = train_step(state, batch);
    fsdp_step(fsdp.mesh);
  }
  // Each rank's count per collective kind: calls and bytes, gathered for rank 0.
  const std::vector<std::string> kinds{"all_gather", "all_to_all", "reduce_scatter", "all_reduce", "general_exchange",
                                       "ppermute"};
  std::vector<int64_t> mine;
  for (const auto& k : kinds) mine.push_back(dax::comm_stats().of(k).calls), mine.push_back(dax::comm_stats().of(k).bytes);
  const std::vector<int64_t> counted = rt.world().all_gather_host(mine);
  int64_t ok = 1;
  if (rt.rank() == 0) {
    // Read the trace back: per rank and kind, the collectives' calls and bytes; the ops seen.
    std::map<std::pair<int, std::string>, std::pair<int64_t, int64_t>> traced;
    std::map<int, int64_t> matmuls;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (trace_field(line, "ph") != "X") continue;
      const int pid = std::stoi(trace_field(line, "pid"));
      if (trace_field(line, "cat") == "collective") {
        auto& [calls, bytes] = traced[{pid, trace_field(line, "kind")}];
        ++calls, bytes += std::stoll(trace_field(line, "bytes"));
      } else if (trace_field(line, "name") == "matmul") {
        ++matmuls[pid];
      }
    }
    std::remove(path.c_str());
    std::ostringstream table;
    for (int r = 0; r < rt.size(); ++r) {
      ok = ok && matmuls[r] > 0;
      for (size_t k = 0; k < kinds.size(); ++k) {
        const auto [calls, bytes] = traced[{r, kinds[k]}];
        const int64_t want_calls = counted[r * 2 * kinds.size() + 2 * k], want_bytes = counted[r * 2 * kinds.size() + 2 * k + 1];
        ok = ok && calls == want_calls && bytes == want_bytes;
        if (r == 0 && (calls || want_calls))
          table << "  rank 0 " << kinds[k] << ": trace " << calls << " calls, " << bytes << " bytes; comm_stats "
                << want_calls << " calls, " << want_bytes << " bytes\n";
      }
    }
    std::cout << table.str() << "  " << matmuls[0] << " matmuls on rank 0\n";
  }
  ok = rt.world().all_gather_host({ok})[0];
  expect(ok == 1, "every rank's collectives in the trace equal what comm_stats counted, and its matmuls are there");
  if (hybrid.full) {
    const auto& stats = dax::comm_stats();
    expect(stats.of("all_reduce").calls > 0, "gradient all-reduces in the step");
    expect(stats.of("all_gather").calls > 0 && stats.of("reduce_scatter").calls > 0, "FSDP's all-gathers and reduce-scatters");
  }
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const Meshes meshes = block_6_meshes();
  const Shardings shardings = block_7_sharding_specs(meshes.hybrid);
  HostParams host_params;
  const MyTransformer model = block_8_shard_params(shardings, meshes.hybrid, host_params);
  const MyTransformer grads0 = block_9_train_step(model, shardings, host_params);
  block_10_training_loop(model, grads0, shardings);
  block_21_constraints();
  block_22_communication();
  block_24_profile(model, shardings, meshes.hybrid, meshes.fsdp);
  return from_jax::finish("flax_nnx_training", 8);
}
