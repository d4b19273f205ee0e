// dax::Mesh: an N-d array of device ids with a name per axis. Pure metadata; a mesh is checked
// against the running world only when an array is placed on it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/hash.hpp>
#include <dax/core/shape.hpp>

namespace dax {

class Mesh;
inline std::string to_string(const Mesh& mesh);

class Mesh {
 public:
  /// Devices 0..n-1 in row-major order.
  Mesh(Shape shape, std::vector<std::string> axis_names)
      : Mesh(shape, std::move(axis_names), iota(numel(shape))) {}

  Mesh(Shape shape, std::vector<std::string> axis_names, std::vector<int> device_ids)
      : shape_(std::move(shape)), names_(std::move(axis_names)), devices_(std::move(device_ids)) {
    DAX_CHECK(shape_.size() == names_.size(), "Mesh: ", shape_.size(), " axis sizes ",
              to_string(shape_), " but ", names_.size(), " axis names");
    for (size_t i = 0; i < shape_.size(); ++i) {
      DAX_CHECK(shape_[i] >= 1, "Mesh: axis '", names_[i], "' must have size >= 1, got ", shape_[i]);
      DAX_CHECK(!names_[i].empty(), "Mesh: axis ", i, " has an empty name");
      for (size_t j = 0; j < i; ++j)
        DAX_CHECK(names_[i] != names_[j], "Mesh: axis name '", names_[i], "' appears twice");
    }
    DAX_CHECK(static_cast<int64_t>(devices_.size()) == numel(shape_), "Mesh: shape ",
              to_string(shape_), " holds ", numel(shape_), " devices but ", devices_.size(),
              " device ids were given");
    for (size_t p = 0; p < devices_.size(); ++p) {
      const int d = devices_[p];
      DAX_CHECK(d >= 0, "Mesh: device ids must be >= 0, got ", d);
      if (static_cast<size_t>(d) >= position_.size()) position_.resize(d + 1, -1);
      DAX_CHECK(position_[d] < 0, "Mesh: device id ", d, " appears twice");
      position_[d] = static_cast<int>(p);
    }
  }

  int num_axes() const { return static_cast<int>(shape_.size()); }
  int size() const { return static_cast<int>(devices_.size()); }
  const Shape& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return names_; }
  const std::vector<int>& devices() const { return devices_; }
  int64_t axis_size(int axis) const { return shape_[axis]; }
  int64_t axis_size(const std::string& name) const { return shape_[axis_index(name)]; }

  /// Index of the named axis, or -1.
  int find_axis(const std::string& name) const {
    for (size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == name) return static_cast<int>(i);
    return -1;
  }
  int axis_index(const std::string& name) const {
    const int i = find_axis(name);
    DAX_CHECK(i >= 0, "Mesh: no axis named '", name, "' in ", to_string(*this));
    return i;
  }

  bool contains(int device) const {
    return device >= 0 && static_cast<size_t>(device) < position_.size() && position_[device] >= 0;
  }
  /// Row-major position of a device in the mesh.
  int position(int device) const {
    DAX_CHECK(contains(device), "Mesh: device ", device, " is not in ", to_string(*this));
    return position_[device];
  }
  /// Mesh coordinates of a device, one per axis.
  std::vector<int64_t> coords(int device) const {
    int64_t p = position(device);
    std::vector<int64_t> c(shape_.size());
    for (size_t i = shape_.size(); i-- > 0;) {
      c[i] = p % shape_[i];
      p /= shape_[i];
    }
    return c;
  }
  int device_at(const std::vector<int64_t>& coords) const {
    int64_t p = 0;
    for (size_t i = 0; i < shape_.size(); ++i) p = p * shape_[i] + coords[i];
    return devices_[p];
  }
  bool has_default_devices() const {
    for (size_t p = 0; p < devices_.size(); ++p)
      if (devices_[p] != static_cast<int>(p)) return false;
    return true;
  }

  friend bool operator==(const Mesh& a, const Mesh& b) {
    return a.shape_ == b.shape_ && a.names_ == b.names_ && a.devices_ == b.devices_;
  }

  size_t hash() const {
    size_t h = 0x6d657368;
    for (int64_t s : shape_) detail::hash_into(h, s);
    for (const auto& n : names_) detail::hash_into(h, n);
    for (int d : devices_) detail::hash_into(h, d);
    return h;
  }

 private:
  static std::vector<int> iota(int64_t n) {
    std::vector<int> ids(static_cast<size_t>(std::max<int64_t>(n, 0)));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
    return ids;
  }

  Shape shape_;
  std::vector<std::string> names_;
  std::vector<int> devices_;
  std::vector<int> position_;  // device id -> row-major position, -1 when absent
};

namespace detail {

/// The devices that share `device`'s coordinates off the mesh axes `axes`, ordered by their
/// coordinates on `axes` read in mesh order (the rank order of that group's communicator).
inline std::vector<int> group_members(const Mesh& mesh, const std::vector<int>& axes, int device) {
  auto coords = mesh.coords(device);
  int64_t count = 1;
  for (int a : axes) count *= mesh.axis_size(a);
  std::vector<int> members(count);
  for (int64_t m = 0; m < count; ++m) {
    int64_t rest = m;
    for (size_t i = axes.size(); i-- > 0;) {
      coords[axes[i]] = rest % mesh.axis_size(axes[i]);
      rest /= mesh.axis_size(axes[i]);
    }
    members[m] = mesh.device_at(coords);
  }
  return members;
}

}  // namespace detail

inline std::string to_string(const Mesh& mesh) {
  std::ostringstream out;
  out << "Mesh(";
  for (int i = 0; i < mesh.num_axes(); ++i)
    out << (i ? ", " : "") << "'" << mesh.axis_names()[i] << "': " << mesh.axis_size(i);
  if (!mesh.has_default_devices()) {
    out << ", devices=[";
    for (int p = 0; p < mesh.size(); ++p) out << (p ? ", " : "") << mesh.devices()[p];
    out << "]";
  }
  out << ")";
  return out.str();
}

inline std::ostream& operator<<(std::ostream& out, const Mesh& mesh) { return out << to_string(mesh); }

}  // namespace dax

template <>
struct std::hash<dax::Mesh> {
  size_t operator()(const dax::Mesh& m) const { return m.hash(); }
};
