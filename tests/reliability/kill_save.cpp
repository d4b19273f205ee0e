// Checkpoints that survive a kill (issue 46, part 2), the program tests/reliability/kill_save.sh
// runs and kills:
//   kill_save save ROOT    -- saves step 1, 2, 3, ... through a CheckpointManager (keep the last 3)
//                             until it is killed: a tree of a float32 matrix split over the ranks,
//                             a replicated int32 vector, a bfloat16 matrix split by columns and an
//                             optimizer-like float64 state, each value a function of the step;
//                             prints "saved N" after each step
//   kill_save check ROOT   -- at any rank count: every complete step under ROOT restores bit-exact
//                             (the values its step gives), `latest` names one of them, and whatever else is there is clearly named as
//                             unfinished (step_N.partial, step_N.replaced, latest.tmp, a save's
//                             *.tmp.* files);
//                             prints "checked: ..." and exits 0, or names what is wrong and exits 1
#include <dax/dax.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace {

template <class T>
std::vector<T> values(int64_t step, int64_t n, int salt) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<T>(static_cast<float>((step * 7919 + i * 31 + salt) % 1009) / 8.0f);
  return v;
}

struct State {
  dax::DistArray<float> weights;
  dax::DistArray<int32_t> counts;
  dax::DistArray<dax::bfloat16> half;
  dax::DistArray<double> moments;
};
DAX_TREE(State, weights, counts, half, moments)

/// The state a run saves at `step`: about 4 MB, so that a save takes long enough to be killed in.
State state_at(int64_t step, const dax::Mesh& mesh) {
  const int64_t rows = 512, cols = 1024;
  return State{
      dax::device_put(values<float>(step, rows * cols, 1), {rows, cols}, dax::NamedSharding(mesh, dax::P("r"))),
      dax::device_put(values<int32_t>(step, 1000, 2), {1000}, dax::NamedSharding(mesh, dax::P())),
      dax::device_put(values<dax::bfloat16>(step, 64 * 96, 3), {64, 96}, dax::NamedSharding(mesh, dax::P(dax::none, "r"))),
      dax::device_put(values<double>(step, 300 * 301, 4), {300, 301}, dax::NamedSharding(mesh, dax::P("r")))};
}

template <class T>
bool same(const dax::DistArray<T>& a, const dax::DistArray<T>& b) {
  const auto x = a.to_host(), y = b.to_host();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

bool same(const State& a, const State& b) {
  return same(a.weights, b.weights) && same(a.counts, b.counts) && same(a.half, b.half) && same(a.moments, b.moments);
}

/// Whether a name under ROOT is a complete step, the marker, or clearly an unfinished one.
bool expected_name(const std::string& name) {
  if (name == "latest" || name.rfind("latest.tmp", 0) == 0) return true;
  if (name.rfind("step_", 0) != 0) return false;
  return name.find(".partial") != std::string::npos || name.ends_with(".replaced") ||
         name.find_first_not_of("0123456789", 5) == std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  if (argc != 3) {
    if (rt.rank() == 0) std::fprintf(stderr, "usage: kill_save save|check ROOT\n");
    return 2;
  }
  const std::string mode = argv[1];
  const std::filesystem::path root = argv[2];
  const dax::Mesh mesh({rt.size()}, {"r"});
  dax::CheckpointManager manager(root, {.keep_last = 3});
  if (mode == "save") {
    for (int64_t step = manager.latest_step().value_or(0) + 1;; ++step) {
      manager.save(step, state_at(step, mesh));
      if (rt.rank() == 0) {
        std::printf("saved %lld\n", static_cast<long long>(step));
        std::fflush(stdout);
      }
    }
  }
  if (mode != "check") return 2;
  const State like = state_at(0, mesh);
  const std::vector<int64_t> steps = manager.steps();
  // The marker itself (latest_step() would fall back to the newest step if it named none).
  std::optional<int64_t> latest;
  if (std::ifstream marker(root / "latest"); marker) {
    long long step = -1;
    if (marker >> step) latest = step;
  }
  // `latest` is written after a step's folder gets its name: a run killed between the two leaves
  // it naming the step before, which is where the run resumes (and the newer step is saved again).
  bool ok = !steps.empty() && latest && std::find(steps.begin(), steps.end(), *latest) != steps.end();
  std::string wrong = ok ? "" : "no complete step, or latest names none of them; ";
  for (int64_t step : steps)
    if (!same(manager.restore(step, like), state_at(step, mesh))) {
      ok = false;
      wrong += "step " + std::to_string(step) + " restores other values; ";
    }
  std::string leftovers;
  if (rt.rank() == 0)
    for (const auto& entry : std::filesystem::directory_iterator(root)) {
      const std::string name = entry.path().filename().string();
      if (!expected_name(name)) {
        ok = false;
        wrong += "unexpected " + name + "; ";
      } else if (name != "latest" && name.find('.') != std::string::npos) {
        leftovers += " " + name;
      }
    }
  if (rt.rank() == 0) {
    if (ok)
      std::printf("checked: %zu complete step(s) up to %lld restore bit-exact at %d rank(s); unfinished:%s\n",
                  steps.size(), static_cast<long long>(steps.back()), rt.size(), leftovers.empty() ? " none" : leftovers.c_str());
    else
      std::printf("FAILED: %s\n", wrong.c_str());
  }
  return ok ? 0 : 1;
}
