// What the runtime keeps per mesh-axis group (its communicator), found by (mesh, axes) with a
// lookup that does not grow with the mesh: meshes hash by a hash computed once and compare by
// pointer (equal meshes share their interned data), so a cached group costs the same to find on
// 8 devices as on 16,384.
#pragma once

#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dax/core/hash.hpp>
#include <dax/sharding/mesh.hpp>

namespace dax::detail {

template <class V>
class GroupTable {
 public:
  /// The value of the group of `axes` on `mesh`, or null.
  V* find(const Mesh& mesh, const std::vector<int>& axes) {
    auto [lo, hi] = index_.equal_range(key_hash(mesh, axes));
    for (auto it = lo; it != hi; ++it) {
      Entry& e = entries_[it->second];
      if (e.axes == axes && e.mesh == mesh) return &e.value;
    }
    return nullptr;
  }

  V& insert(const Mesh& mesh, const std::vector<int>& axes, V value) {
    index_.emplace(key_hash(mesh, axes), entries_.size());
    entries_.push_back(Entry{mesh, axes, std::move(value)});
    return entries_.back().value;
  }

  size_t size() const { return entries_.size(); }
  /// Drops every value, in the order they were inserted (the same on every rank).
  void clear() {
    index_.clear();
    for (auto& e : entries_) e.value = V();
    entries_.clear();
  }

 private:
  struct Entry {
    Mesh mesh;  // held, so an equal mesh made later interns to the same data
    std::vector<int> axes;
    V value;
  };
  static size_t key_hash(const Mesh& mesh, const std::vector<int>& axes) {
    size_t h = mesh.hash();
    for (int a : axes) hash_into(h, a);
    return h;
  }
  std::deque<Entry> entries_;  // insertion order; references stay valid as it grows
  std::unordered_multimap<size_t, size_t> index_;
};

}  // namespace dax::detail
