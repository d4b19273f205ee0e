// dax::NamedSharding: a mesh plus a partition spec, and JAX's index math on them (which piece of
// a global array each device holds), extended to uneven dimensions by the ceil-chunk rule.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <dax/core/compiled_mode.hpp>
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
  NamedSharding(Mesh mesh, PartitionSpec spec);


  const Mesh& mesh() const { return d_->mesh; }
  const PartitionSpec& spec() const { return d_->spec; }

  /// Mesh axes (indices, major first) splitting array dimension `dim`; empty if replicated.
  const std::vector<int>& dim_axes(size_t dim) const {
    static const std::vector<int> replicated;
    return dim < d_->dims.size() ? d_->dims[dim] : replicated;
  }
  /// Number of leading dimensions the spec names (after dropping trailing replicated entries).
  size_t spec_rank() const { return d_->spec.size(); }
  /// Mesh axes (indices, ascending) over which the value is unreduced.
  const std::vector<int>& unreduced_axes() const { return d_->unreduced; }
  bool is_unreduced() const { return !d_->unreduced.empty(); }
  /// The mesh axis `axis` splits some dimension.
  bool splits(int axis) const {
    for (const auto& d : d_->dims)
      for (int a : d)
        if (a == axis) return true;
    return false;
  }
  bool is_unreduced_over(int axis) const {
    return std::find(d_->unreduced.begin(), d_->unreduced.end(), axis) != d_->unreduced.end();
  }

  /// How many pieces dimension `dim` is split into.
  int64_t num_pieces(size_t dim) const {
    int64_t k = 1;
    for (int a : dim_axes(dim)) k *= d_->mesh.axis_size(a);
    return k;
  }

  void check_rank(const Shape& shape) const {
    DAX_CHECK(d_->spec.size() <= shape.size(), "Sharding ", to_string(*this),
              " is only valid for values of rank at least ", d_->spec.size(),
              ", but was applied to a value of rank ", shape.size());
  }

  /// Which of dimension `dim`'s pieces the device at mesh coordinates `coords` holds: its
  /// coordinates on the dimension's axes read with the first axis most significant.
  int64_t piece_index(const std::vector<int64_t>& coords, size_t dim) const {
    int64_t piece = 0;
    for (int a : dim_axes(dim)) piece = piece * d_->mesh.axis_size(a) + coords[a];
    return piece;
  }

  /// The piece of a global array of `shape` held by the device at mesh coordinates `coords`.
  Box box_at(const std::vector<int64_t>& coords, const Shape& shape) const {
    Box box = full_box(shape);
    for (size_t d = 0; d < d_->dims.size(); ++d)
      if (!d_->dims[d].empty()) box[d] = detail::chunk_piece(shape[d], num_pieces(d), piece_index(coords, d));
    return box;
  }

  /// The piece of the global array held by `device`.
  Box device_indices(int device, const Shape& shape) const {
    check_rank(shape);
    return box_at(d_->mesh.coords(device), shape);
  }

  /// Device id -> the piece it holds (one slice per dimension).
  std::map<int, std::vector<Slice>> devices_indices_map(const Shape& shape) const {
    check_rank(shape);
    std::map<int, std::vector<Slice>> out;
    for (int device : d_->mesh.devices()) out[device] = box_at(d_->mesh.coords(device), shape);
    return out;
  }

  /// The shape every device's piece has; throws for an uneven split, which has no single one.
  Shape shard_shape(const Shape& shape) const {
    check_rank(shape);
    Shape out = shape;
    for (size_t d = 0; d < d_->dims.size(); ++d) {
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
    const auto c = d_->mesh.coords(device);
    int id = 0;
    for (int a = 0; a < d_->mesh.num_axes(); ++a)
      if (!splits(a) && !is_unreduced_over(a)) id = id * d_->mesh.axis_size(a) + c[a];
    return id;
  }

  /// Other devices hold the same data as each device (some mesh axis of more than one device
  /// neither splits the array nor sums over it): work that must leave copies bit-identical asks.
  bool has_copies() const {
    for (int a = 0; a < d_->mesh.num_axes(); ++a)
      if (d_->mesh.axis_size(a) > 1 && !splits(a) && !is_unreduced_over(a)) return true;
    return false;
  }

  /// Every device holds the whole (reduced) value.
  bool is_fully_replicated() const {
    for (int a = 0; a < d_->mesh.num_axes(); ++a)
      if (d_->mesh.axis_size(a) > 1 && (splits(a) || is_unreduced_over(a))) return false;
    return true;
  }

  /// Same mesh, same normalized spec (trailing replicated entries do not matter).
  friend bool operator==(const NamedSharding& a, const NamedSharding& b) {
    if (a.d_ == b.d_) return true;
    return a.d_->hash == b.d_->hash && a.d_->dims == b.d_->dims && a.d_->unreduced == b.d_->unreduced &&
           a.d_->mesh == b.d_->mesh;
  }

  size_t hash() const { return d_->hash; }

 private:
  // Immutable and shared: copying a sharding is a reference-count increment.
  struct Data {
    Mesh mesh;
    PartitionSpec spec;
    std::vector<std::vector<int>> dims;  // mesh axes per dimension, trailing empties dropped
    std::vector<int> unreduced;
    size_t hash;
  };
  std::shared_ptr<const Data> d_;
};

inline std::string to_string(const NamedSharding& s) {
  return "NamedSharding(mesh=" + to_string(s.mesh()) + ", spec=" + to_string(s.spec()) + ")";
}

#if DAX_HEADER_DEFINITIONS  // else compiled once in dax's library (core/compiled_mode.hpp)
DAX_OUTLINE NamedSharding::NamedSharding(Mesh mesh, PartitionSpec spec) {
  auto data = std::make_shared<Data>(Data{std::move(mesh), std::move(spec), {}, {}, 0});
  Data& m = *data;
  std::vector<int> used_by(m.mesh.num_axes(), -1);
  auto resolve = [&](const std::string& name) {
    const int axis = m.mesh.find_axis(name);
    if (axis < 0) {
      std::string names = "(";
      for (int i = 0; i < m.mesh.num_axes(); ++i)
        names += (i ? ", '" : "'") + m.mesh.axis_names()[i] + "'";
      names += m.mesh.num_axes() == 1 ? ",)" : ")";
      detail::fail("Resource axis: ", name, " of ", to_string(m.spec),
                   " is not found in mesh: ", names, ".");
    }
    return axis;
  };
  m.dims.resize(m.spec.size());
  for (size_t d = 0; d < m.spec.size(); ++d) {
    for (const auto& name : m.spec[d].axes()) {
      const int axis = resolve(name);
      DAX_CHECK(used_by[axis] < 0,
                "A single NamedSharding spec specification can map every mesh axis to at most "
                "one positional dimension, but ", to_string(m.spec),
                " has duplicate entries for `", name, "`");
      used_by[axis] = static_cast<int>(d);
      m.dims[d].push_back(axis);
    }
  }
  for (const auto& name : m.spec.unreduced()) {
    const int axis = resolve(name);
    DAX_CHECK(used_by[axis] < 0, to_string(m.spec), " uses mesh axis `", name,
              "` both to split dimension ", used_by[axis], " and as unreduced");
    m.unreduced.push_back(axis);
  }
  std::sort(m.unreduced.begin(), m.unreduced.end());
  while (!m.dims.empty() && m.dims.back().empty()) m.dims.pop_back();
  m.hash = m.mesh.hash();
  for (const auto& d : m.dims) {
    detail::hash_into(m.hash, d.size());
    for (int x : d) detail::hash_into(m.hash, x);
  }
  for (int x : m.unreduced) detail::hash_into(m.hash, x + 1000);
  d_ = std::move(data);
}
#endif

inline std::ostream& operator<<(std::ostream& out, const NamedSharding& s) { return out << to_string(s); }

}  // namespace dax

template <>
struct std::hash<dax::NamedSharding> {
  size_t operator()(const dax::NamedSharding& s) const { return s.hash(); }
};
