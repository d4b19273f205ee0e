// A model's arrays by name: a directory of .npy checkpoints, `dir/<name>.npy` each, saved in one
// call whatever their element types (CheckpointEntry) and loaded per element type into a map.
#pragma once

#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <string>

#include <dax/core/error.hpp>
#include <dax/io/load.hpp>
#include <dax/io/save.hpp>
#include <dax/io/text_cursor.hpp>

namespace dax {
namespace detail::checkpoint {

/// Entry names become file names: one path component, nothing hidden or special.
inline void check_entry_name(const char* op, const std::string& name) {
  DAX_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                name.find('\0') == std::string::npos,
            op, ": the entry name \"", npy::printable(name),
            "\" cannot be a file name (it must be non-empty, without '/', and not '.' or '..')");
}

}  // namespace detail::checkpoint

/// One named array of a checkpoint directory: `{"w1", w1}`. Holds any element type, so one call
/// saves a model whose arrays differ in dtype.
class CheckpointEntry {
 public:
  template <class T>
  CheckpointEntry(std::string name, DistArray<T> array)
      : name_(std::move(name)),
        save_([array = std::move(array)](const std::filesystem::path& p) {
          detail::checkpoint::save_file(p, array);
        }) {}
  const std::string& name() const { return name_; }
  void save_to(const std::filesystem::path& file) const { save_(file); }

 private:
  std::string name_;
  std::function<void(const std::filesystem::path&)> save_;
};

/// Saves each entry as `dir/<name>.npy` (+ its sidecar), creating `dir`. Collective: every rank
/// passes the same entries in the same order; each entry is saved over its own mesh.
inline void save(const std::filesystem::path& dir, std::initializer_list<CheckpointEntry> entries) {
  std::set<std::string> seen;
  for (const auto& e : entries) {
    detail::checkpoint::check_entry_name("save", e.name());
    DAX_CHECK(seen.insert(e.name()).second, "save: the entry name \"", e.name(), "\" appears twice");
  }
  for (const auto& e : entries) e.save_to(dir / (e.name() + ".npy"));
}

template <class T>
void save(const std::filesystem::path& dir, const std::map<std::string, DistArray<T>>& arrays) {
  for (const auto& [name, array] : arrays) detail::checkpoint::check_entry_name("save", name);
  for (const auto& [name, array] : arrays) detail::checkpoint::save_file(dir / (name + ".npy"), array);
}

/// Loads `dir/<name>.npy` for each entry into its sharding (all of element type T; load arrays of
/// other types with another call). Collective, entries in the map's (sorted) order.
template <class T>
std::map<std::string, DistArray<T>> load(const std::filesystem::path& dir,
                                         const std::map<std::string, NamedSharding>& shardings) {
  for (const auto& [name, sharding] : shardings) detail::checkpoint::check_entry_name("load", name);
  std::map<std::string, DistArray<T>> out;
  for (const auto& [name, sharding] : shardings)
    out.emplace(name, detail::checkpoint::load_file<T>(dir / (name + ".npy"), sharding));
  return out;
}

}  // namespace dax
