#include <catch2/catch.hpp>

#include <dax/sharding/visualize.hpp>

using dax::Mesh;
using dax::NamedSharding;
using dax::P;

TEST_CASE("1-d pictures", "[sharding][visualize]") {
  const Mesh mesh({4}, {"x"});
  CHECK(dax::sharding_picture({8}, NamedSharding(mesh, P("x"))) ==
        "┌───────┬───────┬───────┬───────┐\n"
        "│ CPU 0 │ CPU 1 │ CPU 2 │ CPU 3 │\n"
        "└───────┴───────┴───────┴───────┘\n");
  CHECK(dax::sharding_picture({8}, NamedSharding(mesh, P())) ==
        "┌─────────────┐\n"
        "│ CPU 0,1,2,3 │\n"
        "└─────────────┘\n");
  // Uneven: 10 split 4 -> 3, 3, 3, 1; widths follow the extents.
  CHECK(dax::sharding_picture({10}, NamedSharding(mesh, P("x")), "GPU") ==
        "┌────────┬────────┬────────┬───────┐\n"
        "│ GPU 0  │ GPU 1  │ GPU 2  │ GPU 3 │\n"
        "└────────┴────────┴────────┴───────┘\n");
}

TEST_CASE("2-d pictures", "[sharding][visualize]") {
  const Mesh mesh({2, 2}, {"data", "model"});
  CHECK(dax::sharding_picture({8, 8}, NamedSharding(mesh, P("data", "model"))) ==
        "┌───────┬───────┐\n"
        "│       │       │\n"
        "│ CPU 0 │ CPU 1 │\n"
        "│       │       │\n"
        "├───────┼───────┤\n"
        "│       │       │\n"
        "│ CPU 2 │ CPU 3 │\n"
        "│       │       │\n"
        "└───────┴───────┘\n");
  CHECK(dax::sharding_picture({4, 6}, NamedSharding(mesh, P(dax::none, "data"))) ==
        "┌─────────┬─────────┐\n"
        "│         │         │\n"
        "│ CPU 0,1 │ CPU 2,3 │\n"
        "│         │         │\n"
        "└─────────┴─────────┘\n");
  CHECK_THROWS_AS(dax::sharding_picture({2, 2, 2}, NamedSharding(mesh, P())), dax::Error);
}
