#include <catch2/catch.hpp>

#include <dax/backend/cpu/copy.hpp>
#include <dax/core/shape.hpp>

using dax::Box;

TEST_CASE("boxes: numel, intersection, containment, contiguity", "[core]") {
  const Box a{{0, 4}, {2, 6}};
  const Box b{{2, 8}, {0, 3}};
  CHECK(dax::numel(a) == 16);
  CHECK(dax::intersect(a, b) == Box{{2, 4}, {2, 3}});
  CHECK(dax::numel(dax::intersect(a, Box{{4, 8}, {0, 8}})) == 0);
  CHECK(dax::contains(a, Box{{1, 3}, {2, 6}}));
  CHECK_FALSE(dax::contains(a, Box{{1, 5}, {2, 6}}));
  CHECK(dax::contains(a, Box{{9, 9}, {0, 0}}));  // empty boxes lie anywhere
  CHECK(dax::is_contiguous_in(a, Box{{1, 3}, {2, 6}}));
  CHECK(dax::is_contiguous_in(a, Box{{1, 2}, {3, 5}}));
  CHECK_FALSE(dax::is_contiguous_in(a, Box{{1, 3}, {3, 5}}));
  CHECK(dax::offset_in(a, Box{{1, 3}, {3, 5}}) == 1 * 4 + 1);
  CHECK(dax::numel(Box{}) == 1);  // a scalar
}

TEST_CASE("shape text is Python's tuple", "[core]") {
  CHECK(dax::to_string(dax::Shape{}) == "()");
  CHECK(dax::to_string(dax::Shape{5}) == "(5,)");
  CHECK(dax::to_string(dax::Shape{4, 3}) == "(4, 3)");
  CHECK(dax::to_string(Box{{0, 2}, {1, 3}}) == "[0:2, 1:3]");
}
