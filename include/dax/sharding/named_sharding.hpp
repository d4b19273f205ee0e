// dax::NamedSharding: a mesh plus a partition spec, and JAX's index math on them (which piece of
// a global array each device holds), extended to uneven dimensions by the ceil-chunk rule.
#pragma once

#include <algorithm>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/hash.hpp>
#include <dax/core/shape.hpp>
#include <dax/sharding/chunk.hpp>
#include <dax/sharding/mesh.hpp>
#include <dax/sharding/partition_spec.hpp>

namespace dax {

class NamedSharding;
inline std::string to_string(const NamedSharding& s);

class NamedSharding {
 public:
  NamedSharding(Mesh mesh, PartitionSpec spec) : mesh_(std::move(mesh)), spec_(std::move(spec)) {
    std::vector<int> used_by(mesh_.num_axes(), -1);
    auto resolve = [&](const std::string& name) {
      const int axis = mesh_.find_axis(name);
      if (axis < 0) {
        std::string names = "(";
        for (int i = 0; i < mesh_.num_axes(); ++i)
          names += (i ? ", '" : "'") + mesh_.axis_names()[i] + "'";
        names += mesh_.num_axes() == 1 ? ",)" : ")";
        detail::fail("Resource axis: ", name, " of ", to_string(spec_),
                     " is not found in mesh: ", names, ".");
      }
      return axis;
    };
    dims_.resize(spec_.size());
    for (size_t d = 0; d < spec_.size(); ++d) {
      for (const auto& name : spec_[d].axes()) {
        const int axis = resolve(name);
        DAX_CHECK(used_by[axis] < 0,
                  "A single NamedSharding spec specification can map every mesh axis to at most "
                  "one positional dimension, but ", to_string(spec_),
                  " has duplicate entries for `", name, "`");
        used_by[axis] = static_cast<int>(d);
        dims_[d].push_back(axis);
      }
    }
    for (const auto& name : spec_.unreduced()) {
      const int axis = resolve(name);
      DAX_CHECK(used_by[axis] < 0, to_string(spec_), " uses mesh axis `", name,
                "` both to split dimension ", used_by[axis], " and as unreduced");
      unreduced_.push_back(axis);
    }
    std::sort(unreduced_.begin(), unreduced_.end());
    while (!dims_.empty() && dims_.back().empty()) dims_.pop_back();
  }

  const Mesh& mesh() const { return mesh_; }
  const PartitionSpec& spec() const { return spec_; }

  /// Mesh axes (indices, major first) splitting array dimension `dim`; empty if replicated.
  const std::vector<int>& dim_axes(size_t dim) const {
    static const std::vector<int> replicated;
    return dim < dims_.size() ? dims_[dim] : replicated;
  }
  /// Number of leading dimensions the spec names (after dropping trailing replicated entries).
  size_t spec_rank() const { return spec_.size(); }
  /// Mesh axes (indices, ascending) over which the value is unreduced.
  const std::vector<int>& unreduced_axes() const { return unreduced_; }
  bool is_unreduced() const { return !unreduced_.empty(); }
  /// The mesh axis `axis` splits some dimension.
  bool splits(int axis) const {
    for (const auto& d : dims_)
      for (int a : d)
        if (a == axis) return true;
    return false;
  }
  bool is_unreduced_over(int axis) const {
    return std::find(unreduced_.begin(), unreduced_.end(), axis) != unreduced_.end();
  }

  /// How many pieces dimension `dim` is split into.
  int64_t num_pieces(size_t dim) const {
    int64_t k = 1;
    for (int a : dim_axes(dim)) k *= mesh_.axis_size(a);
    return k;
  }

  void check_rank(const Shape& shape) const {
    DAX_CHECK(spec_.size() <= shape.size(), "Sharding ", to_string(*this),
              " is only valid for values of rank at least ", spec_.size(),
              ", but was applied to a value of rank ", shape.size());
  }

  /// The piece of a global array of `shape` held by the device at mesh coordinates `coords`.
  Box box_at(const std::vector<int64_t>& coords, const Shape& shape) const {
    Box box = full_box(shape);
    for (size_t d = 0; d < dims_.size(); ++d) {
      if (dims_[d].empty()) continue;
      int64_t piece = 0, k = 1;
      for (int a : dims_[d]) {
        piece = piece * mesh_.axis_size(a) + coords[a];
        k *= mesh_.axis_size(a);
      }
      box[d] = detail::chunk_piece(shape[d], k, piece);
    }
    return box;
  }

  /// The piece of the global array held by `device`.
  Box device_indices(int device, const Shape& shape) const {
    check_rank(shape);
    return box_at(mesh_.coords(device), shape);
  }

  /// Device id -> the piece it holds (one slice per dimension).
  std::map<int, std::vector<Slice>> devices_indices_map(const Shape& shape) const {
    check_rank(shape);
    std::map<int, std::vector<Slice>> out;
    for (int device : mesh_.devices()) out[device] = box_at(mesh_.coords(device), shape);
    return out;
  }

  /// The shape every device's piece has; throws for an uneven split, which has no single one.
  Shape shard_shape(const Shape& shape) const {
    check_rank(shape);
    Shape out = shape;
    for (size_t d = 0; d < dims_.size(); ++d) {
      const int64_t k = num_pieces(d);
      if (shape[d] % k != 0) {
        std::string factors = "[";
        for (size_t i = 0; i < shape.size(); ++i) factors += (i ? ", " : "") + std::to_string(num_pieces(i));
        detail::fail("Sharding ", to_string(*this), " implies that array axis ", d,
                     " is partitioned ", k, " times, but the dimension size is ", shape[d],
                     " (full shape: ", to_string(shape), ", per-dimension tiling factors: ",
                     factors, "] should evenly divide the shape)");
      }
      out[d] = shape[d] / k;
    }
    return out;
  }

  /// How many devices earlier in mesh order hold the same data (same piece, same partial).
  int replica_id(int device) const {
    const auto c = mesh_.coords(device);
    int id = 0;
    for (int a = 0; a < mesh_.num_axes(); ++a)
      if (!splits(a) && !is_unreduced_over(a)) id = id * mesh_.axis_size(a) + c[a];
    return id;
  }

  /// Every device holds the whole (reduced) value.
  bool is_fully_replicated() const {
    for (int a = 0; a < mesh_.num_axes(); ++a)
      if (mesh_.axis_size(a) > 1 && (splits(a) || is_unreduced_over(a))) return false;
    return true;
  }

  /// Same mesh, same normalized spec (trailing replicated entries do not matter).
  friend bool operator==(const NamedSharding& a, const NamedSharding& b) {
    return a.dims_ == b.dims_ && a.unreduced_ == b.unreduced_ && a.mesh_ == b.mesh_;
  }

  size_t hash() const {
    size_t h = mesh_.hash();
    for (const auto& d : dims_) {
      detail::hash_into(h, d.size());
      for (int a : d) detail::hash_into(h, a);
    }
    for (int a : unreduced_) detail::hash_into(h, a + 1000);
    return h;
  }

 private:
  Mesh mesh_;
  PartitionSpec spec_;
  std::vector<std::vector<int>> dims_;  // mesh axes per dimension, trailing empties dropped
  std::vector<int> unreduced_;
};

inline std::string to_string(const NamedSharding& s) {
  return "NamedSharding(mesh=" + to_string(s.mesh()) + ", spec=" + to_string(s.spec()) + ")";
}

inline std::ostream& operator<<(std::ostream& out, const NamedSharding& s) { return out << to_string(s); }

}  // namespace dax

template <>
struct std::hash<dax::NamedSharding> {
  size_t operator()(const dax::NamedSharding& s) const { return s.hash(); }
};
