// Training runs that resume themselves (orbax's CheckpointManager, torch DCP with torchtitan's
// checkpointer): one folder per step under a root, written through save_tree, kept by a policy
// (the last N, and every K-th step), a `latest` marker written last, and restore_latest on any mesh
// and rank count.
//
// A step's folder is complete or absent under its final name: save_tree writes into
// `<root>/step_<n>.partial`, which one rename makes `<root>/step_<n>` once every rank has written
// its pieces; then `<root>/latest` (the step's number) is replaced by a rename too. A run killed
// while saving leaves the previous steps and `latest` as they were and a `.partial` folder, clearly
// named, which the next save removes; a step the policy drops is renamed so before it is removed.
// tests/reliability/kill_save.sh kills runs while they save and checks all of this. The manager's work on folders is done by rank 0, every other
// rank waiting; errors are agreed on and thrown on every rank alike (io/coordination.hpp).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <dax/autodiff/tree_io.hpp>
#include <dax/comm/communicator.hpp>
#include <dax/core/error.hpp>
#include <dax/io/coordination.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax {

/// Which steps a CheckpointManager keeps when it saves a new one.
struct CheckpointPolicy {
  int keep_last = 3;   // the newest steps kept (the one just saved among them); 0 keeps every step
  int keep_every = 0;  // also kept: every step that is a multiple of this; 0 for none
};

namespace detail::checkpoint {

/// The step a folder name `step_<n>` stands for, or -1.
inline int64_t step_of_folder(const std::string& name) {
  constexpr std::string_view prefix = "step_";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  int64_t step = -1;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  const auto [end, ec] = std::from_chars(first, last, step);
  return ec == std::errc() && end == last && step >= 0 ? step : -1;
}

/// The complete steps under `root`, ascending (what rank 0 sees on disk).
inline std::vector<int64_t> steps_on_disk(const std::filesystem::path& root) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const int64_t step = step_of_folder(entry.path().filename().string());
    if (step >= 0 && entry.is_directory(ec)) out.push_back(step);
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Rank 0 runs `work`; every rank gets the string it returns, or throws what it threw (as a
/// dax::Error with the same message); also a barrier.
template <class F>
std::string on_rank_zero(Communicator& world, F&& work) {
  std::string out;
  if (world.rank() == 0) {
    try {
      out = work();
    } catch (const std::exception& e) {
      out = std::string("\x01") + e.what();  // an error, told apart from a result
    }
  }
  broadcast(world, out, 0);
  if (!out.empty() && out[0] == '\x01') fail(out.substr(1));
  return out;
}

}  // namespace detail::checkpoint

/// Saves a training state (any tree: parameters, an optimizer's state(), a tuple of both) once per
/// step under one root, keeps the steps its policy says, and restores the latest.
/// Every method is collective over every rank of the job.
class CheckpointManager {
 public:
  explicit CheckpointManager(std::filesystem::path root, CheckpointPolicy policy = {})
      : root_(std::move(root)), policy_(policy) {
    DAX_CHECK(policy_.keep_last >= 0 && policy_.keep_every >= 0, "CheckpointManager: keep_last (",
              policy_.keep_last, ") and keep_every (", policy_.keep_every, ") must be 0 or more");
  }

  const std::filesystem::path& root() const { return root_; }
  const CheckpointPolicy& policy() const { return policy_; }

  /// The folder of step `step`.
  std::filesystem::path step_folder(int64_t step) const { return root_ / ("step_" + std::to_string(step)); }

  /// Saves `tree` as step `step` (the same on every rank), then removes the steps the policy no
  /// longer keeps. Saving a step that exists replaces it.
  template <Tree T>
  void save(int64_t step, const T& tree) {
    detail::Communicator& world = Runtime::current().world();
    agree_on_step(world, "save", step);
    const std::filesystem::path partial = root_ / ("step_" + std::to_string(step) + ".partial");
    detail::checkpoint::on_rank_zero(world, [&] {
      std::filesystem::create_directories(root_);
      remove_partials();
      return std::string();
    });
    save_tree(partial, tree);
    detail::checkpoint::on_rank_zero(world, [&] {
      // A step saved again: the old folder renamed aside first (one rename), so a run killed here
      // leaves the step absent or whole under its name, never half removed (the aside folder, and
      // a .partial one killed before its rename, are what the next save removes).
      const std::filesystem::path final_folder = step_folder(step);
      const std::filesystem::path replaced = root_ / ("step_" + std::to_string(step) + ".replaced");
      const bool again = std::filesystem::exists(final_folder);
      if (again) std::filesystem::rename(final_folder, replaced);
      std::filesystem::rename(partial, final_folder);
      write_latest(step);
      if (again) std::filesystem::remove_all(replaced);
      prune(step);
      return std::string();
    });
  }

  /// The complete steps on disk, ascending.
  std::vector<int64_t> steps() const {
    detail::Communicator& world = Runtime::current().world();
    const std::string text = detail::checkpoint::on_rank_zero(world, [&] {
      std::string out;
      for (int64_t s : detail::checkpoint::steps_on_disk(root_)) out += std::to_string(s) + " ";
      return out;
    });
    std::vector<int64_t> out;
    for (size_t pos = 0; pos < text.size();) {
      const size_t space = text.find(' ', pos);
      out.push_back(std::stoll(text.substr(pos, space - pos)));
      pos = space + 1;
    }
    return out;
  }

  /// The step `latest` names if its folder is there, else the newest complete step (a run killed
  /// between a step's rename and its marker), else none.
  std::optional<int64_t> latest_step() const {
    detail::Communicator& world = Runtime::current().world();
    const std::string text = detail::checkpoint::on_rank_zero(world, [&] {
      std::ifstream in(root_ / "latest");
      std::string word;
      int64_t step = -1;
      if (in >> word) step = detail::checkpoint::step_of_folder("step_" + word);
      std::error_code ec;
      if (step < 0 || !std::filesystem::is_directory(step_folder(step), ec)) {
        const std::vector<int64_t> all = detail::checkpoint::steps_on_disk(root_);
        step = all.empty() ? -1 : all.back();
      }
      return std::to_string(step);
    });
    const int64_t step = std::stoll(text);
    return step < 0 ? std::nullopt : std::optional<int64_t>(step);
  }

  /// Step `step` loaded into the structure, element types and shardings of `like` (load_tree).
  template <Tree T>
  T restore(int64_t step, const T& like) const {
    detail::Communicator& world = Runtime::current().world();
    agree_on_step(world, "restore", step);
    detail::checkpoint::on_rank_zero(world, [&] {
      std::error_code ec;
      if (std::filesystem::is_directory(step_folder(step), ec)) return std::string();
      std::string have;
      for (int64_t s : detail::checkpoint::steps_on_disk(root_)) have += (have.empty() ? "" : ", ") + std::to_string(s);
      detail::fail("CheckpointManager::restore: no step ", step, " under ", root_.string(), " (steps there: ",
           have.empty() ? "none" : have, ")");
    });
    return load_tree(step_folder(step), like);
  }

  /// The latest step and its state loaded into `like`'s shardings; none when nothing was saved.
  template <Tree T>
  std::optional<std::pair<int64_t, T>> restore_latest(const T& like) const {
    const std::optional<int64_t> step = latest_step();
    if (!step) return std::nullopt;
    return std::pair<int64_t, T>(*step, restore(*step, like));
  }

 private:
  /// Every rank must name the same step.
  static void agree_on_step(detail::Communicator& world, const char* op, int64_t step) {
    int64_t range[2] = {-step, step};  // -min, max
    world.host().all_reduce(nullptr, range, 2, DType::int64, detail::ReduceOp::max);
    DAX_CHECK(-range[0] == range[1], "CheckpointManager::", op, ": the ranks name different steps (from ", -range[0],
              " to ", range[1], ")");
    DAX_CHECK(step >= 0, "CheckpointManager::", op, ": the step must be 0 or more, got ", step);
  }

  /// Rank 0: removes what interrupted saves left (`step_<n>.partial`, `step_<n>.replaced`,
  /// `latest.tmp`).
  void remove_partials() const {
    for (const auto& entry : std::filesystem::directory_iterator(root_)) {
      const std::string name = entry.path().filename().string();
      const auto left_by_a_save = [&](std::string_view suffix) {
        return name.size() > suffix.size() && name.ends_with(suffix) &&
               detail::checkpoint::step_of_folder(name.substr(0, name.size() - suffix.size())) >= 0;
      };
      if (name == "latest.tmp" || left_by_a_save(".partial") || left_by_a_save(".replaced"))
        std::filesystem::remove_all(entry.path());
    }
  }

  /// Rank 0: `latest` names `step`, replaced in one rename.
  void write_latest(int64_t step) const {
    const std::filesystem::path tmp = root_ / "latest.tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << step << "\n";
      out.flush();
      DAX_CHECK(out.good(), "CheckpointManager::save: cannot write ", tmp.string());
    }
    std::filesystem::rename(tmp, root_ / "latest");
  }

  /// Rank 0: removes the steps the policy does not keep (never `newest`).
  void prune(int64_t newest) const {
    const std::vector<int64_t> all = detail::checkpoint::steps_on_disk(root_);
    const size_t n = all.size();
    for (size_t i = 0; i < n; ++i) {
      const int64_t s = all[i];
      const bool recent = policy_.keep_last == 0 || n - i <= static_cast<size_t>(policy_.keep_last);
      const bool milestone = policy_.keep_every > 0 && s % policy_.keep_every == 0;
      if (s == newest || recent || milestone) continue;
      // Renamed first: a run killed inside remove_all leaves a folder named unfinished (which the
      // next save removes), never half a step under a step's name.
      const std::filesystem::path doomed = root_ / ("step_" + std::to_string(s) + ".partial");
      std::filesystem::remove_all(doomed);
      std::filesystem::rename(step_folder(s), doomed);
      std::filesystem::remove_all(doomed);
    }
  }

  std::filesystem::path root_;
  CheckpointPolicy policy_;
};

}  // namespace dax
