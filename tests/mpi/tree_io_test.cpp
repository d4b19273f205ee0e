// Tree checkpoints: parameters and an optimizer's state saved with one sharding, loaded with
// another (another mesh too) bit-exact, one file per leaf named by its path in its own element
// type; training continues from the loaded state exactly as it would have without the round trip.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <dax/autodiff/checkpoint_manager.hpp>
#include <dax/autodiff/tree_io.hpp>
#include <dax/optim/optim.hpp>

#include "helpers.hpp"

namespace fs = std::filesystem;
using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::error_of;
using dax::test::host;
using dax::test::Pick;
using dax::test::world_rank;

namespace tree_io_test {

struct Block {
  DistArray<float> w;
  DistArray<double> b;
};
DAX_TREE(Block, w, b);

}  // namespace tree_io_test

using tree_io_test::Block;

namespace {

/// A fresh directory, the same on every rank, removed (by rank 0) when the test ends.
struct Scratch {
  fs::path dir;
  Scratch() {
    std::string name;
    if (world_rank() == 0) {
      std::random_device device;
      name = (fs::temp_directory_path() / ("dax_tree_io_test_" + std::to_string(device()))).string();
    }
    int64_t n = static_cast<int64_t>(name.size());
    MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    name.resize(n);
    MPI_Bcast(name.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD);
    dir = name;
  }
  ~Scratch() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(dir);
  }
};

using Params = std::map<std::string, std::vector<Block>>;

Params make_params(Pick& pick, const Mesh& mesh, unsigned seed) {
  std::mt19937 rng(seed);
  auto s = [&](size_t ndim) { return dax::test::random_sharding(pick, mesh, ndim); };
  Params out;
  for (const char* name : {"decoder", "encoder"})
    for (int i = 0; i < 2; ++i) {
      const Shape ws{5, 3 + i}, bs{3 + i};
      out[name].push_back(Block{dax::device_put(dax::test::random_values<float>(dax::numel(ws), rng), ws, s(2)),
                                dax::device_put(dax::test::random_values<double>(dax::numel(bs), rng), bs, s(1))});
    }
  return out;
}

/// Every leaf's global values as bytes, in tree order (bit-exact comparisons).
template <class T>
std::vector<std::vector<char>> bytes_of(const T& tree) {
  std::vector<std::vector<char>> out;
  dax::tree_for_each([&](const auto& x) {
    const auto h = host(x);
    const char* p = reinterpret_cast<const char*>(h.data());
    out.emplace_back(p, p + h.size() * sizeof(h[0]));
  }, tree);
  return out;
}

}  // namespace

TEST_CASE("parameters and AdamW state round-trip through save_tree / load_tree with new shardings",
          "[autodiff][tree][io]") {
  Scratch scratch;
  Pick pick(41);
  for (int trial = 0; trial < 2; ++trial) {
    const Mesh& mesh = dax::test::random_mesh(pick);
    Params params = make_params(pick, mesh, 100 + trial);
    dax::optim::AdamW opt(params, {.lr = 0.01});
    for (int step = 0; step < 2; ++step) opt.step(params, make_params(pick, mesh, 200 + step));
    const fs::path dir = scratch.dir / std::to_string(trial);
    dax::save_tree(dir, std::tuple(params, opt.state()));
    MPI_Barrier(MPI_COMM_WORLD);  // ranks outside the mesh read the files' headers: after the save
    if (world_rank() == 0) {
      CHECK(fs::exists(dir / "0/encoder/1/w.npy"));
      CHECK(fs::exists(dir / "1/mu/decoder/0/b.npy"));
      CHECK(fs::exists(dir / "1/count.npy"));
    }

    // Another mesh and other shardings: a fresh model and optimizer serve as the template.
    const Mesh& other = dax::test::random_mesh(pick);
    Params fresh = make_params(pick, other, 999);
    dax::optim::AdamW restored(fresh, {.lr = 0.01});
    auto [loaded, state] = dax::load_tree(dir, std::tuple(fresh, restored.state()));
    restored.set_state(state);
    CHECK(restored.step_count() == 2);
    // host() reads only on the mesh's ranks: compare where a rank is on both meshes.
    const int r = world_rank();
    const bool both = mesh.contains(r) && other.contains(r);
    const auto loaded_bytes = bytes_of(loaded), saved_bytes = bytes_of(params);
    if (both) CHECK(loaded_bytes == saved_bytes);
    const auto restored_state = bytes_of(restored.state()), saved_state = bytes_of(opt.state());
    if (both) CHECK(restored_state == saved_state);
    std::vector<NamedSharding> want, got;
    dax::tree_for_each([&](const auto& x) { want.push_back(x.sharding()); }, fresh);
    dax::tree_for_each([&](const auto& x) { got.push_back(x.sharding()); }, loaded);
    CHECK(got == want);

    // One more step from each gives the same parameters (elementwise updates: bit-exact).
    opt.step(params, make_params(pick, mesh, 300));
    restored.step(loaded, make_params(pick, other, 300));  // the same values on the other mesh
    const auto next_loaded = bytes_of(loaded), next_saved = bytes_of(params);
    if (both) CHECK(next_loaded == next_saved);
  }
}

TEST_CASE("SGD state and a lone leaf round-trip; bad paths and shapes are refused", "[autodiff][tree][io]") {
  Scratch scratch;
  Pick pick(42);
  const Mesh& mesh = dax::test::random_mesh(pick);
  Params params = make_params(pick, mesh, 7);
  dax::optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9});
  opt.step(params, make_params(pick, mesh, 8));
  dax::save_tree(scratch.dir / "sgd", opt.state());
  MPI_Barrier(MPI_COMM_WORLD);  // ranks outside the mesh read the files' headers: after the save
  dax::optim::SGD again(params, {.lr = 0.1, .momentum = 0.9});
  again.set_state(dax::load_tree(scratch.dir / "sgd", again.state()));
  CHECK(bytes_of(again.state()) == bytes_of(opt.state()));

  const auto x = params.at("encoder")[0].w;
  dax::save_tree(scratch.dir / "lone", x);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) CHECK(fs::exists(scratch.dir / "lone" / "array.npy"));
  const auto y = dax::load_tree(scratch.dir / "lone", dax::reshard(x, NamedSharding(mesh, P())));
  CHECK(bytes_of(y) == bytes_of(x));

  const std::map<std::string, DistArray<float>> bad{{"..", x}};
  CHECK(error_of([&] { dax::save_tree(scratch.dir / "bad", bad); }) ==
        "save_tree: the leaf at '..' cannot be a file: its path component \"..\" must be non-empty and not '.' or "
        "'..'");
  using Nested = std::map<std::string, std::map<std::string, DistArray<float>>>;
  CHECK(error_of([&] { dax::save_tree(scratch.dir / "bad", Nested{{"a", {{"", x}}}}); }) ==
        "save_tree: the leaf at 'a/' cannot be a file: its path component \"\" must be non-empty and not '.' or "
        "'..'");
  CHECK(error_of([&] { dax::save_tree(scratch.dir / "bad", Nested{{"a", {{"b/c", x}}}, {"a/b", {{"c", x}}}}); }) ==
        "save_tree: two leaves share the path 'a/b/c' (a map key holding '/'?), so they would share a file");
  // A key holding '/' alone is just a deeper file.
  dax::save_tree(scratch.dir / "deep", Nested{{"a/b", {{"c", x}}}});
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(bytes_of(dax::load_tree(scratch.dir / "deep", Nested{{"a/b", {{"c", x}}}})) == bytes_of(x));

  // A template whose leaf has another shape than the file's.
  const auto wrong = dax::zeros<float>({3, 5}, NamedSharding(mesh, P()));
  CHECK(error_of([&] { dax::load_tree(scratch.dir / "lone", wrong); }) ==
        "load_tree: " + (scratch.dir / "lone" / "array.npy").string() +
            " holds shape (5, 3) where the template's leaf '' has (3, 5)");
}

TEST_CASE("CheckpointManager keeps its policy's steps, outlives an interrupted save and resumes from the latest",
          "[autodiff][tree][io]") {
  Scratch scratch;
  Pick pick(43);
  const int n = dax::test::world_size();
  const Mesh line({n}, {"x"});
  const fs::path root = scratch.dir / "run";
  dax::CheckpointManager manager(root, {.keep_last = 2, .keep_every = 3});
  Params fresh = make_params(pick, line, 999);  // the template restores fill, in other shardings
  CHECK(!manager.latest_step());
  CHECK(!manager.restore_latest(fresh));
  std::map<int, Params> saved;
  for (int step = 1; step <= 7; ++step) {
    saved[step] = make_params(pick, line, 100 + step);
    manager.save(step, saved[step]);
  }
  CHECK(manager.steps() == std::vector<int64_t>{3, 6, 7});  // the last 2, and every 3rd
  CHECK(manager.latest_step() == 7);
  auto latest = manager.restore_latest(fresh);
  REQUIRE(latest);
  CHECK(latest->first == 7);
  CHECK(bytes_of(latest->second) == bytes_of(saved[7]));
  CHECK(bytes_of(manager.restore(3, fresh)) == bytes_of(saved[3]));
  CHECK(error_of([&] { manager.restore(5, fresh); }) ==
        "CheckpointManager::restore: no step 5 under " + root.string() + " (steps there: 3, 6, 7)");

  // A save killed before its rename leaves step_8.partial (and perhaps latest.tmp): not a step, and
  // the next save removes both.
  if (world_rank() == 0) {
    fs::create_directories(root / "step_8.partial" / "w");
    std::ofstream(root / "latest.tmp") << "8\n";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(manager.steps() == std::vector<int64_t>{3, 6, 7});
  CHECK(manager.latest_step() == 7);
  manager.save(8, saved[1]);
  CHECK(manager.steps() == std::vector<int64_t>{3, 6, 7, 8});
  CHECK(manager.latest_step() == 8);
  if (world_rank() == 0) {
    CHECK(!fs::exists(root / "step_8.partial"));
    CHECK(!fs::exists(root / "latest.tmp"));
    std::ifstream marker(root / "latest");
    std::string text((std::istreambuf_iterator<char>(marker)), std::istreambuf_iterator<char>());
    CHECK(text == "8\n");
  }
  // Saving a step again replaces it, through a folder renamed aside (step_8.replaced) that the
  // save removes; one a killed save left aside is removed by the next save.
  manager.save(8, saved[2]);
  CHECK(bytes_of(manager.restore(8, fresh)) == bytes_of(saved[2]));
  if (world_rank() == 0) {
    CHECK(!fs::exists(root / "step_8.replaced"));
    fs::create_directories(root / "step_6.replaced" / "w");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(manager.steps() == std::vector<int64_t>{3, 6, 7, 8});
  manager.save(8, saved[3]);
  CHECK(bytes_of(manager.restore(8, fresh)) == bytes_of(saved[3]));
  CHECK(manager.steps() == std::vector<int64_t>{3, 6, 7, 8});
  if (world_rank() == 0) CHECK(!fs::exists(root / "step_6.replaced"));
  // A marker naming a folder that is gone, or no number: the newest complete step.
  if (world_rank() == 0) fs::remove_all(root / "step_8");
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(manager.latest_step() == 7);
  if (world_rank() == 0) std::ofstream(root / "latest") << "seven\n";
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(manager.latest_step() == 7);

  if (n > 1)
    CHECK(error_of([&] { manager.save(world_rank(), saved[1]); }) ==
          "CheckpointManager::save: the ranks name different steps (from 0 to " + std::to_string(n - 1) + ")");
  CHECK(error_of([&] { manager.save(-1, saved[1]); }) == "CheckpointManager::save: the step must be 0 or more, got -1");
  CHECK(error_of([&] { dax::CheckpointManager(root, {.keep_last = -1}); }) ==
        "CheckpointManager: keep_last (-1) and keep_every (0) must be 0 or more");

  // Parameters and AdamW's state together: training resumes with the same step count and moments.
  dax::CheckpointManager every(scratch.dir / "adamw", {.keep_last = 0});
  Params params = saved[2];
  dax::optim::AdamW opt(params, {.lr = 0.01});
  for (int step = 0; step < 2; ++step) {
    opt.step(params, make_params(pick, line, 300 + step));
    every.save(step, std::tuple(params, opt.state()));
  }
  CHECK(every.steps() == std::vector<int64_t>{0, 1});
  dax::optim::AdamW again(fresh, {.lr = 0.01});
  auto resumed = every.restore_latest(std::tuple(fresh, again.state()));
  REQUIRE(resumed);
  CHECK(resumed->first == 1);
  again.set_state(std::get<1>(resumed->second));
  CHECK(again.step_count() == 2);
  CHECK(bytes_of(std::get<0>(resumed->second)) == bytes_of(params));
  CHECK(bytes_of(again.state()) == bytes_of(opt.state()));
}
