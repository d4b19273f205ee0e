// Sharding rules computed once per (op, operand shapes, operand shardings, cost model) and kept:
// the host path of a repeated op is a hash lookup (shardings hash and compare by precomputed
// hashes first, so a lookup costs the same on a mesh of 8 devices as on one of 16,384).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <dax/core/hash.hpp>
#include <dax/ops/cost.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax::detail {

struct RuleKey {
  int op;  // the rule's family and its parameters, folded into one tag by the caller
  std::vector<Shape> shapes;
  std::vector<NamedSharding> shardings;
  std::vector<int64_t> params;  // axes, flags: whatever else the rule depends on
  CostModel cost{};             // the model the rule chose by (RuleCache::get fills it in)
  friend bool operator==(const RuleKey&, const RuleKey&) = default;
};

struct RuleKeyHash {
  size_t operator()(const RuleKey& k) const {
    size_t h = static_cast<size_t>(k.op);
    for (const auto& s : k.shapes) {
      hash_into(h, s.size());
      for (int64_t d : s) hash_into(h, d);
    }
    for (const auto& s : k.shardings) hash_combine(h, s.hash());
    for (int64_t p : k.params) hash_into(h, p);
    hash_into(h, bits_of(k.cost.link_bytes_per_s));
    hash_into(h, bits_of(k.cost.flops_per_s));
    hash_into(h, bits_of(k.cost.collective_s));
    return h;
  }
};

template <class Rule>
class RuleCache {
 public:
  template <class Make>
  const Rule& get(RuleKey key, Make&& make) {
    key.cost = cost_model();
    std::lock_guard lock(mutex_);
    auto it = rules_.find(key);
    if (it == rules_.end()) it = rules_.emplace(std::move(key), std::make_unique<Rule>(make())).first;
    return *it->second;
  }

  size_t size() const { return rules_.size(); }

 private:
  std::mutex mutex_;
  std::unordered_map<RuleKey, std::unique_ptr<Rule>, RuleKeyHash> rules_;
};

}  // namespace dax::detail
