// Parameter trees: every container alone and nested, DAX_TREE structs, leaves of mixed element
// types, paths and visiting order, mutable visits, and trees whose structures differ (an error
// naming the path, before any leaf is visited).
#include <catch2/catch.hpp>

#include <array>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <dax/autodiff/tree.hpp>

#include "helpers.hpp"

using dax::DistArray;
using dax::NamedSharding;
using dax::Shape;
using dax::test::error_of;
using dax::test::host;
using dax::test::Pick;

namespace tree_test {

struct Layer {
  DistArray<float> w;
  DistArray<double> b;
};
DAX_TREE(Layer, w, b);

struct Model {
  std::vector<Layer> layers;
  int not_a_leaf = 7;  // left out of the tree, copied by tree_map
  std::map<std::string, DistArray<int32_t>> tables;
};
DAX_TREE(Model, layers, tables)  // the ';' is optional

struct Plain {
  DistArray<float> w;
};

}  // namespace tree_test

using tree_test::Layer;
using tree_test::Model;

static_assert(dax::is_tree_v<DistArray<float>>);
static_assert(dax::is_tree_v<const DistArray<int64_t>&>);
static_assert(dax::is_tree_v<std::vector<DistArray<float>>>);
static_assert(dax::is_tree_v<std::array<DistArray<float>, 2>>);
static_assert(dax::is_tree_v<std::tuple<DistArray<float>, std::vector<DistArray<double>>>>);
static_assert(dax::is_tree_v<std::map<std::string, DistArray<float>>>);
static_assert(dax::is_tree_v<Layer> && dax::is_tree_v<Model> && dax::Tree<std::vector<Model>>);
static_assert(dax::is_tree_v<std::tuple<>>);
static_assert(!dax::is_tree_v<int> && !dax::is_tree_v<std::vector<int>>);
static_assert(!dax::is_tree_v<std::map<int, DistArray<float>>>);
static_assert(!dax::is_tree_v<std::tuple<DistArray<float>, float>>);
static_assert(!dax::is_tree_v<tree_test::Plain>);

namespace {

/// A fresh random array on a random sharding of a random mesh (the same on every rank).
template <class T>
DistArray<T> random_array(Pick& pick, const Shape& shape) {
  const auto& mesh = dax::test::random_mesh(pick);
  const NamedSharding s = dax::test::random_sharding(pick, mesh, shape.size());
  return dax::device_put(dax::test::random_values<T>(dax::numel(shape), pick.rng), shape, s);
}

/// `v` as the element type of the array `x`.
template <class A>
auto elem_of(const A&, int v) {
  return typename A::value_type(v);
}

template <class T>
std::vector<T> plus_one(std::vector<T> v) {
  for (auto& x : v) x += T(1);
  return v;
}

}  // namespace

TEST_CASE("a lone leaf is a tree whose path is empty", "[autodiff][tree]") {
  Pick pick(11);
  const auto x = random_array<float>(pick, {5, 3});
  CHECK(dax::tree_size(x) == 1);
  CHECK(dax::tree_paths(x) == std::vector<std::string>{""});
  const auto y = dax::tree_map([](const auto& a) { return a + 1.0f; }, x);
  static_assert(std::is_same_v<std::remove_const_t<decltype(y)>, DistArray<float>>);
  CHECK(host(y) == plus_one(host(x)));
  CHECK(y.sharding() == x.sharding());
}

TEST_CASE("each container, its paths and order", "[autodiff][tree]") {
  Pick pick(12);
  const auto a = random_array<float>(pick, {7});
  const auto b = random_array<double>(pick, {3, 2});
  const auto c = random_array<int32_t>(pick, {5, 1});
  const auto visit = [](const auto& tree) {
    std::vector<std::string> seen;
    dax::tree_for_each_with_path([&](const std::string& p, const auto& leaf) {
      seen.push_back(p + ":" + dax::to_string(leaf.dtype()));
    }, tree);
    return seen;
  };

  const std::vector<DistArray<float>> vec{a, a + 1.0f, a * 2.0f};
  CHECK(dax::tree_size(vec) == 3);
  CHECK(dax::tree_paths(vec) == std::vector<std::string>{"0", "1", "2"});
  const auto vec2 = dax::tree_map([](const auto& x) { return dax::astype<double>(x); }, vec);
  static_assert(std::is_same_v<std::remove_const_t<decltype(vec2)>, std::vector<DistArray<double>>>);
  for (size_t i = 0; i < vec.size(); ++i) {
    const auto want = host(vec[i]);
    CHECK(host(vec2[i]) == std::vector<double>(want.begin(), want.end()));
  }

  const std::array<DistArray<float>, 2> arr{a, a};
  CHECK(dax::tree_paths(arr) == std::vector<std::string>{"0", "1"});
  const auto arr2 = dax::tree_map([](const auto& x) { return x + 1.0f; }, arr);
  CHECK(host(arr2[1]) == plus_one(host(a)));

  const std::tuple<DistArray<float>, DistArray<double>, DistArray<int32_t>> tup{a, b, c};
  CHECK(visit(tup) == std::vector<std::string>{"0:float32", "1:float64", "2:int32"});
  // Results of any type: here the leaf's element count.
  const auto sizes = dax::tree_map([](const auto& x) { return x.size(); }, tup);
  CHECK(sizes == std::tuple<int64_t, int64_t, int64_t>{7, 6, 5});

  const std::map<std::string, DistArray<double>> map{{"zeta", b}, {"alpha", b * 3.0}, {"mid", b}};
  CHECK(dax::tree_paths(map) == std::vector<std::string>{"alpha", "mid", "zeta"});
  const auto map2 = dax::tree_map_with_path(
      [](const std::string& p, const auto& x) { return p == "mid" ? x + 1.0 : x; }, map);
  CHECK(host(map2.at("mid")) == plus_one(host(b)));
  CHECK(host(map2.at("alpha")) == host(map.at("alpha")));

  const std::vector<DistArray<float>> empty;
  CHECK(dax::tree_size(empty) == 0);
  CHECK(dax::tree_map([](const auto& x) { return x; }, empty).empty());
}

TEST_CASE("nested trees and DAX_TREE structs with mixed element types", "[autodiff][tree]") {
  Pick pick(13);
  Model model{{}, 3, {}};
  for (int i = 0; i < 2; ++i)
    model.layers.push_back(Layer{random_array<float>(pick, {4, 3}), random_array<double>(pick, {3})});
  model.tables.emplace("ids", random_array<int32_t>(pick, {6}));
  model.tables.emplace("emb", random_array<int32_t>(pick, {2, 5}));

  CHECK(dax::tree_size(model) == 6);
  CHECK(dax::tree_paths(model) ==
        std::vector<std::string>{"layers/0/w", "layers/0/b", "layers/1/w", "layers/1/b", "tables/emb", "tables/ids"});

  // Types kept: the struct maps to itself; the member outside the tree comes along.
  const Model next = dax::tree_map([](const auto& x) { return x + elem_of(x, 1); }, model);
  CHECK(next.not_a_leaf == 3);
  CHECK(host(next.layers[1].w) == plus_one(host(model.layers[1].w)));
  CHECK(host(next.layers[0].b) == plus_one(host(model.layers[0].b)));
  CHECK(host(next.tables.at("emb")) == plus_one(host(model.tables.at("emb"))));
  CHECK(next.layers[1].w.sharding() == model.layers[1].w.sharding());

  // Several trees at once: f(leaf of each), any element types.
  const Model sum = dax::tree_map([](const auto& x, const auto& y) { return x + y; }, model, next);
  const auto w = host(model.layers[0].w);
  std::vector<float> want(w.size());
  for (size_t i = 0; i < w.size(); ++i) want[i] = 2 * w[i] + 1;
  CHECK(host(sum.layers[0].w) == want);

  // A tuple of trees (params and something else) nests paths under the tuple index.
  const auto both = std::tuple(model, std::map<std::string, Layer>{{"head", model.layers[0]}});
  const auto paths = dax::tree_paths(both);
  CHECK(paths.size() == 8);
  CHECK(paths[0] == "0/layers/0/w");
  CHECK(paths.back() == "1/head/b");

  // Mutable visits: the leaves of a non-const tree can be replaced in place.
  Model edited = model;
  dax::tree_for_each([](auto& x) { x = x * elem_of(x, 2); }, edited);
  const auto b = host(model.layers[1].b);
  std::vector<double> twice(b.size());
  for (size_t i = 0; i < b.size(); ++i) twice[i] = 2 * b[i];
  CHECK(host(edited.layers[1].b) == twice);
  CHECK(host(model.layers[1].b) == b);  // the original is untouched (arrays are values)

  // for_each over two trees: the first mutable, the second read.
  dax::tree_for_each([](auto& x, const auto& y) { x = y; }, edited, model);
  CHECK(host(edited.tables.at("ids")) == host(model.tables.at("ids")));
}

TEST_CASE("trees whose structures differ are refused with the path", "[autodiff][tree]") {
  Pick pick(14);
  const auto x = random_array<float>(pick, {3});
  const auto id = [](const auto& a, const auto&) { return a; };
  using Map = std::map<std::string, std::vector<DistArray<float>>>;
  const Map base{{"a", {x}}, {"b", {x, x}}};
  CHECK(error_of([&] { dax::tree_map(id, base, Map{{"a", {x}}, {"b", {x}}}); }) ==
        "tree_map: tree 2 differs from the first at 'b': a std::vector of 1 entries, not 2");
  CHECK(error_of([&] { dax::tree_map(id, base, Map{{"a", {x}}, {"c", {x, x}}}); }) ==
        "tree_map: tree 2 differs from the first at the root: no key 'b'");
  CHECK(error_of([&] { dax::tree_map(id, base, Map{{"a", {x}}, {"aa", {x}}, {"b", {x, x}}}); }) ==
        "tree_map: tree 2 differs from the first at the root: a key 'aa' not in the first");
  CHECK(error_of([&] { dax::tree_map(id, base, Map{{"a", {x}}}); }) ==
        "tree_map: tree 2 differs from the first at the root: no key 'b'");
  CHECK(error_of([&] { dax::tree_map(id, base, Map{{"a", {x}}, {"b", {x, x}}, {"c", {}}}); }) ==
        "tree_map: tree 2 differs from the first at the root: a key 'c' not in the first");
  // The third tree is numbered 3; nothing is visited before the check.
  int visits = 0;
  CHECK(error_of([&] {
          dax::tree_for_each_with_path([&](const std::string&, const auto&...) { ++visits; }, base, base,
                                       Map{{"a", {}}, {"b", {x, x}}});
        }) == "tree_for_each_with_path: tree 3 differs from the first at 'a': a std::vector of 0 entries, not 1");
  CHECK(visits == 0);
  Model m1{{Layer{x, dax::astype<double>(x)}}, 0, {}}, m2 = m1;
  m2.layers.push_back(m1.layers[0]);
  CHECK(error_of([&] { dax::tree_map(id, m1, m2); }) ==
        "tree_map: tree 2 differs from the first at 'layers': a std::vector of 2 entries, not 1");
}
