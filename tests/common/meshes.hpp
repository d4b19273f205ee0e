// Meshes and specs enumerated for the exhaustive pure tests.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <dax/sharding/build.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax::test {

/// Every mesh of 1-8 devices with 1-3 axes of size >= 2 (and size 1 for one device), plus a few
/// with axes of size 1 and one with devices out of order.
inline std::vector<Mesh> all_meshes() {
  std::vector<Mesh> out;
  const std::vector<std::string> names{"x", "y", "z"};
  std::function<void(int64_t, Shape)> grow = [&](int64_t left, Shape shape) {
    if (left == 1 && !shape.empty()) {
      out.emplace_back(shape, std::vector<std::string>(names.begin(), names.begin() + shape.size()));
      return;
    }
    if (shape.size() == 3) return;
    for (int64_t f = 2; f <= left; ++f)
      if (left % f == 0) {
        Shape next = shape;
        next.push_back(f);
        grow(left / f, next);
      }
  };
  out.emplace_back(Shape{1}, std::vector<std::string>{"x"});
  for (int64_t n = 2; n <= 8; ++n) grow(n, {});
  out.emplace_back(Shape{1, 2}, std::vector<std::string>{"x", "y"});
  out.emplace_back(Shape{2, 1, 2}, std::vector<std::string>{"x", "y", "z"});
  out.emplace_back(Shape{2, 2}, std::vector<std::string>{"x", "y"}, std::vector<int>{3, 1, 0, 2});
  return out;
}

/// Every sharding of a rank-`ndim` array on `mesh`: each mesh axis unused, unreduced (when
/// `with_unreduced`), or splitting one dimension, in every order within a dimension.
inline std::vector<NamedSharding> all_shardings(const Mesh& mesh, size_t ndim, bool with_unreduced) {
  std::vector<NamedSharding> out;
  const int n = mesh.num_axes();
  const int choices = static_cast<int>(ndim) + (with_unreduced ? 2 : 1);
  int total = 1;
  for (int i = 0; i < n; ++i) total *= choices;
  for (int code = 0; code < total; ++code) {
    std::vector<int> place(n);
    int c = code;
    for (int a = 0; a < n; ++a, c /= choices) place[a] = c % choices;  // ndim: none, ndim+1: unreduced
    std::vector<int> unreduced;
    std::vector<std::vector<int>> dims(ndim);
    for (int a = 0; a < n; ++a) {
      if (place[a] < static_cast<int>(ndim)) dims[place[a]].push_back(a);
      else if (place[a] == static_cast<int>(ndim) + 1) unreduced.push_back(a);
    }
    // Every order of the axes within each dimension.
    std::function<void(size_t)> permute = [&](size_t d) {
      if (d == ndim) {
        out.push_back(detail::make_sharding(mesh, dims, unreduced));
        return;
      }
      std::sort(dims[d].begin(), dims[d].end());
      do permute(d + 1);
      while (std::next_permutation(dims[d].begin(), dims[d].end()));
    };
    permute(0);
  }
  return out;
}

}  // namespace dax::test
