// A slice's exchange (reshard/slice_exchange.hpp) made concrete for this rank: one all-to-all step
// program like a reshard's, built once per (input shape, window, sharding, direction, item size)
// and run by the same run_step.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <dax/array/reshard_program.hpp>
#include <dax/core/hash.hpp>
#include <dax/reshard/slice_exchange.hpp>

namespace dax::detail {

/// This device's step moving the window `w` of arrays laid out by `s`: an all-to-all over the mesh
/// axes where elements move. Where none do it has no communicator, and only copies what the device
/// keeps. `into_window`: the slice; otherwise its cotangent, the pad, whose new piece is zeros
/// outside the window.
inline StepProgram build_window_step(const Window& w, const NamedSharding& s, bool into_window, int device,
                                     Runtime& rt) {
  const std::vector<int> axes = window_moving_axes(w, s);
  StepProgram p;
  p.kind = StepKind::all_to_all;
  p.axes_text = axes_text(s.mesh(), axes);
  p.ex = window_exchange_for(w, s, axes, device, into_window);
  p.starts_zeroed = !into_window;
  if (axes.empty()) return p;
  join_group(p, s.mesh(), axes, rt);
  lay_out_all_to_all(p);
  return p;
}

struct WindowStepKey {
  Window window;
  NamedSharding sharding;
  bool into_window;
  int64_t item_bytes;
};

/// A key's fields by reference: what lookups hash and compare, so that a hit copies nothing (a
/// slice on a small array would spend much of its time copying its window into a key).
struct WindowStepProbe {
  const Window& window;
  const NamedSharding& sharding;
  bool into_window;
  int64_t item_bytes;
  WindowStepProbe(const Window& w, const NamedSharding& s, bool into, int64_t bytes)
      : window(w), sharding(s), into_window(into), item_bytes(bytes) {}
  // Implicit: the map compares its stored keys to a probe as probes.
  WindowStepProbe(const WindowStepKey& k) : WindowStepProbe(k.window, k.sharding, k.into_window, k.item_bytes) {}
};

struct WindowStepHash {
  using is_transparent = void;
  size_t operator()(const WindowStepProbe& k) const {
    size_t h = k.sharding.hash();
    for (const auto* v : {&k.window.whole, &k.window.lo, &k.window.step, &k.window.shape})
      for (int64_t i : *v) hash_into(h, i);
    hash_into(h, k.into_window);
    hash_into(h, k.item_bytes);
    return h;
  }
};

struct WindowStepEqual {
  using is_transparent = void;
  bool operator()(const WindowStepProbe& a, const WindowStepProbe& b) const {
    return a.into_window == b.into_window && a.item_bytes == b.item_bytes && a.window == b.window &&
           a.sharding == b.sharding;
  }
};

/// Window steps, built once per key. Bounded, unlike the reshard plans: a loop slicing at every
/// offset of a long dimension would add a key per offset, so a full cache starts over. Entries are
/// shared so that starting over never pulls a step from under a slice running it.
class WindowStepCache {
 public:
  template <class Build>
  std::shared_ptr<const StepProgram> get(const WindowStepProbe& probe, Build&& build) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(probe);
    if (it != entries_.end()) return it->second;
    if (entries_.size() >= max_entries) entries_.clear();
    auto step = std::make_shared<const StepProgram>(build());
    entries_.emplace(WindowStepKey{probe.window, probe.sharding, probe.into_window, probe.item_bytes}, step);
    return step;
  }

  size_t size() const { return entries_.size(); }
  void clear() {
    std::lock_guard lock(mutex_);
    entries_.clear();
  }

 private:
  static constexpr size_t max_entries = 4096;
  std::mutex mutex_;
  std::unordered_map<WindowStepKey, std::shared_ptr<const StepProgram>, WindowStepHash, WindowStepEqual> entries_;
};

/// The process's cache of this rank's window steps, tied to the runtime like reshard_programs().
inline WindowStepCache& window_steps() {
  static auto* cache = new WindowStepCache();
  static uint64_t tied_to = 0;
  return tied_to_runtime(*cache, tied_to);
}

/// This rank's step moving the window `w` of an array laid out by `s` (`into_window`: the slice;
/// otherwise the pad), for items of `item_bytes`.
inline std::shared_ptr<const StepProgram> window_step(const Window& w, const NamedSharding& s, bool into_window,
                                                      int64_t item_bytes) {
  return window_steps().get({w, s, into_window, item_bytes}, [&] {
    Runtime& rt = Runtime::current();
    return build_window_step(w, s, into_window, rt.rank(), rt);
  });
}

}  // namespace dax::detail
