// dax::prefetch: a sequence of arrays resharded in order, each started before the previous one is
// used (FSDP's forward prefetch: layer l + 1's weight is all-gathered while layer l computes).
//
//   auto weights = dax::prefetch(w_shards, replicated);  // starts w_shards[0]'s gather
//   for (...) { const auto w = weights.next(); ... }     // waits for it, starts the next
//
// Built on reshard_async: the same plans, bytes and autodiff (each reshard is recorded as it is
// waited for, so its backward is the usual reduce-scatter of the weight's gradient).
#pragma once

#include <deque>
#include <utility>
#include <vector>

#include <dax/array/reshard_async.hpp>

namespace dax {

template <class T>
class Prefetched {
 public:
  /// `targets[i]` is where arrays[i] goes; `ahead` is how many reshards stay in flight beyond the
  /// one being used (more overlaps more, and holds more gathered arrays at once).
  Prefetched(std::vector<DistArray<T>> arrays, std::vector<NamedSharding> targets, size_t ahead = 1)
      : arrays_(std::move(arrays)), targets_(std::move(targets)), ahead_(ahead == 0 ? 1 : ahead) {
    DAX_CHECK(targets_.size() == arrays_.size(), "prefetch: expected one target sharding per array (",
              arrays_.size(), "), got ", targets_.size());
    fill();
  }

  /// The next array in its target sharding; starts the reshards after it.
  DistArray<T> next() {
    DAX_CHECK(!in_flight_.empty(), "prefetch: all ", arrays_.size(), " arrays have been taken");
    PendingArray<T> first = std::move(in_flight_.front());
    in_flight_.pop_front();
    fill();  // start the next before waiting, so it overlaps this wait and what follows it
    return first.wait();
  }

  /// Arrays not taken yet.
  size_t remaining() const { return in_flight_.size() + (arrays_.size() - started_); }

 private:
  void fill() {
    while (started_ < arrays_.size() && in_flight_.size() < ahead_) {
      in_flight_.push_back(reshard_async(arrays_[started_], targets_[started_]));
      ++started_;
    }
  }

  std::vector<DistArray<T>> arrays_;
  std::vector<NamedSharding> targets_;
  size_t ahead_, started_ = 0;
  std::deque<PendingArray<T>> in_flight_;
};

/// `arrays`, each resharded to `target`, one reshard ahead of the program (see Prefetched).
template <class T>
Prefetched<T> prefetch(std::vector<DistArray<T>> arrays, const NamedSharding& target, size_t ahead = 1) {
  std::vector<NamedSharding> targets(arrays.size(), target);
  return Prefetched<T>(std::move(arrays), std::move(targets), ahead);
}

/// The same with a target per array.
template <class T>
Prefetched<T> prefetch(std::vector<DistArray<T>> arrays, std::vector<NamedSharding> targets, size_t ahead = 1) {
  return Prefetched<T>(std::move(arrays), std::move(targets), ahead);
}

}  // namespace dax
