// Plans computed once per (shape, source, target) and kept for the life of the process.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>

#include <dax/core/hash.hpp>
#include <dax/reshard/planner.hpp>

namespace dax::detail {

struct PlanKey {
  Shape shape;
  NamedSharding src, dst;
  int64_t item_bytes;  // the plan does not depend on it; what is built beside it may
  friend bool operator==(const PlanKey&, const PlanKey&) = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    size_t h = k.src.hash();
    hash_combine(h, k.dst.hash());
    for (int64_t d : k.shape) hash_into(h, d);
    hash_into(h, k.item_bytes);
    return h;
  }
};

/// Cached plan, with `Extra` (per-process data derived from the plan, such as this device's
/// exchanges) built once beside it.
template <class Extra>
class PlanCache {
 public:
  struct Entry {
    ReshardPlan plan;
    Extra extra;
  };

  template <class MakeExtra>
  const Entry& get(const Shape& shape, const NamedSharding& src, const NamedSharding& dst, int64_t item_bytes,
                   MakeExtra&& make_extra) {
    PlanKey key{shape, src, dst, item_bytes};
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      ReshardPlan plan = plan_reshard(shape, src, dst);
      Extra extra = make_extra(plan);
      it = entries_.emplace(std::move(key), std::make_unique<Entry>(Entry{std::move(plan), std::move(extra)})).first;
    }
    return *it->second;
  }

  size_t size() const { return entries_.size(); }
  void clear() {
    std::lock_guard lock(mutex_);
    entries_.clear();
  }

 private:
  std::mutex mutex_;
  std::unordered_map<PlanKey, std::unique_ptr<Entry>, PlanKeyHash> entries_;
};

}  // namespace dax::detail
