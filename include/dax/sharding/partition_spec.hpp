// dax::PartitionSpec (alias dax::P): which mesh axes split each array dimension, plus the mesh
// axes over which the value is unreduced (a partial sum). Pure metadata, checked against a mesh
// by NamedSharding.
#pragma once

#include <cstddef>

#include <algorithm>
#include <initializer_list>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <dax/core/hash.hpp>

namespace dax {

/// Marks a replicated dimension: dax::P("data", dax::none).
struct NoneType {
  friend bool operator==(NoneType, NoneType) { return true; }
};
inline constexpr NoneType none{};

/// Several mesh axes splitting one dimension, the first named the major one.
struct AxisTuple {
  std::vector<std::string> names;
};

template <class... Names>
AxisTuple axes(Names&&... names) {
  return AxisTuple{{std::string(std::forward<Names>(names))...}};
}
inline AxisTuple axes(std::vector<std::string> names) { return AxisTuple{std::move(names)}; }

class PartitionSpec {
 public:
  /// One spec entry: no axis (replicated), one axis, or a tuple of axes.
  class Entry {
   public:
    Entry(NoneType) {}
    /// nullptr reads as None too (what a user writing Python's None in C++ reaches for first).
    Entry(std::nullptr_t) {}
    Entry(const char* name) : axes_{name}, tuple_(false) {}
    Entry(std::string name) : axes_{std::move(name)}, tuple_(false) {}
    Entry(AxisTuple tuple) : axes_(std::move(tuple.names)), tuple_(true) {}

    const std::vector<std::string>& axes() const { return axes_; }
    bool is_none() const { return axes_.empty(); }
    friend bool operator==(const Entry& a, const Entry& b) { return a.axes_ == b.axes_; }

    /// Python's text of the entry: None, 'x', ('x', 'y').
    std::string text() const {
      if (axes_.empty()) return "None";
      if (axes_.size() == 1 && !tuple_) return "'" + axes_[0] + "'";
      std::string s = "(";
      for (size_t i = 0; i < axes_.size(); ++i) s += (i ? ", '" : "'") + axes_[i] + "'";
      return s + (axes_.size() == 1 ? ",)" : ")");
    }

   private:
    std::vector<std::string> axes_;
    bool tuple_ = false;
  };

  PartitionSpec() = default;
  PartitionSpec(std::vector<Entry> entries) : entries_(std::move(entries)) {}
  template <class... Es>
    requires(sizeof...(Es) > 0 && (std::is_convertible_v<Es, Entry> && ...))
  PartitionSpec(Es&&... entries) : entries_{Entry(std::forward<Es>(entries))...} {}

  /// The same spec, with the value unreduced (a partial sum) over the named mesh axes.
  template <class... Names>
    requires(std::is_convertible_v<Names, std::string> && ...)
  PartitionSpec with_unreduced(Names&&... names) const {
    return with_unreduced(std::vector<std::string>{std::string(std::forward<Names>(names))...});
  }
  PartitionSpec with_unreduced(const std::vector<std::string>& names) const {
    PartitionSpec out = *this;
    out.unreduced_.insert(names.begin(), names.end());
    return out;
  }

  /// The same entries with no unreduced axes.
  PartitionSpec without_unreduced() const {
    PartitionSpec out = *this;
    out.unreduced_.clear();
    return out;
  }

  size_t size() const { return entries_.size(); }
  const Entry& operator[](size_t i) const { return entries_[i]; }
  const std::vector<Entry>& entries() const { return entries_; }
  const std::set<std::string>& unreduced() const { return unreduced_; }

  friend bool operator==(const PartitionSpec& a, const PartitionSpec& b) {
    return a.entries_ == b.entries_ && a.unreduced_ == b.unreduced_;
  }

 private:
  std::vector<Entry> entries_;
  std::set<std::string> unreduced_;
};

using P = PartitionSpec;

inline std::string to_string(const PartitionSpec& spec) {
  std::ostringstream out;
  out << "P(";
  for (size_t i = 0; i < spec.size(); ++i) out << (i ? ", " : "") << spec[i].text();
  if (!spec.unreduced().empty()) {
    out << (spec.size() == 0 ? "" : ", ") << "unreduced={";
    size_t i = 0;
    for (const auto& n : spec.unreduced()) out << (i++ ? ", '" : "'") << n << "'";
    out << "}";
  }
  out << ")";
  return out.str();
}

inline std::ostream& operator<<(std::ostream& out, const PartitionSpec& spec) {
  return out << to_string(spec);
}

}  // namespace dax
