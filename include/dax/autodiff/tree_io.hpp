// Checkpoints of trees: save_tree writes each leaf with dax::save as `<dir>/<path>.npy` (its path
// in the tree: "layers/0/w" -> <dir>/layers/0/w.npy, a lone leaf -> <dir>/array.npy), each in its
// own element type; load_tree reads them back into the shardings of a template tree, on any mesh
// and rank count. A tuple of the parameters and an optimizer's state() saves both at once.
#pragma once

#include <filesystem>
#include <set>
#include <string>
#include <type_traits>

#include <dax/autodiff/tree.hpp>
#include <dax/io/checkpoint.hpp>

namespace dax {
namespace detail {

/// The file of the leaf at `path`.
inline std::filesystem::path tree_leaf_file(const std::filesystem::path& dir, const std::string& path) {
  return dir / ((path.empty() ? std::string("array") : path) + ".npy");
}

/// Every leaf's path must make a file name of its own: components non-empty, not "." or "..",
/// no NUL, and no two leaves on one file (a map key holding '/' could collide). Metadata only, so
/// every rank throws alike before any file is touched.
template <class T>
void check_tree_files(const char* op, const T& tree) {
  std::set<std::string> seen;
  tree_for_each_with_path(
      [&](const std::string& path, const auto&) {
        size_t start = 0;
        while (!path.empty()) {
          const size_t end = path.find('/', start);
          const std::string part = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
          DAX_CHECK(!part.empty() && part != "." && part != ".." && part.find('\0') == std::string::npos, op,
                    ": the leaf at '", path, "' cannot be a file: its path component \"", part,
                    "\" must be non-empty and not '.' or '..'");
          if (end == std::string::npos) break;
          start = end + 1;
        }
        DAX_CHECK(seen.insert(path).second, op, ": two leaves share the path '", path,
                  "' (a map key holding '/'?), so they would share a file");
      },
      tree);
}

}  // namespace detail

/// Saves every leaf of `tree` under `dir` (created): `<dir>/<path>.npy` plus its sidecar, each in
/// its element type, through dax::save (each rank writes its own piece; partial sums are summed
/// first). Collective over every leaf's mesh, leaves in tree order.
template <Tree T>
void save_tree(const std::filesystem::path& dir, const T& tree) {
  detail::check_tree_files("save_tree", tree);
  tree_for_each_with_path([&](const std::string& path, const auto& leaf) { save(detail::tree_leaf_file(dir, path), leaf); },
                          tree);
}

/// Loads a tree saved by save_tree into the structure, element types and shardings of `like`
/// (its values are not read: the current parameters, or a fresh model and optimizer, serve).
/// Each leaf's file must hold that leaf's shape and element type (dax::Error naming the file
/// otherwise, on every rank). Collective over every leaf's mesh.
template <Tree T>
T load_tree(const std::filesystem::path& dir, const T& like) {
  detail::check_tree_files("load_tree", like);
  return tree_map_with_path(
      [&](const std::string& path, const auto& leaf) {
        using E = typename std::remove_cvref_t<decltype(leaf)>::value_type;
        const std::filesystem::path file = detail::tree_leaf_file(dir, path);
        DistArray<E> x = load<E>(file, leaf.sharding());
        DAX_CHECK(x.shape() == leaf.shape(), "load_tree: ", file.string(), " holds shape ", to_string(x.shape()),
                  " where the template's leaf '", path, "' has ", to_string(leaf.shape()));
        return x;
      },
      like);
}

}  // namespace dax
