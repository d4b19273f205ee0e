// The meta backend (issue 43, parts 1-4): a training step run on simulated devices (dax::simulate,
// dax::MetaDevices) reports, for the device it plays, exactly the collectives and bytes the real
// step receives on that rank and the same peak memory, at every world size the suite runs; the
// same step plans on 16,384 simulated devices in one process; bad worlds are errors.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>

#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::error_of;
using dax::test::world_size;

namespace {

struct Sizes {
  int64_t batch, in, hidden, out;
};

struct Trained {
  std::vector<DistArray<float>> params;
  dax::optim::AdamWState<std::vector<DistArray<float>>> state;
};

/// A two-layer MLP's training step, Megatron-split over ('data', 'model'): built, differentiated
/// and updated with AdamW inside, as a user's step would be. Returns the parameters and the
/// optimizer's state, so what they hold is still counted when the step returns.
Trained train_step(const Mesh& mesh, Sizes s) {
  const auto k = dax::random::split(dax::random::key(7), 4);
  const auto x = dax::random::normal<float>(k[0], {s.batch, s.in}, NamedSharding(mesh, P("data")));
  const auto y = dax::random::normal<float>(k[1], {s.batch, s.out}, NamedSharding(mesh, P("data")));
  std::vector<DistArray<float>> params{
      dax::random::normal<float>(k[2], {s.in, s.hidden}, NamedSharding(mesh, P(dax::none, "model")), 0.f, 0.3f),
      dax::random::normal<float>(k[3], {s.hidden, s.out}, NamedSharding(mesh, P("model")), 0.f, 0.3f)};
  dax::optim::AdamW opt(params, {.lr = 1e-2f});
  const auto loss = [&](const std::vector<DistArray<float>>& p) {
    return dax::mean(dax::square(dax::matmul(dax::tanh(dax::matmul(x, p[0])), p[1]) - y));
  };
  for (int step = 0; step < 2; ++step) {
    auto [value, grads] = dax::value_and_grad(loss)(params);
    opt.step(params, grads);
  }
  return {params, opt.state()};
}

Mesh world_mesh(int n) {
  const int model = n % 2 == 0 && n >= 4 ? 2 : 1;
  return Mesh({n / model, model}, {"data", "model"});
}

std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> counts(const dax::CommStats& stats) {
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> out;
  for (const auto& [key, c] : stats.entries()) out[key] = {c.calls, c.bytes};
  return out;
}

}  // namespace

TEST_CASE("meta: a simulated step receives the bytes the real one does, and holds the same memory", "[meta]") {
  const int n = world_size();
  const Sizes sizes{12, 6, 10, 5};  // uneven over every mesh of 1-8 devices
  // The real step on this rank.
  dax::comm_stats().reset();
  const int64_t before = dax::memory_stats().bytes_in_use;
  dax::reset_peak_memory();
  int64_t real_final = 0;
  {
    const auto kept = train_step(world_mesh(n), sizes);
    real_final = dax::memory_stats().bytes_in_use - before;
  }
  const int64_t real_peak = dax::memory_stats().peak_bytes_in_use - before;
  const std::vector<dax::MemoryPartBytes> real_parts = dax::memory_stats().parts;
  const auto real = counts(dax::comm_stats());
  REQUIRE(!real.empty() == (n > 1));
  // The same step on n simulated devices, this process playing this rank's device.
  dax::comm_stats().reset();
  const int rank = dax::Runtime::current().rank();
  int64_t param_bytes = 0;  // this device's pieces of the parameters the step returns
  const dax::SimulationReport report = dax::simulate({.count = n, .device = rank}, [&] {
    Trained t = train_step(world_mesh(n), sizes);
    dax::tree_for_each([&](const DistArray<float>& p) { param_bytes += dax::numel(p.local_shape()) * 4; }, t.params);
    return t;
  });
  CHECK(dax::Runtime::current().backend() == dax::Backend::cpu);  // the real runtime is back
  CHECK(dax::comm_stats().total_calls() == 0);                    // and its counters untouched
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> simulated;
  for (const auto& c : report.collectives) simulated[{c.kind, c.axes}] = {c.calls, c.bytes};
  CHECK(simulated == real);
  CHECK(report.peak_bytes == real_peak);
  CHECK(report.final_bytes == real_final);
  // The peak and the end by part (dax::MemoryPart): AdamW labels the parameters and its two
  // moments (in the parameters' layout here), value_and_grad its forward and backward; the parts
  // sum to the totals, and every named part is the real run's.
  const auto part = [&](const std::string& name) {
    for (const auto& p : report.parts)
      if (p.name == name) return p;
    FAIL("no memory part '" << name << "'");
    return dax::MemoryPartBytes{};
  };
  int64_t peak_sum = 0, end_sum = 0;
  for (const auto& p : report.parts) peak_sum += p.at_peak, end_sum += p.bytes_in_use;
  CHECK(peak_sum == report.peak_bytes);
  CHECK(end_sum == report.final_bytes);
  CHECK(part("parameters").bytes_in_use == param_bytes);
  CHECK(part("parameters").at_peak == param_bytes);
  CHECK(part("optimizer state").bytes_in_use == 2 * param_bytes);
  CHECK(part("forward (activations kept for the backward)").at_peak > 0);
  CHECK(part("backward (temporaries)").bytes_in_use == 0);
  CHECK(part("gradients").bytes_in_use == 0);  // the step's gradient trees are gone when it returns
  for (const auto& r : real_parts)
    if (r.name != "other") {
      INFO(r.name);
      CHECK(part(r.name).at_peak == r.at_peak);
    }
  CHECK(report.table().find("at the peak: ") != std::string::npos);
  CHECK(report.json().find("\"parts\": [{\"name\": \"other\"") != std::string::npos);
  CHECK(report.devices == n);
  CHECK(report.device == rank);
  // Two steps of three products forward and (up to) six backward on this device's pieces.
  CHECK(report.gemm_flops > 0);
  CHECK(report.step_s() == Approx(report.communication_s() + report.compute_s()));
  CHECK(report.json().find("\"devices\": " + std::to_string(n)) != std::string::npos);
}

TEST_CASE("meta: the gradients count as their own memory part, apart from the backward's temporaries", "[meta]") {
  const int n = world_size();
  const Mesh mesh = world_mesh(n);
  const Sizes s{12, 6, 10, 5};
  const auto k = dax::random::split(dax::random::key(11), 3);
  const auto x = dax::random::normal<float>(k[0], {s.batch, s.in}, NamedSharding(mesh, P("data")));
  const std::vector<DistArray<float>> params{
      dax::random::normal<float>(k[1], {s.in, s.hidden}, NamedSharding(mesh, P(dax::none, "model"))),
      dax::random::normal<float>(k[2], {s.hidden, s.out}, NamedSharding(mesh, P("model")))};
  const auto loss = [&](const std::vector<DistArray<float>>& p) {
    return dax::sum(dax::square(dax::matmul(dax::tanh(dax::matmul(x, p[0])), p[1])));
  };
  const auto gradients_in_use = [] {
    for (const auto& p : dax::memory_stats().parts)
      if (p.name == "gradients") return p.bytes_in_use;
    return int64_t{0};
  };
  const int64_t before = gradients_in_use();
  int64_t held = 0;  // this device's pieces of the gradient tree
  {
    const auto [value, grads] = dax::value_and_grad(loss)(params);
    for (const auto& g : grads) {
      REQUIRE(g.sharding() == params[&g - grads.data()].sharding());
      held += dax::numel(g.local_shape()) * 4;
    }
    CHECK(gradients_in_use() - before == held);
  }
  CHECK(gradients_in_use() == before);  // let go with the tree
}

TEST_CASE("meta: one report per class of devices, each the same as simulating every device of it", "[meta]") {
  // The batch splits evenly over 'data' (4, 4), the hidden layer unevenly over 'model' (3, 3, 3, 1):
  // the devices at model = 3 hold and move less, whatever their 'data' coordinate.
  const Sizes sizes{8, 6, 10, 5};
  const auto step = [&] { return train_step(Mesh({2, 4}, {"data", "model"}), sizes); };
  const dax::SimulationClasses found = dax::simulate_classes({.count = 8}, step);
  REQUIRE(found.varying_axes == std::vector<std::string>{"model"});
  CHECK(found.exact);
  REQUIRE(found.classes.size() == 2);
  CHECK(found.classes[0].count == 6);
  CHECK(found.classes[1].count == 2);
  CHECK(found.classes[0].members == "model=0; model=1; model=2 (any 'data')");
  CHECK(found.classes[1].members == "model=3 (any 'data')");
  CHECK(found.simulations == 5);  // devices 0 (the origin), 4 (data = 1, the last), 1 and 3 (the model probes), 2
  for (int device = 0; device < 8; ++device) {
    INFO("device " << device);
    const dax::SimulationReport alone = dax::simulate({.count = 8, .device = device}, step);
    CHECK(dax::detail::same_view(found.classes[device % 4 == 3 ? 1 : 0].report, alone));
    CHECK_FALSE(dax::detail::same_view(found.classes[device % 4 == 3 ? 0 : 1].report, alone));
  }
  CHECK(found.table().find("2 classes of devices among 8 simulated devices") == 0);
  CHECK(found.json().find("\"varying_axes\": [\"model\"]") != std::string::npos);
  // Nothing uneven: one class, simulated along each axis once.
  const auto even = dax::simulate_classes({.count = 8}, [&] { return train_step(Mesh({2, 4}, {"data", "model"}), {8, 6, 8, 4}); });
  REQUIRE(even.classes.size() == 1);
  CHECK(even.classes[0].count == 8);
  CHECK(even.varying_axes.empty());
  CHECK(even.classes[0].members == "every device");
}

TEST_CASE("meta: the report lists the moves ops made of their inputs on their own", "[meta]") {
  // x is split by rows, y by columns: their sum takes y as x is, a move the step did not write
  // (dax::ExplicitSharding would refuse it). The explicit dax::reshard after it is not listed.
  const auto step = [] {
    const Mesh mesh({4}, {"x"});
    const auto x = dax::zeros<float>({8, 12}, NamedSharding(mesh, P("x", dax::none)));
    const auto y = dax::zeros<float>({8, 12}, NamedSharding(mesh, P(dax::none, "x")));
    const auto z = x + y;
    return dax::reshard(z, NamedSharding(mesh, P(dax::none, "x")));
  };
  const dax::SimulationReport r = dax::simulate({.count = 4, .device = 1}, step);
  REQUIRE(r.implicit_reshards.size() == 1);
  const auto& move = r.implicit_reshards[0];
  CHECK(move.op == "add");
  CHECK(move.array == "float32(8, 12)");
  CHECK(move.from == "P(None, 'x')");
  CHECK(move.to == "P('x', None)");
  CHECK(move.count == 1);
  // Each device takes its 2 rows of y and holds 3 of their 12 columns already: 2 x 9 floats come in.
  CHECK(move.bytes == 2 * 9 * 4);
  CHECK(r.table().find("implicit reshards (an op moved an input on its own") != std::string::npos);
  CHECK(r.json().find("\"implicit_reshards\": [{\"op\": \"add\"") != std::string::npos);
  // A step that writes every move lists none.
  const auto clean = dax::simulate({.count = 4, .device = 1}, [] {
    const Mesh mesh({4}, {"x"});
    return dax::zeros<float>({8, 12}, NamedSharding(mesh, P("x", dax::none))) * 2.0f;
  });
  CHECK(clean.implicit_reshards.empty());
  CHECK(clean.table().find("implicit reshards: none") != std::string::npos);
}

TEST_CASE("meta: a step plans on 16,384 simulated devices in one process", "[meta]") {
  const auto started = std::chrono::steady_clock::now();
  const Sizes sizes{128 * 8, 64, 128 * 16, 32};
  int64_t piece = -1;
  const auto report = dax::simulate({.count = 16384, .device = 16383}, [&] {
    const Mesh mesh({128, 128}, {"data", "model"});
    const auto w = dax::zeros<float>({sizes.in, sizes.hidden}, NamedSharding(mesh, P(dax::none, "model")));
    piece = dax::memory_stats().bytes_in_use;  // one column block: in x hidden / 128 floats
    CHECK(dax::sum(w).to_host()[0] == 0.0f);  // values read back are zeros
    return train_step(mesh, sizes);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(report.table() << "simulated in " << seconds << " s");
  CHECK(piece == sizes.in * sizes.hidden / 128 * 4);
  // Parameters and AdamW's two moments, this device's pieces: 3 x (in x hidden + hidden x out) / 128.
  CHECK(report.final_bytes >= 3 * (sizes.in * sizes.hidden + sizes.hidden * sizes.out) / 128 * 4);
  CHECK(report.peak_bytes > report.final_bytes);
  CHECK(report.bytes_received() > 0);
  bool model_all_reduce = false;  // the row-parallel product's partial sums over ('model',)
  for (const auto& c : report.collectives) model_all_reduce |= c.axes == "('model',)";
  CHECK(model_all_reduce);
  CHECK(seconds < 30);
}

TEST_CASE("meta: a bad simulated world is an error on every rank", "[meta]") {
  CHECK(error_of([] { dax::simulate({.count = 0}, [] {}); }) ==
        "dax::MetaDevices: expected count >= 1 and 0 <= device < count, got count 0 and device 0");
  CHECK(error_of([] { dax::simulate({.count = 4, .device = 4}, [] {}); }) ==
        "dax::MetaDevices: expected count >= 1 and 0 <= device < count, got count 4 and device 4");
  CHECK(error_of([] { dax::simulate({.count = 4}, [] { dax::simulate({.count = 2}, [] {}); }); }) ==
        "dax: a meta runtime is already alive; simulate one world at a time");
  CHECK(dax::Runtime::current().backend() == dax::Backend::cpu);
  // A mesh larger than the simulated world, as for a real one.
  CHECK(error_of([] {
          dax::simulate({.count = 4}, [] {
            const Mesh mesh({8}, {"x"});
            (void)dax::sum(dax::ones<float>({8}, NamedSharding(mesh, P("x"))));
          });
        }).find("needs 8 devices") != std::string::npos);
}
