// dax::Mesh: an N-d array of device ids with a name per axis. Pure metadata; a mesh is checked
// against the running world only when an array is placed on it.
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <dax/core/compiled_mode.hpp>
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

  Mesh(Shape shape, std::vector<std::string> axis_names, std::vector<int> device_ids);

  int num_axes() const { return static_cast<int>(d_->shape.size()); }
  int size() const { return static_cast<int>(d_->devices.size()); }
  const Shape& shape() const { return d_->shape; }
  const std::vector<std::string>& axis_names() const { return d_->names; }
  const std::vector<int>& devices() const { return d_->devices; }
  int64_t axis_size(int axis) const { return d_->shape[axis]; }
  int64_t axis_size(const std::string& name) const { return d_->shape[axis_index(name)]; }

  /// Index of the named axis, or -1.
  int find_axis(const std::string& name) const {
    for (size_t i = 0; i < d_->names.size(); ++i)
      if (d_->names[i] == name) return static_cast<int>(i);
    return -1;
  }
  int axis_index(const std::string& name) const {
    const int i = find_axis(name);
    DAX_CHECK(i >= 0, "Mesh: no axis named '", name, "' in ", to_string(*this));
    return i;
  }

  bool contains(int device) const {
    return device >= 0 && static_cast<size_t>(device) < d_->position.size() && d_->position[device] >= 0;
  }
  /// Row-major position of a device in the mesh.
  int position(int device) const {
    DAX_CHECK(contains(device), "Mesh: device ", device, " is not in ", to_string(*this));
    return d_->position[device];
  }
  /// Mesh coordinates of a device, one per axis.
  std::vector<int64_t> coords(int device) const {
    int64_t p = position(device);
    std::vector<int64_t> c(d_->shape.size());
    for (size_t i = d_->shape.size(); i-- > 0;) {
      c[i] = p % d_->shape[i];
      p /= d_->shape[i];
    }
    return c;
  }
  int device_at(const std::vector<int64_t>& coords) const {
    int64_t p = 0;
    for (size_t i = 0; i < d_->shape.size(); ++i) p = p * d_->shape[i] + coords[i];
    return d_->devices[p];
  }
  bool has_default_devices() const { return d_->default_devices; }

  /// The largest device id (-1 for none): what the world must hold.
  int largest_device() const { return d_->largest; }

  /// Equal meshes share their data (constructing one interns it), so comparing two is a pointer
  /// comparison and caches keyed by meshes cost the same for 8 devices as for 16,384.
  friend bool operator==(const Mesh& a, const Mesh& b) {
    if (a.d_ == b.d_) return true;
    return same_contents(*a.d_, *b.d_);
  }

  size_t hash() const { return d_->hash; }

 private:
  static std::vector<int> iota(int64_t n) {
    std::vector<int> ids(static_cast<size_t>(std::max<int64_t>(n, 0)));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
    return ids;
  }

  // Immutable and shared: copying a mesh is a reference-count increment.
  struct Data {
    Shape shape;
    std::vector<std::string> names;
    std::vector<int> devices;
    std::vector<int> position;  // device id -> row-major position, -1 when absent
    size_t hash = 0;
    int largest = -1;
    bool default_devices = true;  // devices 0..n-1 in row-major order
  };

  static bool same_contents(const Data& a, const Data& b) {
    return a.hash == b.hash && a.shape == b.shape && a.names == b.names && a.devices == b.devices;
  }

  /// The live data of an equal mesh if there is one, else `data` (remembered for the next).
  static std::shared_ptr<const Data> intern(std::shared_ptr<Data> data);
  std::shared_ptr<const Data> d_;
};

namespace detail {

/// Whether `coords` sit at coordinate 0 of every mesh axis in `axes` (the device that holds a
/// value made unreduced over those axes; the others hold zeros).
inline bool at_origin_of(const std::vector<int64_t>& coords, const std::vector<int>& axes) {
  for (int a : axes)
    if (coords[a] != 0) return false;
  return true;
}

/// The devices that share `device`'s coordinates off the mesh axes `axes`, ordered by their
/// coordinates on `axes` with axes[0] major (the rank order of that group's communicator).
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

#if DAX_HEADER_DEFINITIONS  // else compiled once in dax's library (core/compiled_mode.hpp)
DAX_OUTLINE Mesh::Mesh(Shape shape, std::vector<std::string> axis_names, std::vector<int> device_ids) {
  auto data = std::make_shared<Data>();
  Data& m = *data;
  m.shape = std::move(shape);
  m.names = std::move(axis_names);
  m.devices = std::move(device_ids);
  DAX_CHECK(m.shape.size() == m.names.size(), "Mesh: ", m.shape.size(), " axis sizes ",
            to_string(m.shape), " but ", m.names.size(), " axis names");
  for (size_t i = 0; i < m.shape.size(); ++i) {
    DAX_CHECK(m.shape[i] >= 1, "Mesh: axis '", m.names[i], "' must have size >= 1, got ", m.shape[i]);
    DAX_CHECK(!m.names[i].empty(), "Mesh: axis ", i, " has an empty name");
    for (size_t j = 0; j < i; ++j)
      DAX_CHECK(m.names[i] != m.names[j], "Mesh: axis name '", m.names[i], "' appears twice");
  }
  DAX_CHECK(static_cast<int64_t>(m.devices.size()) == numel(m.shape), "Mesh: shape ",
            to_string(m.shape), " holds ", numel(m.shape), " devices but ", m.devices.size(),
            " device ids were given");
  for (size_t p = 0; p < m.devices.size(); ++p) {
    const int d = m.devices[p];
    DAX_CHECK(d >= 0, "Mesh: device ids must be >= 0, got ", d);
    if (static_cast<size_t>(d) >= m.position.size()) m.position.resize(static_cast<size_t>(d) + 1, -1);
    DAX_CHECK(m.position[d] < 0, "Mesh: device id ", d, " appears twice");
    m.position[d] = static_cast<int>(p);
  }
  m.hash = 0x6d657368;
  for (int64_t x : m.shape) detail::hash_into(m.hash, x);
  for (const auto& x : m.names) detail::hash_into(m.hash, x);
  for (int x : m.devices) detail::hash_into(m.hash, x);
  for (int x : m.devices) m.largest = x > m.largest ? x : m.largest;
  for (size_t p = 0; p < m.devices.size(); ++p) m.default_devices = m.default_devices && m.devices[p] == static_cast<int>(p);
  d_ = intern(std::move(data));
}

DAX_OUTLINE std::shared_ptr<const Mesh::Data> Mesh::intern(std::shared_ptr<Data> data) {
  static std::mutex mutex;
  static std::unordered_multimap<size_t, std::weak_ptr<const Data>> live;
  std::lock_guard lock(mutex);
  auto [lo, hi] = live.equal_range(data->hash);
  for (auto it = lo; it != hi;) {
    if (auto other = it->second.lock()) {
      if (same_contents(*other, *data)) return other;
      ++it;
    } else {
      it = live.erase(it);  // a mesh nobody holds any more
    }
  }
  live.emplace(data->hash, data);
  return data;
}
#endif

inline std::ostream& operator<<(std::ostream& out, const Mesh& mesh) { return out << to_string(mesh); }

}  // namespace dax

template <>
struct std::hash<dax::Mesh> {
  size_t operator()(const dax::Mesh& m) const { return m.hash(); }
};
