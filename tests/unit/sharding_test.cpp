#include <catch2/catch.hpp>

#include <set>

#include <dax/sharding/named_sharding.hpp>

#include "../common/error_of.hpp"
#include "../common/meshes.hpp"

using dax::Box;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::error_of;

TEST_CASE("text formats follow JAX", "[sharding]") {
  const Mesh mesh({4, 2}, {"data", "model"});
  CHECK(dax::to_string(mesh) == "Mesh('data': 4, 'model': 2)");
  CHECK(dax::to_string(P("data", dax::none)) == "P('data', None)");
  CHECK(dax::to_string(P(dax::axes("x", "y"), dax::none)) == "P(('x', 'y'), None)");
  CHECK(P(nullptr, "data") == P(dax::none, "data"));  // nullptr spells None too
  CHECK(dax::to_string(P()) == "P()");
  CHECK(dax::to_string(P("data", dax::none).with_unreduced("model")) ==
        "P('data', None, unreduced={'model'})");
  CHECK(dax::to_string(P().with_unreduced("y", "x")) == "P(unreduced={'x', 'y'})");
  CHECK(dax::to_string(NamedSharding(mesh, P("data", "model"))) ==
        "NamedSharding(mesh=Mesh('data': 4, 'model': 2), spec=P('data', 'model'))");
  CHECK(dax::to_string(Mesh({2}, {"x"}, {1, 0})) == "Mesh('x': 2, devices=[1, 0])");
  // Specs built at run time.
  std::vector<P::Entry> entries{dax::none, "data", dax::axes(std::vector<std::string>{"a", "b"})};
  CHECK(dax::to_string(P(entries)) == "P(None, 'data', ('a', 'b'))");
  std::ostringstream out;
  out << NamedSharding(mesh, P("model"));
  CHECK(out.str() == "NamedSharding(mesh=Mesh('data': 4, 'model': 2), spec=P('model'))");
}

TEST_CASE("errors use JAX's wording", "[sharding]") {
  CHECK(error_of([] { NamedSharding(Mesh({2}, {"z"}), P("x")); }) ==
        "Resource axis: x of P('x') is not found in mesh: ('z',).");
  CHECK(error_of([] { NamedSharding(Mesh({2, 2}, {"x", "y"}), P("x", "x")); }) ==
        "A single NamedSharding spec specification can map every mesh axis to at most one "
        "positional dimension, but P('x', 'x') has duplicate entries for `x`");
  CHECK(error_of([] { NamedSharding(Mesh({2}, {"x"}), P("x", dax::none, dax::none, dax::none))
                          .devices_indices_map({4, 4}); }) ==
        "Sharding NamedSharding(mesh=Mesh('x': 2), spec=P('x', None, None, None)) is only valid "
        "for values of rank at least 4, but was applied to a value of rank 2");
  CHECK(error_of([] { NamedSharding(Mesh({2}, {"x"}), P(dax::none, "x")).shard_shape({4, 3}); }) ==
        "Sharding NamedSharding(mesh=Mesh('x': 2), spec=P(None, 'x')) implies that array axis 1 is "
        "partitioned 2 times, but the dimension size is 3 (full shape: (4, 3), per-dimension "
        "tiling factors: [1, 2] should evenly divide the shape)");
  CHECK(error_of([] { NamedSharding(Mesh({2}, {"x"}), P("x").with_unreduced("x")); }) ==
        "P('x', unreduced={'x'}) uses mesh axis `x` both to split dimension 0 and as unreduced");
  CHECK(error_of([] { Mesh({2, 2}, {"x"}); }) == "Mesh: 2 axis sizes (2, 2) but 1 axis names");
  CHECK(error_of([] { Mesh({2}, {"x"}, {0, 0}); }) == "Mesh: device id 0 appears twice");
}

TEST_CASE("the ceil-chunk rule on uneven dimensions", "[sharding]") {
  const Mesh mesh({4}, {"x"});
  const NamedSharding s(mesh, P("x"));
  const auto m10 = s.devices_indices_map({10});
  CHECK(m10.at(0) == Box{{0, 3}});
  CHECK(m10.at(1) == Box{{3, 6}});
  CHECK(m10.at(2) == Box{{6, 9}});
  CHECK(m10.at(3) == Box{{9, 10}});
  const auto m2 = s.devices_indices_map({2});
  CHECK(m2.at(1) == Box{{1, 2}});
  CHECK(m2.at(2) == Box{{2, 2}});
  CHECK(m2.at(3) == Box{{2, 2}});
  CHECK(s.devices_indices_map({0}).at(3) == Box{{0, 0}});
}

TEST_CASE("multi-axis dimensions read the first axis as major", "[sharding]") {
  const Mesh mesh({2, 3}, {"x", "y"});
  const auto xy = NamedSharding(mesh, P(dax::axes("x", "y"))).devices_indices_map({12});
  const auto yx = NamedSharding(mesh, P(dax::axes("y", "x"))).devices_indices_map({12});
  // Device 4 sits at (x=1, y=1): piece 1*3+1 = 4 for (x, y), 1*2+1 = 3 for (y, x).
  CHECK(xy.at(4) == Box{{8, 10}});
  CHECK(yx.at(4) == Box{{6, 8}});
  const NamedSharding two(mesh, P("y", "x"));
  CHECK(two.devices_indices_map({6, 4}).at(5) == Box{{4, 6}, {2, 4}});
  CHECK(two.shard_shape({6, 4}) == Shape{2, 2});
}

TEST_CASE("replica ids, full replication, equality and hashing", "[sharding]") {
  const Mesh mesh({2, 2}, {"x", "y"});
  const NamedSharding rows(mesh, P("x"));
  CHECK(rows.replica_id(0) == 0);
  CHECK(rows.replica_id(1) == 1);
  CHECK(rows.replica_id(2) == 0);
  CHECK(rows.replica_id(3) == 1);
  CHECK(NamedSharding(mesh, P()).is_fully_replicated());
  CHECK_FALSE(rows.is_fully_replicated());
  CHECK_FALSE(NamedSharding(mesh, P().with_unreduced("x")).is_fully_replicated());
  CHECK(NamedSharding(Mesh({1, 2}, {"a", "b"}), P("a")).is_fully_replicated());
  CHECK(rows.has_copies());  // 'y' splits nothing
  CHECK_FALSE(NamedSharding(mesh, P("x", "y")).has_copies());
  CHECK_FALSE(NamedSharding(mesh, P("x").with_unreduced("y")).has_copies());  // partial sums differ
  CHECK_FALSE(NamedSharding(Mesh({2, 1}, {"a", "b"}), P("a")).has_copies());
  CHECK(NamedSharding(mesh, P("x")) == NamedSharding(mesh, P("x", dax::none)));
  CHECK(NamedSharding(mesh, P("x")).hash() == NamedSharding(mesh, P("x", dax::none)).hash());
  CHECK_FALSE(NamedSharding(mesh, P("x")) == NamedSharding(mesh, P("y")));
  CHECK_FALSE(NamedSharding(mesh, P()) == NamedSharding(mesh, P().with_unreduced("x")));
  CHECK_FALSE(NamedSharding(mesh, P(dax::axes("x", "y"))) == NamedSharding(mesh, P(dax::axes("y", "x"))));
  CHECK_FALSE(NamedSharding(mesh, P("x")) == NamedSharding(Mesh({2, 2}, {"x", "y"}, {1, 0, 3, 2}), P("x")));
}

// Exhaustive: for every mesh, spec and shape, the pieces of the devices with replica id 0 and the
// same partial cover the array exactly once, and each piece is the ceil-chunk of its number.
TEST_CASE("index math on every mesh of 1-8 devices, ranks 0-3, uneven and empty", "[sharding]") {
  const std::vector<Shape> shapes{{}, {5}, {8}, {0}, {3, 4}, {7, 2}, {1, 0}, {4, 3, 5}, {2, 6, 1}};
  int checked = 0;
  for (const Mesh& mesh : dax::test::all_meshes()) {
    for (const Shape& shape : shapes) {
      for (const NamedSharding& s : dax::test::all_shardings(mesh, shape.size(), true)) {
        const auto map = s.devices_indices_map(shape);
        REQUIRE(map.size() == static_cast<size_t>(mesh.size()));
        bool copies = false;  // some device holds what one earlier in mesh order holds
        for (int device = 0; device < mesh.size(); ++device) copies = copies || s.replica_id(device) != 0;
        REQUIRE(s.has_copies() == copies);
        // Count how often each element is covered, per partial (coords on unreduced axes).
        std::map<std::vector<int64_t>, std::vector<int>> cover;
        for (const auto& [device, box] : map) {
          const auto c = mesh.coords(device);
          // Reference piece: mixed radix of the coordinates, ceil-chunk bounds.
          for (size_t d = 0; d < shape.size(); ++d) {
            int64_t piece = 0, k = 1;
            for (int a : s.dim_axes(d)) {
              piece = piece * mesh.axis_size(a) + c[a];
              k *= mesh.axis_size(a);
            }
            const int64_t chunk = (shape[d] + k - 1) / k;
            REQUIRE(box[d].start == std::min(piece * chunk, shape[d]));
            REQUIRE(box[d].stop == std::min((piece + 1) * chunk, shape[d]));
          }
          if (s.replica_id(device) != 0) continue;
          std::vector<int64_t> partial;
          for (int a : s.unreduced_axes()) partial.push_back(c[a]);
          auto& counts = cover[partial];
          counts.resize(dax::numel(shape), 0);
          // Mark the box's elements.
          const Shape full = shape;
          for (int64_t flat = 0; flat < dax::numel(full); ++flat) {
            int64_t rest = flat;
            bool inside = true;
            for (size_t d = full.size(); d-- > 0;) {
              const int64_t i = rest % full[d];
              rest /= full[d];
              inside = inside && i >= box[d].start && i < box[d].stop;
            }
            if (inside) ++counts[flat];
          }
        }
        for (const auto& [partial, counts] : cover)
          for (int c : counts) REQUIRE(c == 1);
        ++checked;
      }
    }
  }
  CHECK(checked > 2000);
}
