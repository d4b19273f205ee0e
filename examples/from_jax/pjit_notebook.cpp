// pjit_notebook: guide 001, a notebook on pjit and sharding (a 1-d mesh over all devices and a
// (2, 2) mesh; products under several PartitionSpecs, a column-parallel layer, an MLP, a training
// step, resharding, a timing, jax.checkpoint, and two patterns that pick a sharding at run time).
// Run: mpirun -np 8 --oversubscribe from_jax_pjit_notebook (the guide's 8 devices), or as one
// process, where every block runs on a one-device mesh and checks only its numbers.
// Checks: every result against loops on the host from the same random inputs (stated tolerances);
// at 8 ranks, each result's sharding, each device's piece (its index and its values) and the bytes
// comm_stats counted against the collective each layout implies; in the training step, the loss
// and the gradients against the host, the loss falling and the parameters keeping their
// shardings; in the checkpoint block, gradients bit for bit equal with and without dax::remat and
// the peak memory dax::memory_stats reports with each.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "guide.hpp"

namespace {

using Array = dax::DistArray<float>;
using Params = std::map<std::string, Array>;  // the guide's {'w': ..., 'b': ...}
using dax::P;
constexpr int64_t kDevices = 8;  // the guide's n_devices, fixing its shapes at any rank count
const std::string kGuide = "001";

int rank() { return dax::Runtime::current().rank(); }

std::vector<double> host_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t k,
                                int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t l = 0; l < k; ++l)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += double(a[i * k + l]) * b[l * n + j];
  return c;
}

// |got - want| at most tol * (1 + the largest |want|), element by element.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol, const std::string& what) {
  from_jax::expect_eq(got.size(), want.size(), what + ": element count");
  double scale = 1, worst = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  from_jax::expect_near(worst / scale, 0.0, tol, what + ": largest difference from the host, relative");
}

// Piece i of a dimension of n split `parts` ways (the ceil-chunk rule), written out here.
dax::Slice part(int64_t n, int64_t parts, int64_t i) {
  const int64_t chunk = (n + parts - 1) / parts;
  return {std::min(i * chunk, n), std::min((i + 1) * chunk, n)};
}

// This device's piece of a 1-d or 2-d array is the block `want` of the host data `host`.
void expect_piece(const Array& a, const std::vector<dax::Slice>& want, const std::vector<float>& host,
                  const std::string& what) {
  const auto shards = a.addressable_shards();
  from_jax::expect_eq(shards.size(), size_t(1), what + ": pieces on device " + std::to_string(rank()));
  const auto& index = shards[0].index;
  from_jax::expect_eq(index.size(), want.size(), what + ": piece rank");
  for (size_t d = 0; d < want.size(); ++d) {
    from_jax::expect_eq(index[d].start, want[d].start, what + ": piece start, dimension " + std::to_string(d));
    from_jax::expect_eq(index[d].stop, want[d].stop, what + ": piece stop, dimension " + std::to_string(d));
  }
  const dax::Slice rows = want[0], cols = want.size() > 1 ? want[1] : dax::Slice{0, 1};
  const int64_t width = a.ndim() > 1 ? a.shape()[1] : 1;
  const std::vector<float> values = shards[0].data.to_vector();
  size_t k = 0;
  bool same = values.size() == size_t((rows.stop - rows.start) * (cols.stop - cols.start));
  for (int64_t i = rows.start; same && i < rows.stop; ++i)
    for (int64_t j = cols.start; same && j < cols.stop; ++j) same = values[k++] == host[i * width + j];
  from_jax::expect(same, what + ": device " + std::to_string(rank()) + " holds the host values of its piece");
}

// The bytes a device must receive that its current piece does not hold, the most over devices.
int64_t lower_bound(const dax::Shape& shape, const dax::NamedSharding& from, const dax::NamedSharding& to) {
  const auto have = from.devices_indices_map(shape);
  int64_t most = 0;
  for (const auto& [device, want] : to.devices_indices_map(shape))
    most = std::max(most, dax::numel(want) - dax::numel(dax::intersect(want, have.at(device))));
  return most * int64_t(sizeof(float));
}

void print_comm(const std::string& what) {
  std::ostringstream line;
  for (const auto& [key, c] : dax::comm_stats().entries())
    line << " " << key.first << " " << key.second << " " << c.calls << "x " << c.bytes << " B;";
  from_jax::say("  moved (", what, "):", line.str().empty() ? " nothing" : line.str());
}

struct Meshes {
  from_jax::GuideMesh mesh_1d, mesh_2d;
};

// Block 1: the meshes. A device is a rank, so the 1-d mesh is the job's 8 ranks and the 2-d one
// its first 4, reshaped (2, 2) like devices[:4].
Meshes setup() {
  from_jax::block(kGuide, "block 1: device meshes ('x',) and ('data', 'model')");
  Meshes m{from_jax::guide_mesh({kDevices}, {"x"}), from_jax::guide_mesh({2, 2}, {"data", "model"})};
  from_jax::say("Available devices: ", dax::Runtime::current().size());
  from_jax::say("1D Mesh: ", m.mesh_1d.mesh);
  from_jax::say("2D Mesh shape: ", dax::to_string(m.mesh_2d.mesh.shape()), " ", m.mesh_2d.mesh);
  if (m.mesh_1d.full)
    from_jax::expect(m.mesh_1d.mesh.devices() == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}, "1-d mesh: devices 0-7");
  if (m.mesh_2d.full) {
    from_jax::expect(m.mesh_2d.mesh.devices() == std::vector<int>{0, 1, 2, 3}, "2-d mesh: devices 0-3");
    from_jax::expect_eq(m.mesh_2d.mesh.device_at({1, 0}), 2, "device at ('data' 1, 'model' 0)");
  }
  return m;
}

// Block 2: rows of x split, y replicated, the product split by rows: no communication.
void simple_computation(const from_jax::GuideMesh& gm) {
  from_jax::block(kGuide, "block 2: simple_computation");
  const auto& mesh = gm.mesh;
  const dax::NamedSharding rows(mesh, P("x")), replicated(mesh, P());
  const Array x = dax::random::normal<float>(dax::random::key(42), {kDevices * 4, 64}, rows);
  const Array y = dax::random::normal<float>(dax::random::key(43), {64, 32}, replicated);
  dax::comm_stats().reset();
  const Array result = dax::matmul(x, y, rows);
  const int64_t moved = dax::comm_stats().total_bytes();
  from_jax::say("Input x shape: ", dax::to_string(x.shape()), "\nInput y shape: ", dax::to_string(y.shape()));
  from_jax::say("Output shape: ", dax::to_string(result.shape()), "\nOutput sharding: ", result.sharding());
  dax::visualize_sharding(result);
  const auto host = result.to_host();
  expect_close(host, host_matmul(x.to_host(), y.to_host(), 32, 64, 32), 1e-5, "x @ y");
  if (!gm.full) return;
  from_jax::expect_eq(result.sharding(), rows, "output sharding");
  from_jax::expect_eq(moved, int64_t(0), "bytes moved by a row-split times a replicated operand");
  expect_piece(result, {part(32, 8, rank()), {0, 32}}, host, "output piece");
}

// Block 3: the same product with A's rows split, B's columns split, and both replicated.
void matrix_multiply_variants(const from_jax::GuideMesh& gm) {
  from_jax::block(kGuide, "block 3: matrix_multiply_variants");
  const auto& mesh = gm.mesh;
  auto on = [&](dax::PartitionSpec s) { return dax::NamedSharding(mesh, std::move(s)); };
  // Unsharded inputs, as the guide's; each strategy moves them to its in-specs like pjit does.
  const Array a = dax::random::normal<float>(dax::random::key(0), {128, 64}, on(P()));
  const Array b = dax::random::normal<float>(dax::random::key(1), {64, 96}, on(P()));
  const auto want = host_matmul(a.to_host(), b.to_host(), 128, 64, 96);
  struct Strategy {
    std::string name;
    dax::PartitionSpec in_a, in_b, out;
    dax::Slice rows, cols;  // this device's piece of the result at 8 ranks
  };
  const std::vector<Strategy> strategies{
      {"Row-sharded", P("x"), P(), P("x"), part(128, 8, rank()), {0, 96}},
      {"Column-sharded", P(), P(dax::none, "x"), P(dax::none, "x"), {0, 128}, part(96, 8, rank())},
      {"Replicated", P(), P(), P(), {0, 128}, {0, 96}},
  };
  std::vector<std::vector<float>> results;
  for (const auto& s : strategies) {
    dax::comm_stats().reset();
    const Array r = dax::matmul(dax::reshard(a, on(s.in_a)), dax::reshard(b, on(s.in_b)), on(s.out));
    const auto stats = dax::comm_stats();
    from_jax::say(s.name, " result shape: ", dax::to_string(r.shape()), ", ", r.sharding().spec());
    print_comm(s.name);
    results.push_back(r.to_host());
    expect_close(results.back(), want, 1e-5, s.name + " A @ B");
    if (gm.full) {
      from_jax::expect_eq(r.sharding(), on(s.out), s.name + " output sharding");
      expect_piece(r, {s.rows, s.cols}, results.back(), s.name + " piece");
      if (on(s.out).is_fully_replicated()) {
        // Either every device computes all of C (nothing moves), or, as dax's rule prefers here,
        // each computes an eighth and C is all-gathered: (n-1)/n of its 128 * 96 floats.
        const int64_t gather = 7 * 128 * 96 * 4 / 8;
        from_jax::expect(
            stats.total_bytes() == 0 || (stats.total_bytes() == gather && stats.of("all_gather").calls == 1),
            s.name + ": nothing moved, or one all-gather of C (" + std::to_string(gather) + " B)");
      } else {
        from_jax::expect_eq(stats.total_bytes(), int64_t(0),
                            s.name + ": bytes moved (replicated inputs are sliced locally)");
      }
    }
  }
  bool match = true;
  for (size_t i = 0; i < results[0].size(); ++i)
    match =
        match && std::abs(results[0][i] - results[1][i]) <= 1e-4f && std::abs(results[1][i] - results[2][i]) <= 1e-4f;
  from_jax::say("Results match: ", match ? "True" : "False");
  from_jax::expect(match, "the three strategies agree within 1e-4");
}

// Block 4: a column-parallel linear layer. `layer.forward` is the pjit'ed function: it moves its
// arguments to the in-specs and fixes the output's sharding.
struct LinearLayer {
  std::function<Params(dax::random::Key)> init;
  std::function<Array(const Params&, const Array&)> forward;
};

LinearLayer create_parallel_linear_layer(int64_t input_size, int64_t output_size, const dax::Mesh& mesh) {
  auto init = [=](dax::random::Key key) {
    const auto keys = dax::random::split(key, 2);
    const dax::NamedSharding replicated(mesh, P());
    return Params{{"w", dax::random::normal<float>(keys[0], {input_size, output_size}, replicated) * 0.1f},
                  {"b", dax::zeros<float>({output_size}, replicated)}};
  };
  auto forward = [=](const Params& params, const Array& x) {
    const Array w = dax::reshard(params.at("w"), dax::NamedSharding(mesh, P(dax::none, "x")));
    const Array b = dax::reshard(params.at("b"), dax::NamedSharding(mesh, P("x")));
    const Array y = dax::matmul(dax::reshard(x, dax::NamedSharding(mesh, P())), w) + b;
    return dax::reshard(y, dax::NamedSharding(mesh, P(dax::none, "x")));
  };
  return {init, forward};
}

void parallel_linear_layer(const from_jax::GuideMesh& gm) {
  from_jax::block(kGuide, "block 4: create_parallel_linear_layer");
  const auto& mesh = gm.mesh;
  const LinearLayer layer = create_parallel_linear_layer(256, 512, mesh);
  const Params params = layer.init(dax::random::key(10));
  from_jax::say("Weight shape: ", dax::to_string(params.at("w").shape()));
  from_jax::say("Bias shape: ", dax::to_string(params.at("b").shape()));
  const Array x = dax::random::normal<float>(dax::random::key(11), {32, 256}, dax::NamedSharding(mesh, P()));
  dax::comm_stats().reset();
  const Array out = layer.forward(params, x);
  const int64_t moved = dax::comm_stats().total_bytes();
  from_jax::say("Input shape: ", dax::to_string(x.shape()), "\nOutput shape: ", dax::to_string(out.shape()), ", ",
                out.sharding().spec());
  const auto host = out.to_host();
  const auto w = params.at("w").to_host();
  const auto b = params.at("b").to_host();
  from_jax::expect(std::all_of(b.begin(), b.end(), [](float v) { return v == 0; }), "a zero bias");
  expect_close(host, host_matmul(x.to_host(), w, 32, 256, 512), 1e-5, "x @ w + b");
  if (!gm.full) return;
  from_jax::expect_eq(out.sharding(), dax::NamedSharding(mesh, P(dax::none, "x")), "output sharding");
  from_jax::expect_eq(moved, int64_t(0), "bytes moved (replicated parameters sliced to their pieces locally)");
  expect_piece(out, {{0, 32}, part(512, 8, rank())}, host, "output piece (32, 64)");
}

// Block 5: an MLP with a spec per layer. The guide's layer sizes have 4 entries, so every layer is
// column-parallel; the last layer's 10 outputs split 8 ways are uneven (2, 2, 2, 2, 2, 0, 0, 0).
struct Mlp {
  std::function<std::vector<Params>(dax::random::Key)> init;
  std::function<Array(const std::vector<Params>&, const Array&)> forward;
};

Mlp create_mlp_with_sharding(const std::vector<int64_t>& sizes, const dax::Mesh& mesh) {
  const size_t layers = sizes.size() - 1;
  std::vector<std::map<std::string, dax::PartitionSpec>> specs;
  if (sizes.size() == 3)
    specs = {{{"w", P(dax::none, "x")}, {"b", P("x")}}, {{"w", P("x", dax::none)}, {"b", P()}}};
  else
    specs.assign(layers, {{"w", P(dax::none, "x")}, {"b", P("x")}});
  auto init = [=](dax::random::Key key) {
    const auto keys = dax::random::split(key, int(layers));
    std::vector<Params> params;
    const dax::NamedSharding replicated(mesh, P());
    for (size_t i = 0; i < layers; ++i) {
      const auto wb = dax::random::split(keys[i], 2);
      params.push_back({{"w", dax::random::normal<float>(wb[0], {sizes[i], sizes[i + 1]}, replicated) * 0.1f},
                        {"b", dax::zeros<float>({sizes[i + 1]}, replicated)}});
    }
    return params;
  };
  auto forward = [=](const std::vector<Params>& params, const Array& input) {
    auto arg = [&](size_t i, const std::string& name) {
      return dax::reshard(params[i].at(name), dax::NamedSharding(mesh, specs[i].at(name)));
    };
    Array x = dax::reshard(input, dax::NamedSharding(mesh, P()));
    for (size_t i = 0; i < layers; ++i) {
      x = dax::matmul(x, arg(i, "w")) + arg(i, "b");
      if (i + 1 < layers) x = dax::relu(x);
    }
    return dax::reshard(x, dax::NamedSharding(mesh, P(dax::none, "x")));
  };
  return {init, forward};
}

void mlp_with_sharding(const from_jax::GuideMesh& gm) {
  from_jax::block(kGuide, "block 5: create_mlp_with_sharding");
  const auto& mesh = gm.mesh;
  const std::vector<int64_t> sizes{784, 512, 256, 10};
  const Mlp mlp = create_mlp_with_sharding(sizes, mesh);
  const auto params = mlp.init(dax::random::key(20));
  const Array input = dax::random::normal<float>(dax::random::key(21), {16, 784}, dax::NamedSharding(mesh, P()));
  dax::comm_stats().reset();
  const Array out = mlp.forward(params, input);
  const auto stats = dax::comm_stats();
  from_jax::say("MLP input shape: ", dax::to_string(input.shape()));
  from_jax::say("MLP output shape: ", dax::to_string(out.shape()), ", ", out.sharding().spec());
  print_comm("forward");
  dax::visualize_sharding(out);
  // Host reference: the same layers in double (the biases are zeros).
  std::vector<float> h = input.to_host();
  std::vector<double> ref;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    ref = host_matmul(h, params[i].at("w").to_host(), 16, sizes[i], sizes[i + 1]);
    h.assign(ref.size(), 0.0f);
    for (size_t j = 0; j < ref.size(); ++j) {
      if (i + 2 < sizes.size()) ref[j] = std::max(ref[j], 0.0);
      h[j] = float(ref[j]);
    }
  }
  const auto host = out.to_host();
  expect_close(host, ref, 1e-4, "MLP output");
  if (!gm.full) return;
  // Layer 2 contracts over the first hidden layer's split columns: (16, 512) is all-gathered,
  // (n-1)/n of it. Layer 3's input (16, 256) is gathered too and each device multiplies it by its
  // columns of the weight (256, 10): two collectives. Moving the smaller weight to rows instead
  // (an all-to-all, a local product, an all-reduce of the (16, 10) partial sums) receives about
  // 11 KB less but runs three; at 5 us a collective on the CPU (docs/planning.md) two win.
  const int64_t gather = 7 * 16 * 512 * 4 / 8, gather_hidden2 = 7 * 16 * 256 * 4 / 8;
  from_jax::expect_eq(stats.of("all_gather", "('x',)").bytes, gather + gather_hidden2,
                      "all-gathers of the two hidden layers");
  from_jax::expect_eq(stats.total_calls(), int64_t(2), "collectives in the forward");
  from_jax::expect_eq(stats.total_bytes(), gather + gather_hidden2, "bytes moved in the forward");
  expect_piece(out, {{0, 16}, part(10, 8, rank())}, host, "uneven output piece");
}

// Block 6: A split over both axes of the (2, 2) mesh, B's rows over 'model', the product's rows over
// 'data'. On 8 ranks, ranks 4-7 are outside the mesh and return at once from every op.
void matmul_2d(const from_jax::GuideMesh& gm) {
  from_jax::block(kGuide, "block 6: 2-D mesh matmul (the 'enough devices' branch)");
  const auto& mesh = gm.mesh;
  auto on = [&](dax::PartitionSpec s) { return dax::NamedSharding(mesh, std::move(s)); };
  const Array a = dax::random::normal<float>(dax::random::key(30), {256, 256}, on(P("data", "model")));
  const Array b = dax::random::normal<float>(dax::random::key(31), {256, 128}, on(P("model", dax::none)));
  dax::comm_stats().reset();
  const Array result = dax::matmul(a, b, on(P("data", dax::none)));
  const auto stats = dax::comm_stats();
  from_jax::say("2D sharded result shape: ", dax::to_string(result.shape()), ", ", result.sharding().spec());
  dax::visualize_sharding(a);
  dax::visualize_sharding(result);
  if (!mesh.contains(rank())) {
    from_jax::expect_eq(stats.total_bytes(), int64_t(0), "bytes moved on a rank outside the mesh");
    return;
  }
  const Array sequential = dax::matmul(dax::reshard(a, on(P())), dax::reshard(b, on(P())));
  const auto host = result.to_host(), seq = sequential.to_host();
  // Summed in another order (two halves of the contraction, then their sum), so an element near 0
  // can differ by more than 1e-5 of itself: the tolerance is 1e-5 of the largest element.
  double worst = 0, largest = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    worst = std::max(worst, double(std::abs(host[i] - seq[i])));
    largest = std::max(largest, double(std::abs(seq[i])));
  }
  from_jax::say("Results match: ", worst <= 1e-5 * largest ? "True" : "False", " (largest difference ", worst,
                ", largest element ", largest, ")");
  from_jax::expect(worst <= 1e-5 * largest,
                   "the 2-d product equals the replicated one within 1e-5 of the largest element");
  expect_close(host, host_matmul(a.to_host(), b.to_host(), 256, 256, 128), 1e-5, "A @ B");
  if (!gm.full) return;
  // Each device multiplies its (128, 128) blocks: a partial sum over 'model' of its (128, 128) rows
  // of the result, all-reduced over 'model' (2 devices): 2 (2-1)/2 * 128*128*4 bytes.
  from_jax::expect_eq(stats.total_bytes(), int64_t(128 * 128 * 4), "bytes moved: one all-reduce over 'model'");
  from_jax::expect_eq(stats.of("all_reduce", "('model',)").calls, int64_t(1), "all-reduces over 'model'");
  const int64_t row = mesh.coords(rank())[0], col = mesh.coords(rank())[1];
  expect_piece(a, {part(256, 2, row), part(256, 2, col)}, a.to_host(), "A's 2-d block");
  expect_piece(result, {part(256, 2, row), {0, 128}}, host, "result rows over 'data'");
}

// Block 7: one SGD step on a linear model, w's rows split over 'x', b replicated. The step is the
// pjit'ed function; it also hands back the gradients so that they can be checked.
struct StepResult {
  Params params;
  float loss;
  Params grads;
};
using TrainStep = std::function<StepResult(const Params&, const Array&, const Array&, float)>;

TrainStep create_sharded_training_step(const dax::Mesh& mesh) {
  auto loss_fn = [](const Params& params, const Array& x, const Array& y) {
    const Array pred = dax::matmul(x, params.at("w")) + params.at("b");
    return dax::mean(dax::square(pred - y));
  };
  const std::map<std::string, dax::PartitionSpec> param_spec{{"w", P("x", dax::none)}, {"b", P()}};
  return [=](const Params& params, const Array& x, const Array& y, float lr) {
    Params placed;
    for (const auto& [name, p] : params)
      placed.emplace(name, dax::reshard(p, dax::NamedSharding(mesh, param_spec.at(name))));
    const dax::NamedSharding replicated(mesh, P());
    auto [loss, grads] = dax::value_and_grad(loss_fn)(placed, dax::reshard(x, replicated), dax::reshard(y, replicated));
    Params updated = placed;
    for (auto& [name, p] : updated) p -= grads.at(name) * lr;  // `-=` keeps p's sharding
    return StepResult{updated, loss.to_host()[0], grads};
  };
}

void sharded_training_step(const from_jax::GuideMesh& gm) {
  from_jax::block(kGuide, "block 7: create_sharded_training_step");
  const auto& mesh = gm.mesh;
  const TrainStep step = create_sharded_training_step(mesh);
  const dax::NamedSharding replicated(mesh, P());
  const Params params{{"w", dax::random::normal<float>(dax::random::key(40), {256, 64}, replicated)},
                      {"b", dax::zeros<float>({64}, replicated)}};
  const Array x = dax::random::normal<float>(dax::random::key(41), {32, 256}, replicated);
  const Array y = dax::random::normal<float>(dax::random::key(42), {32, 64}, replicated);
  const float lr = 0.01f;

  dax::comm_stats().reset();
  const StepResult r = step(params, x, y, lr);
  const auto stats = dax::comm_stats();
  from_jax::say("Training loss: ", r.loss);
  print_comm("one step");

  // Host reference in double: pred = x w + b, r = pred - y, loss = mean(r^2), g = 2 r / N,
  // dw = x^T g, db = the column sums of g.
  const auto xh = x.to_host(), yh = y.to_host(), wh = params.at("w").to_host();
  const auto pred = host_matmul(xh, wh, 32, 256, 64);
  const double count = 32 * 64;
  double loss = 0;
  std::vector<double> g(pred.size()), dw(256 * 64, 0.0), db(64, 0.0);
  for (size_t i = 0; i < pred.size(); ++i) {
    const double res = pred[i] - yh[i];
    loss += res * res / count;
    g[i] = 2 * res / count;
    db[i % 64] += g[i];
  }
  for (int64_t i = 0; i < 32; ++i)
    for (int64_t k = 0; k < 256; ++k)
      for (int64_t j = 0; j < 64; ++j) dw[k * 64 + j] += double(xh[i * 256 + k]) * g[i * 64 + j];
  from_jax::expect_near(r.loss, loss, 1e-5 * loss, "loss");
  expect_close(r.grads.at("w").to_host(), dw, 1e-5, "dloss/dw");
  expect_close(r.grads.at("b").to_host(), db, 1e-5, "dloss/db");
  const auto new_w = r.params.at("w").to_host();
  bool changed = false;
  for (size_t i = 0; i < new_w.size(); ++i)
    changed = changed || std::abs(new_w[i] - wh[i]) > 1e-8f + 1e-5f * std::abs(wh[i]);
  from_jax::say("Parameter update successful: ", changed ? "True" : "False");
  from_jax::expect(changed, "w moved by the step");

  // dax's SGD (no momentum) is the same update, bit for bit.
  Params by_optim = r.params;
  for (auto& [name, p] : by_optim) p = dax::reshard(params.at(name), p.sharding());
  dax::optim::SGD sgd(by_optim, {.lr = lr});
  sgd.step(by_optim, r.grads);
  for (const auto& [name, p] : by_optim)
    from_jax::expect(p.to_host() == r.params.at(name).to_host(), "dax::optim::SGD's " + name + " equals w - lr g");

  // A few more steps: the loss falls every time and the layouts stay.
  Params current = r.params;
  float last = r.loss;
  std::ostringstream losses;
  for (int i = 0; i < 4; ++i) {
    const StepResult next = step(current, x, y, lr);
    from_jax::expect(next.loss < last, "the loss falls at step " + std::to_string(i + 2));
    last = next.loss;
    current = next.params;
    losses << " " << next.loss;
  }
  from_jax::say("losses after it:", losses.str());
  if (!gm.full) return;
  for (const auto& [name, p] : current) {
    const dax::NamedSharding want(mesh, name == "w" ? P("x", dax::none) : P());
    from_jax::expect_eq(p.sharding(), want, name + "'s sharding after the steps");
    from_jax::expect_eq(r.grads.at(name).sharding(), p.sharding(), "d" + name + "'s sharding");
  }
  expect_piece(current.at("w"), {part(256, 8, rank()), {0, 64}}, current.at("w").to_host(), "w's piece");
  // What dax's rules pick for this step: forward, x @ w contracts over w's rows where they live
  // (split over 'x'), and the (32, 64) partial sums are all-reduced (2 (n-1)/n of 8192 B); from
  // there everything is replicated: the loss, its gradient, db, and dw = x^T g, whose rows each
  // device takes where w's live. One collective a step. (Before the CPU's model charged 5 us a
  // collective and priced backwards, dax moved w to columns instead and all-gathered the
  // residual gradient and db in the backward: 14,564 B in four collectives, against 14,336 in one.)
  from_jax::expect_eq(stats.of("all_reduce", "('x',)").bytes, int64_t(2 * 7 * 32 * 64 * 4 / 8),
                      "all-reduce of the product's partial sums");
  from_jax::expect_eq(stats.total_calls(), int64_t(1), "collectives in a step");
  from_jax::expect_eq(stats.total_bytes(), int64_t(2 * 7 * 32 * 64 * 4 / 8), "bytes moved by a step");
}

// Block 8: a sum over the split rows moves nothing; a sum over the columns needs the columns split,
// which an all-to-all does at the lower bound; so does the explicit reshard.
void demonstrate_resharding(const from_jax::GuideMesh& gm) {
  from_jax::block(kGuide, "block 8: demonstrate_resharding");
  const auto& mesh = gm.mesh;
  const dax::NamedSharding rows(mesh, P("x")), cols(mesh, P(dax::none, "x"));
  const dax::Shape shape{kDevices * 8, 64};
  const Array x = dax::random::normal<float>(dax::random::key(50), shape, rows);
  const auto xh = x.to_host();
  std::vector<double> row_sums(64, 0.0), col_sums(64, 0.0);
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 64; ++j) row_sums[i] += xh[i * 64 + j], col_sums[j] += xh[i * 64 + j];

  dax::comm_stats().reset();
  const Array result1 = dax::sum(dax::reshard(x, rows), {1}, false, rows);
  const int64_t moved1 = dax::comm_stats().total_bytes();
  from_jax::say("Row operation result shape: ", dax::to_string(result1.shape()));
  dax::comm_stats().reset();
  const Array result2 = dax::sum(dax::reshard(x, cols), {0}, false, dax::NamedSharding(mesh, P("x")));
  const int64_t moved2 = dax::comm_stats().total_bytes();
  from_jax::say("Column operation result shape: ", dax::to_string(result2.shape()));
  from_jax::say(dax::explain(x, cols));
  dax::comm_stats().reset();
  const Array resharded = dax::reshard(x, cols);
  const auto stats = dax::comm_stats();
  from_jax::say("Original sharding: row-wise, ", x.sharding().spec());
  dax::visualize_sharding(x);
  from_jax::say("After resharding: column-wise, ", resharded.sharding().spec());
  dax::visualize_sharding(resharded);
  expect_close(result1.to_host(), row_sums, 1e-5, "row sums");
  expect_close(result2.to_host(), col_sums, 1e-5, "column sums");
  from_jax::expect(resharded.to_host() == xh, "the resharded array holds the same values");
  if (!gm.full) return;
  const int64_t bound = lower_bound(shape, rows, cols);
  from_jax::say("moved: ", moved1, " B for the row op, ", moved2, " B for the column op, ", stats.total_bytes(),
                " B for the reshard; lower bound ", bound, " B");
  from_jax::expect_eq(bound, int64_t(56 * 8 * 4), "lower bound: the (64, 8) column piece less its (8, 8) part");
  from_jax::expect_eq(moved1, int64_t(0), "bytes moved by the row op");
  from_jax::expect_eq(moved2, bound, "bytes moved by the column op");
  from_jax::expect_eq(stats.total_bytes(), bound, "bytes moved by the reshard");
  from_jax::expect_eq(stats.of("all_to_all", "('x',)").calls, int64_t(1), "the reshard is one all-to-all");
  expect_piece(resharded, {{0, 64}, part(64, 8, rank())}, xh, "column piece");
  expect_piece(result2, {part(64, 8, rank())}, result2.to_host(), "column sums' piece");
}

// Block 9: the product of two (512, 512) matrices under three specs, timed (no assertion on speed).
void benchmark_sharding_strategies(const from_jax::GuideMesh& gm) {
  from_jax::block(kGuide, "block 9: benchmark_sharding_strategies");
  const auto& mesh = gm.mesh;
  auto on = [&](dax::PartitionSpec s) { return dax::NamedSharding(mesh, std::move(s)); };
  const Array a = dax::random::normal<float>(dax::random::key(60), {512, 512}, on(P()));
  const Array b = dax::random::normal<float>(dax::random::key(61), {512, 512}, on(P()));
  // The host reference on every 37th row (the whole product is too slow for 8 ranks on 2 cores).
  const auto ah = a.to_host(), bh = b.to_host();
  std::vector<int64_t> sample;
  for (int64_t i = 0; i < 512; i += 37) sample.push_back(i);
  std::vector<float> sample_rows;
  for (int64_t i : sample) sample_rows.insert(sample_rows.end(), ah.begin() + i * 512, ah.begin() + (i + 1) * 512);
  const auto want = host_matmul(sample_rows, bh, int64_t(sample.size()), 512, 512);

  const std::vector<std::tuple<std::string, dax::PartitionSpec, dax::PartitionSpec, dax::PartitionSpec>> strategies{
      {"replicated", P(), P(), P()},
      {"row_sharded", P("x"), P(), P("x")},
      {"col_sharded", P(), P(dax::none, "x"), P(dax::none, "x")}};
  std::string best;
  double best_time = 1e30;
  for (const auto& [name, in1, in2, out] : strategies) {
    auto fn = [&] { return dax::matmul(dax::reshard(a, on(in1)), dax::reshard(b, on(in2)), on(out)); };
    Array result = fn();  // warm-up
    const int trials = 5;
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < trials; ++t) result = fn();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / trials;
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // the slowest device's
    if (rank() == 0)
      std::cout << std::left << std::setw(15) << name << ": " << std::fixed << std::setprecision(4) << seconds << "s\n"
                << std::defaultfloat;
    if (seconds < best_time) best = name, best_time = seconds;
    const auto host = result.to_host();
    std::vector<float> got;
    for (int64_t i : sample) got.insert(got.end(), host.begin() + i * 512, host.begin() + (i + 1) * 512);
    expect_close(got, want, 1e-5, name + " product, sampled rows");
    if (gm.full) from_jax::expect_eq(result.sharding(), on(out), name + " output sharding");
  }
  from_jax::say("\nBest strategy: ", best, " (", best_time, "s)");
}

// Block 10: jax.checkpoint is dax::remat. The layer is the guide's: w's rows split over 'x', x
// replicated, the output's columns over 'x'.
using Layer = std::function<Array(const Array&, const Array&)>;

Layer create_memory_efficient_layer(const dax::Mesh& mesh, bool checkpoint = true) {
  const dax::NamedSharding out(mesh, P(dax::none, "x"));
  auto chunked_computation = [out](const Array& w_chunk, const Array& x) { return dax::matmul(x, w_chunk, out); };
  return [=](const Array& w, const Array& x) {
    const Array w_in = dax::reshard(w, dax::NamedSharding(mesh, P("x", dax::none)));
    const Array x_in = dax::reshard(x, dax::NamedSharding(mesh, P()));
    return checkpoint ? dax::remat(chunked_computation)(w_in, x_in) : chunked_computation(w_in, x_in);
  };
}

// Peak bytes above what was in use before, while f runs.
template <class F>
auto with_peak(F f) {
  const int64_t base = dax::memory_stats().bytes_in_use;
  dax::reset_peak_memory();
  auto result = f();
  return std::pair{std::move(result), dax::memory_stats().peak_bytes_in_use - base};
}

void memory_efficient_layer(const from_jax::GuideMesh& gm) {
  from_jax::block(kGuide, "block 10: create_memory_efficient_layer");
  const auto& mesh = gm.mesh;
  const Layer efficient_layer = create_memory_efficient_layer(mesh),
              plain_layer = create_memory_efficient_layer(mesh, false);
  const dax::NamedSharding w_rows(mesh, P("x", dax::none));
  const Array large_w = dax::random::normal<float>(dax::random::key(70), {1024, 2048}, w_rows);
  const Array large_x = dax::random::normal<float>(dax::random::key(71), {64, 1024}, dax::NamedSharding(mesh, P()));
  dax::comm_stats().reset();
  const Array out = efficient_layer(large_w, large_x);
  const auto stats = dax::comm_stats();
  from_jax::say("Efficient layer output shape: ", dax::to_string(out.shape()), ", ", out.sharding().spec());
  print_comm("forward");
  // The host reference on 4 rows of the output.
  const auto wh = large_w.to_host(), xh = large_x.to_host(), host = out.to_host();
  const std::vector<int64_t> sample{0, 21, 42, 63};
  std::vector<float> xs, got;
  for (int64_t i : sample) {
    xs.insert(xs.end(), xh.begin() + i * 1024, xh.begin() + (i + 1) * 1024);
    got.insert(got.end(), host.begin() + i * 2048, host.begin() + (i + 1) * 2048);
  }
  expect_close(got, host_matmul(xs, wh, 4, 1024, 2048), 1e-5, "x @ w, sampled rows");

  // d sum(x w) / dw = x^T 1: row k of the gradient is the sum of x's column k, in every column.
  auto grad_of = [&](const Layer& layer) {
    return with_peak([&] { return dax::grad([&](const Array& w) { return dax::sum(layer(w, large_x)); })(large_w); });
  };
  const auto [grads, peak] = grad_of(efficient_layer);
  const auto [plain_grads, plain_peak] = grad_of(plain_layer);
  from_jax::say("Gradients computed successfully: ", dax::to_string(grads.shape()), ", ", grads.sharding().spec());
  const auto gh = grads.to_host();
  std::vector<double> want(1024 * 2048);
  for (int64_t k = 0; k < 1024; ++k) {
    double s = 0;
    for (int64_t i = 0; i < 64; ++i) s += xh[i * 1024 + k];
    std::fill(want.begin() + k * 2048, want.begin() + (k + 1) * 2048, s);
  }
  expect_close(gh, want, 1e-5, "dw");
  from_jax::expect(gh == plain_grads.to_host(), "the gradient with remat equals the one without, bit for bit");
  // A lone product keeps only its inputs for the backward, and remat keeps them too: it has nothing
  // to drop, and costs the recomputed output while the backward runs (one output piece at most).
  const int64_t out_piece = 64 * part(2048, mesh.size(), 0).stop * 4;
  from_jax::say("peak during grad: ", plain_peak, " B without remat, ", peak, " B with it; an output piece is ",
                out_piece, " B");
  from_jax::expect(peak <= plain_peak + out_piece, "remat of a lone product costs at most its recomputed output");

  // Where remat pays: a stack whose activations outweigh its weights. Six blocks
  // tanh(a + tanh(1.5 a)), a = tanh(h w), on 2048 rows split over 'x' with (128, 128) replicated
  // weights. Without remat the tape keeps each block's inner activations; with it only its input.
  const int blocks = 6;
  const dax::NamedSharding batch(mesh, P("x")), replicated(mesh, P());
  std::vector<Array> weights;
  for (int l = 0; l < blocks; ++l)
    weights.push_back(
        dax::random::normal<float>(dax::random::key(700 + l), {128, 128}, replicated, 0.0f, 1.0f / 11.3f));
  const Array h0 = dax::random::normal<float>(dax::random::key(72), {2048, 128}, batch);
  auto block = [](const Array& h, const Array& w) {
    const Array a = dax::tanh(dax::matmul(h, w));
    return dax::tanh(a + dax::tanh(a * 1.5f));
  };
  auto stack_loss = [&](bool checkpoint) {
    return [&, checkpoint](const std::vector<Array>& ws) {
      Array h = h0;
      for (const Array& w : ws) h = checkpoint ? dax::remat(block)(h, w) : block(h, w);
      return dax::mean(dax::square(h));
    };
  };
  const auto [kept, stack_plain_peak] = with_peak([&] { return dax::value_and_grad(stack_loss(false))(weights); });
  const auto [recomputed, stack_peak] = with_peak([&] { return dax::value_and_grad(stack_loss(true))(weights); });
  from_jax::expect(kept.first.to_host() == recomputed.first.to_host(), "the stack's loss, with and without remat");
  for (size_t i = 0; i < weights.size(); ++i)
    from_jax::expect(kept.second[i].to_host() == recomputed.second[i].to_host(),
                     "the stack's gradient " + std::to_string(i) + ", bit for bit");
  const int64_t activation = part(2048, mesh.size(), 0).stop * 128 * 4;  // one (2048, 128) activation's piece
  from_jax::say("stack of ", blocks, ": peak ", stack_plain_peak, " B without remat, ", stack_peak,
                " B with it; an activation's piece is ", activation, " B");
  from_jax::expect(stack_plain_peak - stack_peak >= 2 * (blocks - 1) * activation,
                   "remat lowers the peak by at least two activations of every block but the last");
  if (!gm.full) return;
  from_jax::expect_eq(grads.sharding(), w_rows, "dw's sharding");
  // The contraction over w's split rows leaves (64, 2048) partial sums, reduce-scattered to the
  // output's columns: (n-1)/n of them.
  from_jax::expect_eq(stats.total_bytes(), int64_t(7 * 64 * 2048 * 4 / 8), "bytes moved forward");
  from_jax::expect_eq(stats.of("reduce_scatter", "('x',)").calls, int64_t(1), "one reduce-scatter over 'x'");
  expect_piece(out, {{0, 64}, part(2048, 8, rank())}, host, "output piece");
}

// Block 11: two patterns. A sharding chosen by the array's size, and two stages that each set their
// own in/out specs.
float adaptive_sharding(const Array& x, const dax::Mesh& mesh, int64_t threshold = 1000) {
  const dax::NamedSharding in(mesh, x.size() > threshold ? P("x") : P());
  return dax::sum(dax::square(dax::reshard(x, in)), {}, false, dax::NamedSharding(mesh, P())).to_host()[0];
}

Array pipeline_stages(const Array& x, const dax::Mesh& mesh) {
  const dax::NamedSharding rows(mesh, P("x"));
  const Array stage1 = dax::reshard(dax::relu(dax::reshard(x, rows)), rows);
  return dax::mean(dax::reshard(stage1, rows), {0}, false, dax::NamedSharding(mesh, P()));
}

void conditional_sharding(const from_jax::GuideMesh& gm) {
  from_jax::block(kGuide, "block 11: adaptive_sharding and pipeline_stages");
  const auto& mesh = gm.mesh;
  const dax::NamedSharding replicated(mesh, P());
  auto sum_squares = [](const std::vector<float>& v) {
    double s = 0;
    for (float e : v) s += double(e) * e;
    return s;
  };
  const Array small_array = dax::random::normal<float>(dax::random::key(80), {100}, replicated);
  const Array large_array = dax::random::normal<float>(dax::random::key(81), {10000}, replicated);
  dax::comm_stats().reset();
  const float result_small = adaptive_sharding(small_array, mesh);
  const int64_t small_moved = dax::comm_stats().total_bytes();
  dax::comm_stats().reset();
  const float result_large = adaptive_sharding(large_array, mesh);
  const auto large_stats = dax::comm_stats();
  from_jax::say("Small array result: ", result_small, "\nLarge array result: ", result_large);
  from_jax::expect_near(result_small, sum_squares(small_array.to_host()), 1e-5 * result_small, "small sum of squares");
  from_jax::expect_near(result_large, sum_squares(large_array.to_host()), 1e-5 * result_large, "large sum of squares");

  const Array input = dax::random::normal<float>(dax::random::key(90), {kDevices * 16, 64}, replicated);
  dax::comm_stats().reset();
  const Array output = pipeline_stages(input, mesh);
  const auto pipeline_stats = dax::comm_stats();
  from_jax::say("Pipeline output shape: ", dax::to_string(output.shape()), ", ", output.sharding().spec());
  const auto ih = input.to_host();
  std::vector<double> means(64, 0.0);
  for (int64_t i = 0; i < 128; ++i)
    for (int64_t j = 0; j < 64; ++j) means[j] += std::max(ih[i * 64 + j], 0.0f) / 128.0;
  expect_close(output.to_host(), means, 1e-5, "mean of relu over the rows");
  if (!gm.full) return;
  // Replicated: no communication. Split 8 ways: each device sums its 1250 elements and one float is
  // all-reduced, 2 (n-1)/n of one element, counted in whole elements: 4 B. The pipeline's relu is
  // local and its mean over the split rows all-reduces the (64,) partial sums: 2 (n-1)/n * 256 B.
  print_comm("pipeline");
  from_jax::expect_eq(small_moved, int64_t(0), "bytes moved for the small (replicated) array");
  from_jax::expect_eq(large_stats.of("all_reduce", "('x',)").calls, int64_t(1), "all-reduces for the large array");
  from_jax::expect_eq(large_stats.total_bytes(), int64_t(4), "bytes moved for the large array");
  from_jax::expect_eq(pipeline_stats.total_bytes(), int64_t(2 * 7 * 64 * 4 / 8), "bytes moved by the pipeline");
  from_jax::expect_eq(output.sharding(), replicated, "the pipeline's output is replicated");
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const Meshes m = setup();
  simple_computation(m.mesh_1d);
  matrix_multiply_variants(m.mesh_1d);
  parallel_linear_layer(m.mesh_1d);
  mlp_with_sharding(m.mesh_1d);
  matmul_2d(m.mesh_2d);
  sharded_training_step(m.mesh_1d);
  demonstrate_resharding(m.mesh_1d);
  benchmark_sharding_strategies(m.mesh_1d);
  memory_efficient_layer(m.mesh_1d);
  conditional_sharding(m.mesh_1d);
  return from_jax::finish("pjit_notebook", 11);
}
