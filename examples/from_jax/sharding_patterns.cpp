// Guide 000: a cheat sheet of device sharding patterns drawn as box pictures (1-d data parallel on
// 4 devices, 2-d data x model on a 4x2 grid, a pipeline of stages), with two short JAX snippets.
//
//   mpirun -np 8 --oversubscribe examples/from_jax/from_jax_sharding_patterns   (or -np 1)
//
// Checks, at 8 ranks: that every device holds exactly what the guide's pictures draw — which rows
// and columns, the pieces' shapes, which devices share a piece, replicated parameters, the printed
// shardings and the visualize_sharding pictures — that the 2-d layer's matmul moves nothing, and
// that the pipeline passes each micro-batch from stage to stage as the guide's time table shows
// (with the bytes ppermute moves). At every rank count: the pieces' values and the layer's and the
// pipeline's outputs against plain loops on the host.
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "guide.hpp"

namespace {

using Array = dax::DistArray<float>;

/// A small integer in [-2, 2] for element `i` of the array numbered `seed`: sums of thousands of
/// products of them are exact in float, so the layers' outputs can be compared exactly.
float small_int(uint64_t seed, int64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + uint64_t(i) + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(int64_t(z % 5) - 2);
}

/// A (rows, cols) array of small_int values, each rank making only its own piece.
Array small_int_matrix(uint64_t seed, int64_t rows, int64_t cols, const dax::NamedSharding& s) {
  return dax::make_array_from_callback<float>({rows, cols}, s, [&](const std::vector<dax::Slice>& box) {
    std::vector<float> piece;
    piece.reserve(box[0].size() * box[1].size());
    for (int64_t r = box[0].start; r < box[0].stop; ++r)
      for (int64_t c = box[1].start; c < box[1].stop; ++c) piece.push_back(small_int(seed, r * cols + c));
    return piece;
  });
}

/// Whether this rank's piece of a (rows, cols) small_int array holds the right values.
bool piece_matches(const Array& a, uint64_t seed) {
  if (!a.is_addressable()) return true;
  const auto& box = a.local_index();
  const int64_t cols = a.shape()[1];
  const auto data = a.local_data();
  int64_t k = 0;
  for (int64_t r = box[0].start; r < box[0].stop; ++r)
    for (int64_t c = box[1].start; c < box[1].stop; ++c)
      if (data[k++] != small_int(seed, r * cols + c)) return false;
  return true;
}

/// The devices holding each distinct piece, keyed by the piece's [start, stop) per dimension.
std::map<std::vector<std::pair<int64_t, int64_t>>, std::set<int>> holders(const dax::Shape& shape,
                                                                          const dax::NamedSharding& s) {
  std::map<std::vector<std::pair<int64_t, int64_t>>, std::set<int>> out;
  for (const auto& [device, box] : s.devices_indices_map(shape)) {
    std::vector<std::pair<int64_t, int64_t>> key;
    for (const auto& slice : box) key.emplace_back(slice.start, slice.stop);
    out[key].insert(device);
  }
  return out;
}

/// The cell labels of a sharding picture, row by row ("CPU 0,1", ...).
std::vector<std::vector<std::string>> picture_cells(const std::string& picture) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(picture);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("CPU") == std::string::npos && line.find("GPU") == std::string::npos) continue;
    std::vector<std::string> cells;
    const std::string bar = "│";
    size_t at = line.find(bar);
    while (at != std::string::npos) {
      const size_t next = line.find(bar, at + bar.size());
      if (next == std::string::npos) break;
      std::string cell = line.substr(at + bar.size(), next - at - bar.size());
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cells.push_back(cell);
      at = next;
    }
    rows.push_back(cells);
  }
  return rows;
}

std::string cells_text(const std::vector<std::vector<std::string>>& rows) {
  std::string out;
  for (const auto& row : rows) {
    out += "[";
    for (size_t i = 0; i < row.size(); ++i) out += (i ? " | " : "") + row[i];
    out += "]";
  }
  return out;
}

std::string platform() { return dax::platform_name(dax::Runtime::current().backend()); }

// ---------------------------------------------------------------------------------------------
// Block 1 (L26): 1-d data parallelism. A batch of 128 examples split over a 'data' axis of 4
// devices, 32 each; the model's parameters replicated, a full copy per device.
void data_parallel_1d() {
  from_jax::block("000", "block 1: 1-D data parallelism (L26: Mesh(devices, ('data',)), P('data'))");
  const auto [mesh, full] = from_jax::guide_mesh({4}, {"data"});
  const dax::NamedSharding data_sharding(mesh, dax::P("data"));
  const int64_t batch = 128, features = 4096, outputs = 16;

  const Array x = small_int_matrix(1, batch, features, dax::NamedSharding(mesh, dax::P()));
  const Array x_sharded = dax::device_put(x, data_sharding);
  // The model: one replicated layer, every device holding all of it.
  const Array w = small_int_matrix(2, features, outputs, dax::NamedSharding(mesh, dax::P()));
  // The batch's example numbers, the guide's 1-d picture of which device holds which examples.
  const auto example_ids = dax::arange<int32_t>(batch, data_sharding);

  from_jax::say("x_sharded: ", dax::to_string(x_sharded.shape()), " ", x_sharded.sharding());
  from_jax::say("which examples each device holds:");
  dax::visualize_sharding(example_ids);
  from_jax::say("the model's parameters ", dax::to_string(w.shape()), " ", w.sharding().spec(), ":");
  dax::visualize_sharding(w);

  from_jax::expect(piece_matches(x_sharded, 1), "each device's rows of x to be the host's rows");
  const auto ids = example_ids.addressable_shards();
  if (!ids.empty()) {  // the example numbers a device holds are exactly its slice of the batch
    const auto& s = ids[0];
    for (int64_t i = 0; i < s.data.size(); ++i)
      from_jax::expect_eq(int64_t(s.data[i]), s.index[0].start + i, "example id held");
  }

  if (full) {
    // [0:32] on GPU 0, [32:64] on GPU 1, [64:96] on GPU 2, [96:128] on GPU 3; the job's other ranks
    // are not in the mesh and hold nothing.
    const int rank = dax::Runtime::current().rank();
    const auto shards = x_sharded.addressable_shards();
    from_jax::expect_eq(shards.size(), size_t(rank < 4 ? 1 : 0), "pieces of x on rank " + std::to_string(rank));
    for (int d = 0; d < 4; ++d) {
      const auto box = data_sharding.devices_indices_map(x.shape()).at(d);
      from_jax::expect_eq(box[0].start, int64_t(32 * d), "first row on device " + std::to_string(d));
      from_jax::expect_eq(box[0].stop, int64_t(32 * d + 32), "end row on device " + std::to_string(d));
      from_jax::expect_eq(box[1].size(), features, "columns on device " + std::to_string(d));
    }
    if (rank < 4) {
      from_jax::expect_eq(dax::to_string(x_sharded.local_shape()), std::string("(32, 4096)"), "x's piece shape");
      // Replicated parameters: the whole layer on each device, each a copy (replica id = device).
      const auto p = w.addressable_shards().at(0);
      from_jax::expect_eq(p.data.size(), w.size(), "parameter elements held");
      from_jax::expect_eq(p.replica_id, rank, "replica id of the parameters");
    }
    from_jax::expect(w.sharding().is_fully_replicated(), "the parameters to be fully replicated");
    from_jax::expect_eq(
        cells_text(picture_cells(dax::sharding_picture(example_ids.shape(), data_sharding, platform()))),
        std::string("[CPU 0 | CPU 1 | CPU 2 | CPU 3]"), "the batch picture");
    from_jax::expect_eq(cells_text(picture_cells(dax::sharding_picture(w.shape(), w.sharding(), platform()))),
                        std::string("[CPU 0,1,2,3]"), "the parameters' picture");
  }

  // A data-parallel forward: each device runs its 32 examples through its copy, moving nothing.
  dax::comm_stats().reset();
  const Array y = dax::matmul(x_sharded, w);
  const int64_t moved = dax::comm_stats().total_bytes();
  from_jax::say("forward on the split batch: y ", dax::to_string(y.shape()), " ", y.sharding().spec(), ", ", moved,
                " bytes moved");
  if (full) {
    from_jax::expect_eq(moved, int64_t(0), "bytes the data-parallel forward moves");
    from_jax::expect_eq(y.sharding().spec(), dax::P("data", dax::none), "y's spec");
  }
  if (y.is_addressable()) {
    const auto& box = y.local_index();
    const auto data = y.local_data();
    int64_t k = 0;
    for (int64_t r = box[0].start; r < box[0].stop; ++r)
      for (int64_t c = 0; c < outputs; ++c) {
        float want = 0;
        for (int64_t j = 0; j < features; ++j) want += small_int(1, r * features + j) * small_int(2, j * outputs + c);
        from_jax::expect_eq(data[k++], want, "y[" + std::to_string(r) + ", " + std::to_string(c) + "]");
      }
  }
}

// ---------------------------------------------------------------------------------------------
// Block 2 (L82): 2-d parallelism on a 4x2 grid. The input (128, 4096) split by rows over 'data',
// the layer's weight (4096, 2048) split by columns over 'model', the output split both ways.
void data_and_model_2d() {
  from_jax::block("000", "block 2: 2-D data x model on a 4x2 grid (L82: P('data', None), P(None, 'model'))");
  const auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  const dax::NamedSharding x_sharding(mesh, dax::P("data", dax::none));
  const dax::NamedSharding w_sharding(mesh, dax::P(dax::none, "model"));
  const dax::NamedSharding output_sharding(mesh, dax::P("data", "model"));
  const int64_t batch = 128, features = 4096, hidden = 2048;

  const Array x = small_int_matrix(3, batch, features, x_sharding);
  const Array w = small_int_matrix(4, features, hidden, w_sharding);
  dax::comm_stats().reset();
  const Array out = dax::matmul(x, w, output_sharding);
  const int64_t moved = dax::comm_stats().total_bytes();

  from_jax::say("mesh ", mesh, "; x ", dax::to_string(x.shape()), " ", x_sharding.spec(), ", w ",
                dax::to_string(w.shape()), " ", w_sharding.spec());
  from_jax::say("x (each row of 32 examples on one data row of the grid):");
  dax::visualize_sharding(x);
  from_jax::say("w (1024 columns per model column):");
  dax::visualize_sharding(w);
  from_jax::say("x @ w -> ", out.sharding(), ", ", moved, " bytes moved:");
  dax::visualize_sharding(out);

  from_jax::expect(piece_matches(x, 3), "each device's piece of x to hold the host's values");
  from_jax::expect(piece_matches(w, 4), "each device's piece of w to hold the host's values");

  if (full) {
    from_jax::expect(mesh.devices() == dax::create_device_mesh({4, 2}),
                     "the grid's devices to be create_device_mesh((4, 2))");
    from_jax::expect_eq(dax::to_string(out.sharding()),
                        std::string("NamedSharding(mesh=Mesh('data': 4, 'model': 2), spec=P('data', 'model'))"),
                        "the output's sharding as printed");
    // Data distribution: shard k of the batch (rows 32k..32k+32, every column) on devices 2k, 2k+1.
    std::map<std::vector<std::pair<int64_t, int64_t>>, std::set<int>> want_x, want_w, want_out;
    for (int k = 0; k < 4; ++k) want_x[{{32 * k, 32 * k + 32}, {0, features}}] = {2 * k, 2 * k + 1};
    // Model distribution: column block A = [:, :1024] on 0,2,4,6; block B = [:, 1024:] on 1,3,5,7.
    want_w[{{0, features}, {0, 1024}}] = {0, 2, 4, 6};
    want_w[{{0, features}, {1024, hidden}}] = {1, 3, 5, 7};
    // The output: each device its own (32, 1024) block.
    for (int d = 0; d < 8; ++d)
      want_out[{{32 * (d / 2), 32 * (d / 2) + 32}, {1024 * (d % 2), 1024 * (d % 2) + 1024}}] = {d};
    from_jax::expect(holders(x.shape(), x_sharding) == want_x, "x's row blocks on devices {0,1}, {2,3}, {4,5}, {6,7}");
    from_jax::expect(holders(w.shape(), w_sharding) == want_w, "w's column blocks on devices {0,2,4,6} and {1,3,5,7}");
    from_jax::expect(holders(out.shape(), output_sharding) == want_out, "one (32, 1024) output block per device");
    const int rank = dax::Runtime::current().rank();
    from_jax::expect_eq(dax::to_string(x.local_shape()), std::string("(32, 4096)"), "x's piece");
    from_jax::expect_eq(dax::to_string(w.local_shape()), std::string("(4096, 1024)"), "w's piece");
    from_jax::expect_eq(dax::to_string(out.local_shape()), std::string("(32, 1024)"), "the output's piece");
    from_jax::expect_eq(x.addressable_shards().at(0).replica_id, rank % 2, "x's replica id");
    from_jax::expect_eq(w.addressable_shards().at(0).replica_id, rank / 2, "w's replica id");
    // The row-split input times the column-split weight needs nothing from another device.
    from_jax::expect_eq(moved, int64_t(0), "bytes x @ w moves");
    // The pictures: the guide's debugging section draws the output as this 4x2 grid.
    from_jax::expect_eq(cells_text(picture_cells(dax::sharding_picture(out.shape(), output_sharding, platform()))),
                        std::string("[CPU 0 | CPU 1][CPU 2 | CPU 3][CPU 4 | CPU 5][CPU 6 | CPU 7]"),
                        "the output's picture");
    from_jax::expect_eq(cells_text(picture_cells(dax::sharding_picture(x.shape(), x_sharding, platform()))),
                        std::string("[CPU 0,1][CPU 2,3][CPU 4,5][CPU 6,7]"), "x's picture");
    from_jax::expect_eq(cells_text(picture_cells(dax::sharding_picture(w.shape(), w_sharding, platform()))),
                        std::string("[CPU 0,2,4,6 | CPU 1,3,5,7]"), "w's picture");
    const auto shard = out.addressable_shards().at(0);
    if (rank == 0) {  // the guide's "for shard in x_sharded.addressable_shards" loop, one line per rank
      std::cout << "Device: CPU " << shard.device << ", Shape: " << dax::to_string(out.local_shape())
                << "  (each rank holds one such piece)\n";
    }
  }

  // Values: 512 entries of this device's output block, each a 4096-term dot product of small
  // integers, so exact.
  if (out.is_addressable()) {
    const auto& box = out.local_index();
    const auto data = out.local_data();
    std::mt19937 pick(5 + dax::Runtime::current().rank());
    const int64_t rows = box[0].size(), cols = box[1].size();
    for (int n = 0; n < 512; ++n) {
      const int64_t r = std::uniform_int_distribution<int64_t>(0, rows - 1)(pick);
      const int64_t c = std::uniform_int_distribution<int64_t>(0, cols - 1)(pick);
      const int64_t gr = box[0].start + r, gc = box[1].start + c;
      float want = 0;
      for (int64_t j = 0; j < features; ++j) want += small_int(3, gr * features + j) * small_int(4, j * hidden + gc);
      from_jax::expect_eq(data[r * cols + c], want, "out[" + std::to_string(gr) + ", " + std::to_string(gc) + "]");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The pipeline picture (L133): six stages, stage k + 1 on device k, each holding its own layer;
// micro-batches enter at device 0 and move one stage on per time step, so at time t micro-batch b
// is on device t - b. Each stage records the micro-batch it received (a tag passed along with the
// activations), which gives the guide's time table from the data that actually moved.
void pipeline_stages() {
  from_jax::block("000", "pipeline picture: a stage per device, micro-batches passed on (L133)");
  const int64_t layers = 6, micro = 8, rows = 4, d = 32;
  const auto [mesh, full] = from_jax::guide_mesh({layers}, {"stage"});
  const int stages = int(mesh.shape()[0]);  // 6 at the full mesh, 1 on a lone device
  const int64_t ticks = micro + stages - 1;

  std::mt19937 rng(2026);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(layers * d * d), xs(micro * rows * d);
  for (auto& v : w) v = normal(rng) / std::sqrt(float(d));
  for (auto& v : xs) v = normal(rng);
  const dax::NamedSharding by_stage(mesh, dax::P("stage"));
  const Array weights = dax::device_put(w, {layers, d, d}, by_stage);  // layer k on stage k
  const Array inputs = dax::device_put(xs, {micro, rows, d}, dax::NamedSharding(mesh, dax::P()));

  auto gpipe = dax::shard_map(
      [&](const Array& wb, const Array& xb) {
        const int stage = dax::axis_index("stage");
        const int64_t local_layers = wb.shape()[0];
        std::vector<std::pair<int, int>> next;
        for (int s = 0; s + 1 < stages; ++s) next.push_back({s, s + 1});
        auto carry = dax::zeros<float>({rows, d}, dax::local_sharding());
        auto tag = dax::zeros<float>({1}, dax::local_sharding());  // micro-batch number + 1; 0: a bubble
        std::vector<Array> outputs, seen;
        for (int64_t t = 0; t < ticks; ++t) {
          if (stage == 0) {
            const bool feeding = t < micro;
            carry = feeding ? dax::reshape(dax::slice(xb, {t}, {t + 1}), {rows, d})
                            : dax::zeros<float>({rows, d}, dax::local_sharding());
            tag = dax::full<float>({1}, feeding ? float(t + 1) : 0.0f, dax::local_sharding());
          }
          seen.push_back(tag);
          // Real work (a micro-batch, not a bubble) from the schedule's arithmetic, which the tag
          // that came with it must agree with: the program's path does not hang on values, so a
          // simulation (DAX_SIMULATE, values all zero) follows it too.
          const bool working = t >= stage && t - stage < micro;
          from_jax::expect((tag.local_data()[0] > 0) == working, "the tag to say whether this tick is a bubble");
          if (working) {  // this stage's layers
            for (int64_t l = 0; l < local_layers; ++l)
              carry = dax::tanh(dax::matmul(carry, dax::reshape(dax::slice(wb, {l}, {l + 1}), {d, d})));
            if (stage == stages - 1) outputs.push_back(carry);
          }
          carry = dax::ppermute(carry, "stage", next);
          tag = dax::ppermute(tag, "stage", next);
        }
        if (stage != stages - 1) outputs.assign(micro, dax::zeros<float>({rows, d}, dax::local_sharding()));
        return std::make_tuple(dax::expand_dims(dax::stack(outputs), 0),
                               dax::reshape(dax::concatenate(seen, 0), {1, ticks}));
      },
      mesh, {dax::P("stage"), dax::P()}, {dax::P("stage"), dax::P("stage")});
  dax::comm_stats().reset();
  const auto [out, table] = gpipe(weights, inputs);
  const auto passed = dax::comm_stats().of("ppermute", "('stage',)");

  if (!out.is_addressable()) return;  // ranks beyond the six stages run nothing
  const std::vector<float> y = out.to_host(), when = table.to_host();
  // The guide's time table, read from the tags each stage received.
  if (dax::Runtime::current().rank() == 0) {
    for (int64_t t = 0; t < std::min<int64_t>(ticks, 3); ++t) {
      std::cout << "Time " << t << ":";
      for (int s = stages - 1; s >= 0; --s)
        if (when[s * ticks + t] > 0)
          std::cout << " [Batch " << int(when[s * ticks + t]) - 1 << " on stage " << s << " (CPU " << mesh.devices()[s]
                    << ")]";
      std::cout << "\n";
    }
  }
  int64_t busy = 0;
  for (int s = 0; s < stages; ++s)
    for (int64_t t = 0; t < ticks; ++t) {
      const int64_t b = t - s;  // the micro-batch the guide's table puts on stage s at time t
      const float want = (b >= 0 && b < micro) ? float(b + 1) : 0.0f;
      from_jax::expect_eq(when[s * ticks + t], want,
                          "tag on stage " + std::to_string(s) + " at time " + std::to_string(t));
      busy += want > 0;
    }
  const double used = double(busy) / double(stages * ticks);
  from_jax::say(stages, " stages, ", micro, " micro-batches, ", ticks, " time steps: busy ", busy, " of ",
                stages * ticks, " stage-steps = ", used,
                " = M/(M+S-1); the guide's (M-S+1)/M = ", double(micro - stages + 1) / double(micro));
  from_jax::expect_near(used, double(micro) / double(micro + stages - 1), 1e-12, "the pipeline's busy fraction");

  if (full) {
    // A stage per device: device k holds layer k alone.
    for (int k = 0; k < 6; ++k) {
      const auto box = by_stage.devices_indices_map(weights.shape()).at(k);
      from_jax::expect_eq(box[0].start, int64_t(k), "the layer on device " + std::to_string(k));
      from_jax::expect_eq(box[0].size(), int64_t(1), "layers on device " + std::to_string(k));
    }
    from_jax::expect_eq(dax::to_string(weights.local_shape()), std::string("(1, 32, 32)"), "a stage's weights");
    // Each time step every stage but the first receives the activations and the tag from the one before.
    const int stage = int(mesh.coords(dax::Runtime::current().rank())[0]);
    const int64_t per_step = rows * d * 4 + 4;
    from_jax::expect_eq(passed.bytes, stage == 0 ? int64_t(0) : ticks * per_step, "bytes ppermute brought this stage");
    from_jax::expect_eq(passed.calls, stage == 0 ? int64_t(0) : 2 * ticks, "ppermutes that brought this stage data");
  }

  // Values: the last stage's outputs equal the six layers run in sequence on the host.
  double worst = 0;
  for (int64_t m = 0; m < micro; ++m) {
    std::vector<float> h(xs.begin() + m * rows * d, xs.begin() + (m + 1) * rows * d), nxt(rows * d);
    for (int64_t l = 0; l < layers; ++l) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < d; ++c) {
          float acc = 0;
          for (int64_t k = 0; k < d; ++k) acc += h[r * d + k] * w[(l * d + k) * d + c];
          nxt[r * d + c] = std::tanh(acc);
        }
      h.swap(nxt);
    }
    const int64_t last = int64_t(stages - 1) * micro * rows * d;
    for (int64_t e = 0; e < rows * d; ++e) worst = std::max(worst, double(std::abs(y[last + m * rows * d + e] - h[e])));
  }
  from_jax::say("largest difference from the layers run in sequence: ", worst);
  from_jax::expect_near(worst, 0.0, 1e-5, "the pipeline's outputs against the host");
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  int blocks = 0;
  data_parallel_1d(), ++blocks;
  data_and_model_2d(), ++blocks;
  pipeline_stages(), ++blocks;
  return from_jax::finish("sharding_patterns", blocks);
}
