// flax_nnx: guide 004, "SPMD: automatic sharding with jax.jit" (Flax NNX) — meshes, PartitionSpecs,
// NamedShardings, the four sharding strategies (data, tensor, 2-D, FSDP), inspecting and
// resharding arrays, sharding propagation and choosing a mesh shape. Its "Implementation Guide"
// steps (a model sharded by path rules, the sharded train step, the optimizer) and its
// communication and profiling blocks are in flax_nnx_training.cpp.
//
// Run: mpirun -np 8 --oversubscribe examples/from_jax/from_jax_flax_nnx   (the guide's 8 devices)
//      examples/from_jax/from_jax_flax_nnx                                  (one device: numbers only)
//
// Checks: at 8 ranks every mesh's device order, each array's pieces (shapes, which devices hold
// what, the printed shardings and pictures), the bytes per device of FSDP against replication
// (dax::memory_stats), and what each matmul and reshard moves (dax::comm_stats against the
// formulas); at any rank count every value against the host (small integers: exact).
#include "guide.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using Array = dax::DistArray<float>;
using dax::P;
using from_jax::expect;
using from_jax::expect_eq;
using from_jax::say;

const std::string guide = "004";

/// Integers in [-2, 2] as floats: products and sums of them are exact, so results compare exactly.
std::vector<float> small_ints(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> pick(-2, 2);
  std::vector<float> v(n);
  for (float& e : v) e = static_cast<float>(pick(gen));
  return v;
}

/// The block `box` of a row-major host array of `shape`.
template <class T>
std::vector<T> host_block(const std::vector<T>& global, const dax::Shape& shape, const dax::Box& box) {
  std::vector<T> out(dax::numel(box));
  dax::for_each_in_box(shape, box, [&](int64_t k, int64_t flat) { out[k] = global[flat]; });
  return out;
}

/// This device's piece of x equals the same block of the host array (exact).
template <class T>
void expect_piece(const dax::DistArray<T>& x, const std::vector<T>& global, const std::string& what) {
  if (!x.is_addressable()) return;
  expect(x.local_to_host() == host_block(global, x.shape(), x.local_index()),
         what + ": this device's piece " + dax::to_string(x.local_index()) + " equals the host array's block");
}

std::string shape_of(const dax::Shape& s) { return dax::to_string(s); }

/// Prints x's picture and checks that each label (a cell's devices, "CPU 0,1") names exactly one
/// cell of it, and that there are no other cells.
template <class T>
void show_picture(const dax::DistArray<T>& x, const std::vector<std::string>& labels, bool check) {
  dax::visualize_sharding(x);
  if (!check) return;
  const std::string picture = dax::sharding_picture(x.shape(), x.sharding(), "CPU");
  size_t cells = 0;
  for (size_t at = picture.find("CPU "); at != std::string::npos; at = picture.find("CPU ", at + 1)) ++cells;
  expect_eq(cells, labels.size(), "cells in the picture");
  for (const auto& label : labels) {
    const auto at = picture.find(" " + label + " ");
    expect(at != std::string::npos && picture.find(" " + label + " ", at + 1) == std::string::npos,
           "one cell labelled '" + label + "'");
  }
}

/// "CPU 0" ... "CPU 7": one device per cell.
std::vector<std::string> one_device_cells() {
  std::vector<std::string> out;
  for (int d = 0; d < 8; ++d) out.push_back("CPU " + std::to_string(d));
  return out;
}

/// (rows of a) x (cols of b) of the host product a (n, k) @ b (k, m), in double.
std::vector<float> host_matmul_block(const std::vector<float>& a, const std::vector<float>& b, int64_t k, int64_t m,
                                     dax::Slice rows, dax::Slice cols) {
  const int64_t w = cols.stop - cols.start;
  std::vector<double> c((rows.stop - rows.start) * w, 0.0);
  for (int64_t i = rows.start; i < rows.stop; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double aip = a[i * k + p];
      if (aip == 0) continue;
      double* row = &c[(i - rows.start) * w];
      const float* brow = &b[p * m + cols.start];
      for (int64_t j = 0; j < w; ++j) row[j] += aip * brow[j];
    }
  return std::vector<float>(c.begin(), c.end());
}

/// Bytes an all-reduce of `elements` floats over n devices receives per device, as comm_stats
/// counts a reshard's: 2 (n-1)/n of the elements (rounded down), 4 bytes each.
int64_t all_reduce_bytes(int64_t elements, int64_t n) { return 2 * (n - 1) * elements / n * 4; }

// ---------------------------------------------------------------------------------------------
// Core concepts

void block_1_mesh() {
  from_jax::block(guide, "block 1: Mesh(create_device_mesh((4, 2)), ('data', 'model'))");
  const auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  say(mesh);
  expect_eq(mesh.axis_names().size(), size_t{2}, "axis count");
  expect_eq(mesh.axis_names()[0] + "," + mesh.axis_names()[1], std::string("data,model"), "axis names");
  if (!full) return;
  // create_device_mesh gives the ids row-major; the mesh built from them is make_mesh's.
  const std::vector<int> ids = dax::create_device_mesh({4, 2});
  expect(dax::Mesh({4, 2}, {"data", "model"}, ids) == mesh, "Mesh(create_device_mesh((4, 2))) == make_mesh((4, 2))");
  expect_eq(mesh.axis_size("data"), int64_t{4}, "'data' (rows)");
  expect_eq(mesh.axis_size("model"), int64_t{2}, "'model' (columns)");
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j) expect_eq(mesh.device_at({i, j}), int(2 * i + j), "device at (data, model)");
}

void block_2_topologies() {
  from_jax::block(guide, "block 2: 1-D, 2-D and 3-D meshes");
  const std::vector<std::pair<dax::Shape, std::vector<std::string>>> topologies{
      {{8}, {"data"}}, {{4, 2}, {"data", "model"}}, {{2, 2, 2}, {"data", "model", "pipeline"}}};
  for (const auto& [shape, names] : topologies) {
    const auto [mesh, full] = from_jax::guide_mesh(shape, names);
    // An (8,) array split over every axis of the mesh (the first named major): device d holds
    // element d, since the mesh numbers its devices row-major.
    const P spec = names.size() == 1 ? P(names[0]) : P(dax::axes(names));
    const auto x = dax::arange<int32_t>(8, dax::NamedSharding(mesh, spec));
    say(mesh, ": arange(8) on ", x.sharding().spec());
    show_picture(x, one_device_cells(), full);
    expect_eq(mesh.shape().size(), shape.size(), "mesh rank");
    if (full) {
      expect_eq(mesh.size(), 8, "devices in the mesh");
      expect_eq(dax::to_string(x.local_shape()), std::string("(1,)"), "piece shape");
      expect_eq(x.local_to_host()[0], dax::Runtime::current().rank(), "device d holds element d");
    }
    const auto total = dax::sum(x).to_host()[0];
    expect_eq(total, 28, "sum of arange(8)");
  }
}

void block_3_partition_spec() {
  from_jax::block(guide, "block 3: PartitionSpec");
  const auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  struct Case {
    P spec;
    std::string text;
    int64_t rows, cols;  // pieces of a 2-d array along each dimension on the (4, 2) mesh
  };
  const std::vector<Case> cases{{P("data"), "P('data')", 4, 1},
                                {P(dax::none, "model"), "P(None, 'model')", 1, 2},
                                {P("data", "model"), "P('data', 'model')", 4, 2},
                                {P(), "P()", 1, 1}};
  for (const auto& c : cases) {
    const dax::NamedSharding s(mesh, c.spec);
    say(c.spec, ": ", s.num_pieces(0), " x ", s.num_pieces(1), " pieces of a 2-d array");
    expect_eq(dax::to_string(c.spec), c.text, "spec text");
    if (full) {
      expect_eq(s.num_pieces(0), c.rows, dax::to_string(c.spec) + " pieces along dimension 0");
      expect_eq(s.num_pieces(1), c.cols, dax::to_string(c.spec) + " pieces along dimension 1");
    }
    expect_eq(s.is_fully_replicated(), c.spec.size() == 0 || !full, "replicated only for P()");
  }
}

void block_4_visual_example() {
  from_jax::block(guide, "block 4: a (128, 512) tensor under three specs");
  const dax::Shape shape{128, 512};
  const auto host = small_ints(128 * 512, 4);
  // The guide's (8, 1) mesh "with axis 'data'": a 2-d mesh needs two names; the second has size 1.
  const auto [tall, full] = from_jax::guide_mesh({8, 1}, {"data", "model"});
  const auto [grid, grid_full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  const std::vector<std::tuple<dax::NamedSharding, std::string, bool>> cases{
      {dax::NamedSharding(tall, P("data", dax::none)), "(16, 512)", full},
      {dax::NamedSharding(tall, P(dax::none, "data")), "(128, 64)", full},
      {dax::NamedSharding(grid, P("data", "model")), "(32, 256)", grid_full}};
  for (const auto& [s, piece, on_full_mesh] : cases) {
    const auto x = dax::device_put(host, shape, s);
    say(s.spec(), " on ", s.mesh(), ": each device gets ", shape_of(x.local_shape()));
    show_picture(x, one_device_cells(), on_full_mesh);
    if (on_full_mesh) {
      expect_eq(shape_of(s.shard_shape(shape)), piece, "shard shape");
      expect_eq(shape_of(x.local_shape()), piece, "this device's piece");
      expect_eq(s.devices_indices_map(shape).size(), size_t{8}, "devices holding pieces");
    }
    expect_piece(x, host, dax::to_string(s.spec()));
  }
}

void block_5_named_sharding() {
  from_jax::block(guide, "block 5: NamedSharding(mesh, spec) and device_put");
  const auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  const dax::NamedSharding data_sharding(mesh, P("data", dax::none));
  const dax::NamedSharding model_sharding(mesh, P(dax::none, "model"));
  const dax::NamedSharding replicated_sharding(mesh, P());
  const auto x = small_ints(128 * 512, 5), w = small_ints(512 * 256, 6);
  const auto x_sharded = dax::device_put(x, {128, 512}, data_sharding);
  const auto w_sharded = dax::device_put(w, {512, 256}, model_sharding);
  const auto w_replicated = dax::device_put(w, {512, 256}, replicated_sharding);
  say("x_sharded: ", x_sharded.sharding(), "\nw_sharded: ", w_sharded.sharding(),
      "\nreplicated: ", w_replicated.sharding());
  if (full) {
    expect_eq(dax::to_string(data_sharding),
              std::string("NamedSharding(mesh=Mesh('data': 4, 'model': 2), spec=P('data', None))"), "printed sharding");
    expect_eq(shape_of(x_sharded.local_shape()), std::string("(32, 512)"), "x's piece");
    expect_eq(shape_of(w_sharded.local_shape()), std::string("(512, 128)"), "w's piece");
    expect_eq(shape_of(w_replicated.local_shape()), std::string("(512, 256)"), "replicated piece");
    // x is split over 'data' only: the two devices of a 'data' row hold the same rows.
    const auto rank = dax::Runtime::current().rank();
    expect_eq(x_sharded.local_index()[0].start, int64_t{32 * (rank / 2)}, "x's first row on this device");
    expect_eq(data_sharding.replica_id(rank), rank % 2, "x's replica id");
  }
  expect_piece(x_sharded, x, "x_sharded");
  expect_piece(w_sharded, w, "w_sharded");
  expect_piece(w_replicated, w, "w replicated");
}

// ---------------------------------------------------------------------------------------------
// Sharding strategies

// The parameters the strategies below shard: one transformer layer of width 512, in Flax's names.
struct Dense {
  Array kernel, bias;
};
DAX_TREE(Dense, kernel, bias)
struct Attention {
  Dense query, key, value, out;
};
DAX_TREE(Attention, query, key, value, out)
struct Layer {
  Attention attention;
  Dense mlp_up, mlp_down;
  Array norm_scale;
};
DAX_TREE(Layer, attention, mlp_up, mlp_down, norm_scale)

constexpr int64_t d_model = 512, d_ff = 2048;

Layer init_layer(const dax::NamedSharding& replicated) {
  auto key = dax::random::key(2024);
  int next = 0;
  auto normal = [&](dax::Shape shape) {
    return dax::random::normal<float>(dax::random::fold_in(key, next++), shape, replicated);
  };
  auto dense = [&](int64_t in, int64_t out) { return Dense{normal({in, out}), normal({out})}; };
  return Layer{{dense(d_model, d_model), dense(d_model, d_model), dense(d_model, d_model), dense(d_model, d_model)},
               dense(d_model, d_ff),
               dense(d_ff, d_model),
               normal({d_model})};
}

/// Each leaf of `sharded` holds the values of the same leaf of `original` (replicated: whole).
void expect_same_values(const Layer& sharded, const Layer& original) {
  dax::tree_for_each_with_path(
      [&](const std::string& path, const Array& s, const Array& o) { expect_piece(s, o.local_to_host(), path); },
      sharded, original);
}

void block_11_data_parallel() {
  from_jax::block(guide, "block 11: data parallelism on a 1-D mesh ('data',)");
  const auto [mesh, full] = from_jax::guide_mesh({8}, {"data"});
  const dax::NamedSharding data_sharding(mesh, P("data")), param_sharding(mesh, P());
  const auto batch_host = small_ints(64 * d_model, 11);
  const auto batch_sharded = dax::device_put(batch_host, {64, d_model}, data_sharding);
  // device_put of a whole tree: every parameter replicated.
  const Layer params = init_layer(param_sharding);
  const Layer params_replicated = dax::tree_map([&](const Array& p) { return dax::device_put(p, param_sharding); }, params);
  say("batch ", shape_of(batch_sharded.shape()), " on ", batch_sharded.sharding().spec(), ": pieces of ",
      shape_of(batch_sharded.local_shape()), "; ", dax::tree_size(params_replicated), " parameters on P()");
  show_picture(batch_sharded, one_device_cells(), full);
  if (full) expect_eq(shape_of(batch_sharded.local_shape()), std::string("(8, 512)"), "batch piece");
  dax::tree_for_each_with_path([&](const std::string& path, const Array& p) {
    expect(p.sharding().is_fully_replicated() && p.local_shape() == p.shape(), path + " replicated whole");
  }, params_replicated);
  expect_piece(batch_sharded, batch_host, "batch");
  expect_same_values(params_replicated, params);
}

/// The guide's shard_weights: kernels with two or more dimensions split by columns, the rest whole.
Layer shard_weights(const Layer& params, const dax::Mesh& mesh) {
  return dax::tree_map_with_path([&](const std::string& path, const Array& array) {
    if (path.find("kernel") != std::string::npos && array.ndim() >= 2)
      return dax::device_put(array, dax::NamedSharding(mesh, P(dax::none, "model")));
    return dax::device_put(array, dax::NamedSharding(mesh, P()));
  }, params);
}

void block_12_tensor_parallel() {
  from_jax::block(guide, "block 12: tensor parallelism on a 1-D mesh ('model',): shard_weights");
  const auto [mesh, full] = from_jax::guide_mesh({8}, {"model"});
  const Layer params = init_layer(dax::NamedSharding(mesh, P()));
  dax::comm_stats().reset();
  const Layer sharded = shard_weights(params, mesh);
  // Replicated to split is a slice of what each device holds: nothing moves.
  expect_eq(dax::comm_stats().total_bytes(), int64_t{0}, "bytes moved by shard_weights");
  dax::tree_for_each_with_path([&](const std::string& path, const Array& p) {
    const bool kernel = path.find("kernel") != std::string::npos;
    say("  ", path, " ", shape_of(p.shape()), " -> ", p.sharding().spec(), ", piece ", shape_of(p.local_shape()));
    expect_eq(dax::to_string(p.sharding().spec()), std::string(kernel ? "P(None, 'model')" : "P()"), path + " spec");
    if (full && kernel)
      expect_eq(p.local_shape()[1], p.shape()[1] / 8, path + ": one eighth of the output columns");
  }, sharded);
  expect_same_values(sharded, params);
}

void block_13_query_projection() {
  from_jax::block(guide, "block 13: query projection (d_model, d_model) under P(None, 'model')");
  const auto [mesh, full] = from_jax::guide_mesh({8}, {"model"});
  const auto wq_host = small_ints(d_model * d_model, 13), x_host = small_ints(16 * d_model, 14);
  const auto wq = dax::device_put(wq_host, {d_model, d_model}, dax::NamedSharding(mesh, P(dax::none, "model")));
  const auto x = dax::device_put(x_host, {16, d_model}, dax::NamedSharding(mesh, P()));
  say("without sharding each device holds ", shape_of(wq.shape()), "; with ", wq.sharding().spec(), ": ",
      shape_of(wq.local_shape()), " (", wq.local_size() * 4, " of ", wq.size() * 4, " bytes)");
  if (full) {
    expect_eq(shape_of(wq.local_shape()), std::string("(512, 64)"), "Wq's piece");
    expect_eq(wq.local_size() * 8, wq.size(), "each device holds 1/8 of Wq");
  }
  // The projection of replicated activations is split like Wq's columns and moves nothing.
  dax::comm_stats().reset();
  const auto q = dax::matmul(x, wq);
  expect_eq(dax::comm_stats().total_bytes(), int64_t{0}, "bytes moved by x @ Wq");
  if (full) expect_eq(dax::to_string(q.sharding().spec()), std::string("P(None, 'model')"), "q's spec");
  if (q.is_addressable()) {
    const auto& box = q.local_index();
    expect(q.local_to_host() == host_matmul_block(x_host, wq_host, d_model, d_model, box[0], box[1]),
           "q's piece equals the host product");
  }
}

void block_14_2d_mesh() {
  from_jax::block(guide, "block 14: 2-D mesh (4 data x 2 model) and its three shardings");
  const auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  const dax::NamedSharding data_sharding(mesh, P("data")), weight_sharding(mesh, P(dax::none, "model")),
      activation_sharding(mesh, P("data", "model"));
  const int64_t batch = 64;
  const auto x_host = small_ints(batch * d_model, 141), w_host = small_ints(d_model * d_ff, 142),
             a_host = small_ints(batch * d_ff, 143);
  const auto x = dax::device_put(x_host, {batch, d_model}, data_sharding);
  const auto w = dax::device_put(w_host, {d_model, d_ff}, weight_sharding);
  const auto a = dax::device_put(a_host, {batch, d_ff}, activation_sharding);
  const std::vector<std::vector<std::string>> cells{
      {"CPU 0,1", "CPU 2,3", "CPU 4,5", "CPU 6,7"}, {"CPU 0,2,4,6", "CPU 1,3,5,7"}, one_device_cells()};
  const std::vector<const Array*> arrays{&x, &w, &a};
  for (size_t i = 0; i < arrays.size(); ++i) {
    say(shape_of(arrays[i]->shape()), " on ", arrays[i]->sharding().spec(), ": pieces of ",
        shape_of(arrays[i]->local_shape()));
    show_picture(*arrays[i], cells[i], full);
  }
  if (full) {
    expect_eq(shape_of(x.local_shape()), std::string("(16, 512)"), "batch piece");
    expect_eq(shape_of(w.local_shape()), std::string("(512, 1024)"), "weight piece");
    expect_eq(shape_of(a.local_shape()), std::string("(16, 1024)"), "activation piece");
  }
  expect_piece(x, x_host, "batch");
  expect_piece(w, w_host, "weight");
  expect_piece(a, a_host, "activation");
}

void block_15_matmul_2d() {
  from_jax::block(guide, "block 15: (batch, d_model) @ (d_model, d_ff) on the (4, 2) mesh");
  const auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  const dax::NamedSharding both(mesh, P("data", "model")), columns(mesh, P(dax::none, "model"));
  const int64_t batch = 64;
  const auto x_host = small_ints(batch * d_model, 151), w_host = small_ints(d_model * d_ff, 152);
  const auto x = dax::device_put(x_host, {batch, d_model}, both);
  const auto w = dax::device_put(w_host, {d_model, d_ff}, columns);
  say(dax::explain_matmul(x, w, both));
  dax::comm_stats().reset();
  const auto y = dax::matmul(x, w, both);
  const auto stats = dax::comm_stats();
  for (const auto& [key, c] : stats.entries())
    say("  ", key.first, " over ", key.second, ": ", c.calls, " call(s), ", c.bytes, " bytes");
  if (full) {
    expect_eq(dax::to_string(y.sharding().spec()), std::string("P('data', 'model')"), "output spec");
    expect_eq(shape_of(y.local_shape()), std::string("(16, 1024)"), "output piece");
    // The guide expects an all-reduce over 'model'. Cheaper, and what dax does: all-gather the
    // input's d_model over 'model' (each device receives its partner's (16, 256) block), then each
    // device multiplies its rows by its columns of the weight with no partial sums to reduce.
    const int64_t received = (2 - 1) * (batch / 4) * (d_model / 2) * 4;
    expect_eq(stats.of("all_gather", "('model',)").calls, int64_t{1}, "all-gathers over 'model'");
    expect_eq(stats.of("all_gather", "('model',)").bytes, received, "all-gather bytes: (m-1) x the input piece");
    expect_eq(stats.total_bytes(), received, "nothing else moves");
  }
  if (y.is_addressable()) {
    const auto& box = y.local_index();
    expect(y.local_to_host() == host_matmul_block(x_host, w_host, d_model, d_ff, box[0], box[1]),
           "output piece equals the host product");
  }
}

/// The guide's FSDP rule: a parameter of more than 1024 elements is split on its first dimension
/// over 'fsdp'; small ones (biases, norms) stay whole.
dax::NamedSharding fsdp_sharding_of(const dax::Shape& shape, const dax::Mesh& mesh) {
  return dax::NamedSharding(mesh, dax::numel(shape) > 1024 ? P("fsdp") : P());
}

/// The guide's shard_fsdp, over any tree of float arrays.
template <class Tree>
Tree shard_fsdp(const Tree& params, const dax::Mesh& mesh) {
  return dax::tree_map([&](const Array& array) { return dax::device_put(array, fsdp_sharding_of(array.shape(), mesh)); },
                       params);
}

void block_16_fsdp() {
  from_jax::block(guide, "block 16: FSDP on a 1-D mesh ('fsdp',): shard_fsdp");
  const auto [mesh, full] = from_jax::guide_mesh({8}, {"fsdp"});
  const Layer params = init_layer(dax::NamedSharding(mesh, P()));
  dax::comm_stats().reset();
  const Layer sharded = shard_fsdp(params, mesh);
  expect_eq(dax::comm_stats().total_bytes(), int64_t{0}, "bytes moved by shard_fsdp");
  dax::tree_for_each_with_path([&](const std::string& path, const Array& p) {
    const bool large = p.size() > 1024;
    say("  ", path, " ", shape_of(p.shape()), " (", p.size(), " elements) -> ", p.sharding().spec(), ", piece ",
        shape_of(p.local_shape()));
    expect_eq(dax::to_string(p.sharding().spec()), std::string(large ? "P('fsdp')" : "P()"), path + " spec");
    if (full && large) {
      expect_eq(p.local_shape()[0] * 8, p.shape()[0], path + ": one eighth of the first dimension");
      expect_eq(p.local_index()[0].start, p.local_shape()[0] * dax::Runtime::current().rank(), path + ": rows of device d");
    }
  }, sharded);
  expect_same_values(sharded, params);
}

void block_17_memory() {
  from_jax::block(guide, "block 17: memory without and with FSDP (400 MB scaled to 4 MB)");
  const auto [mesh, full] = from_jax::guide_mesh({8}, {"fsdp"});
  const int64_t n = mesh.size();
  // The guide's 400 MB model at 1/100: four (1000, 250) float kernels, 4,000,000 bytes.
  const int64_t model_bytes = 4 * 1000 * 250 * 4;
  auto in_use = [] {
    std::vector<int64_t> out;
    for (const auto& m : dax::memory_stats_per_device()) out.push_back(m.bytes_in_use);
    return out;
  };
  auto grown = [](const std::vector<int64_t>& now, const std::vector<int64_t>& before) {
    std::vector<int64_t> d(now.size());
    for (size_t r = 0; r < now.size(); ++r) d[r] = now[r] - before[r];
    return d;
  };
  // Each model is created in its layout, as jit(init, out_shardings=...) would: sharding an existing
  // replicated model (shard_fsdp above) gives each device a view into the replicated buffer, which
  // keeps all of it alive as long as the shards live.
  auto make_model = [&](auto sharding_of) {
    std::vector<Array> model;
    for (int i = 0; i < 4; ++i)
      model.push_back(dax::random::normal<float>(dax::random::key(170 + i), {1000, 250}, sharding_of(dax::Shape{1000, 250})));
    return model;
  };
  auto before = in_use();
  const auto model = make_model([&](const dax::Shape&) { return dax::NamedSharding(mesh, P()); });
  const auto replicated = grown(in_use(), before);
  before = in_use();
  const auto fsdp = make_model([&](const dax::Shape& s) { return fsdp_sharding_of(s, mesh); });
  const auto sharded = grown(in_use(), before);
  const int64_t rank = dax::Runtime::current().rank();
  int64_t total_replicated = 0, total_sharded = 0;
  for (size_t r = 0; r < replicated.size(); ++r) total_replicated += replicated[r], total_sharded += sharded[r];
  say("without FSDP: ", replicated[0], " bytes on device 0, ", total_replicated, " on all ", replicated.size(),
      " ranks; with FSDP: ", sharded[0], " bytes on device 0, ", total_sharded, " on all");
  expect_eq(replicated[rank], model_bytes, "bytes each device holds without FSDP");
  expect_eq(sharded[rank], model_bytes / n, "bytes each device holds with FSDP (model / devices)");
  if (full) {
    expect_eq(total_replicated, 8 * model_bytes, "all devices without FSDP (model x 8)");
    expect_eq(total_sharded, model_bytes, "all devices with FSDP (one model)");
  }
  for (int i = 0; i < 4; ++i) expect_piece(fsdp[i], model[i].local_to_host(), "kernel's shard");
}

void block_18_inspect() {
  from_jax::block(guide, "block 18: inspecting an array's sharding");
  const auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  const dax::NamedSharding sharding(mesh, P("data", "model"));
  const auto host = small_ints(128 * 512, 18);
  const auto x = dax::device_put(host, {128, 512}, sharding);
  std::set<int> device_set;
  for (const auto& [device, index] : x.sharding().devices_indices_map(x.shape())) device_set.insert(device);
  std::string devices;
  for (int d : device_set) devices += (devices.empty() ? "" : ", ") + std::to_string(d);
  say("Shape: ", shape_of(x.shape()), "\nSharding: ", x.sharding(), "\nDevices: {", devices, "}");
  show_picture(x, one_device_cells(), full);
  if (full) {
    expect_eq(devices, std::string("0, 1, 2, 3, 4, 5, 6, 7"), "device set");
    expect_eq(dax::to_string(x.sharding()),
              std::string("NamedSharding(mesh=Mesh('data': 4, 'model': 2), spec=P('data', 'model'))"), "sharding");
  }
  expect_piece(x, host, "x");
}

void block_19_reshard() {
  from_jax::block(guide, "block 19: start data-parallel, reshard to P('model')");
  const auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  const auto host = small_ints(128 * 512, 19);
  const auto x_data = dax::device_put(host, {128, 512}, dax::NamedSharding(mesh, P("data")));
  const dax::NamedSharding target(mesh, P("model"));
  auto process = [&](const Array& x) {
    const auto y = dax::device_put(x, target);
    return y * 2.0f;
  };
  say(dax::explain(x_data, target));
  dax::comm_stats().reset();
  const auto result = process(x_data);
  const auto stats = dax::comm_stats();
  for (const auto& [key, c] : stats.entries())
    say("  device 0: ", key.first, " over ", key.second, ": ", c.calls, " call(s), ", c.bytes, " bytes");
  if (full) {
    // Device (d, m) holds rows [32d, 32d + 32) and needs [64m, 64m + 64): it receives the rows it
    // lacks, 64 or 32 of 512 floats, and no more (the lower bound), in one all-gather over 'data'.
    const int rank = dax::Runtime::current().rank(), d = rank / 2, m = rank % 2;
    const int64_t kept = d / 2 == m ? 32 : 0;
    expect_eq(stats.of("all_gather", "('data',)").calls, int64_t{1}, "all-gathers over 'data'");
    expect_eq(stats.total_bytes(), (64 - kept) * 512 * 4, "bytes received: the rows this device lacks");
    expect_eq(shape_of(result.local_shape()), std::string("(64, 512)"), "piece under P('model')");
  }
  std::vector<float> doubled(host.size());
  for (size_t i = 0; i < host.size(); ++i) doubled[i] = 2 * host[i];
  expect_piece(result, doubled, "process(x)");
}

void block_20_propagation() {
  from_jax::block(guide, "block 20: sharding propagation through dot");
  const auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  const int64_t batch = 64;
  const auto x_host = small_ints(batch * d_model, 201), w_host = small_ints(d_model * d_ff, 202);
  const auto x = dax::device_put(x_host, {batch, d_model}, dax::NamedSharding(mesh, P("data", dax::none)));
  const auto w = dax::device_put(w_host, {d_model, d_ff}, dax::NamedSharding(mesh, P(dax::none, "model")));
  auto compute = [](const Array& a, const Array& b) { return dax::dot(a, b); };
  dax::comm_stats().reset();
  const auto out = compute(x, w);
  say("x ", x.sharding().spec(), " . w ", w.sharding().spec(), " -> ", out.sharding().spec(), ", ",
      dax::comm_stats().total_bytes(), " bytes moved");
  expect_eq(dax::comm_stats().total_bytes(), int64_t{0}, "bytes moved by the dot");
  if (full) expect_eq(dax::to_string(out.sharding().spec()), std::string("P('data', 'model')"), "inferred spec");
  if (out.is_addressable()) {
    const auto& box = out.local_index();
    expect(out.local_to_host() == host_matmul_block(x_host, w_host, d_model, d_ff, box[0], box[1]),
           "output piece equals the host product");
  }
}

void block_23_mesh_shapes() {
  from_jax::block(guide, "block 23: choosing the mesh shape (64 devices scaled to 8)");
  // A two-layer MLP, the batch split over 'data', the hidden units over 'model' (Megatron: W1 by
  // columns, W2 by rows). More 'data': fewer rows per device; more 'model': fewer parameter bytes
  // per device, paid with one all-reduce of the output over 'model'.
  const int64_t batch = 64, d = 256, f = 1024;
  const auto x_host = small_ints(batch * d, 231), w1_host = small_ints(d * f, 232), w2_host = small_ints(f * d, 233);
  std::vector<float> h(batch * f);
  {
    const auto z = host_matmul_block(x_host, w1_host, d, f, {0, batch}, {0, f});
    for (size_t i = 0; i < z.size(); ++i) h[i] = std::max(z[i], 0.0f);
  }
  const auto y_host = host_matmul_block(h, w2_host, f, d, {0, batch}, {0, d});
  for (const dax::Shape& shape : {dax::Shape{8, 1}, dax::Shape{4, 2}, dax::Shape{2, 4}, dax::Shape{1, 8}}) {
    const auto [mesh, full] = from_jax::guide_mesh(shape, {"data", "model"});
    const int64_t dp = mesh.axis_size("data"), mp = mesh.axis_size("model");
    const auto x = dax::device_put(x_host, {batch, d}, dax::NamedSharding(mesh, P("data", dax::none)));
    const auto w1 = dax::device_put(w1_host, {d, f}, dax::NamedSharding(mesh, P(dax::none, "model")));
    const auto w2 = dax::device_put(w2_host, {f, d}, dax::NamedSharding(mesh, P("model", dax::none)));
    const dax::NamedSharding rows(mesh, P("data", dax::none));
    auto forward = [&] { return dax::matmul(dax::relu(dax::matmul(x, w1)), w2, rows); };
    dax::comm_stats().reset();
    Array y = forward();
    const auto stats = dax::comm_stats();
    std::vector<double> ms;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      y = forward();
      (void)y.local_to_host();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const int64_t param_bytes = (w1.local_size() + w2.local_size()) * 4;
    say("mesh (", dp, ", ", mp, "): parameters ", param_bytes, " bytes per device, forward moves ",
        stats.total_bytes(), " bytes per device, ", ms[1], " ms (median of 3)");
    expect_eq(param_bytes, 2 * d * f * 4 / mp, "parameter bytes per device (1/model of the whole)");
    // One all-reduce over 'model' of this device's output rows (none when 'model' has size 1).
    expect_eq(stats.of("all_reduce").bytes, all_reduce_bytes(batch / dp * d, mp), "all-reduce bytes over 'model'");
    expect_eq(stats.total_bytes(), stats.of("all_reduce").bytes, "nothing but that all-reduce moves");
    expect_piece(y, y_host, "MLP output");
  }
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  block_1_mesh();
  block_2_topologies();
  block_3_partition_spec();
  block_4_visual_example();
  block_5_named_sharding();
  block_11_data_parallel();
  block_12_tensor_parallel();
  block_13_query_projection();
  block_14_2d_mesh();
  block_15_matmul_2d();
  block_16_fsdp();
  block_17_memory();
  block_18_inspect();
  block_19_reshard();
  block_20_propagation();
  block_23_mesh_shapes();
  return from_jax::finish("flax_nnx", 16);
}
