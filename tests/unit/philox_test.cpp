// Philox-4x32-10 against the known-answer vectors of its authors' Random123 suite.
#include <catch2/catch.hpp>

#include <dax/core/philox.hpp>

TEST_CASE("philox4x32-10 known answers", "[random]") {
  using dax::detail::philox4x32_10;
  auto r = philox4x32_10({{0, 0, 0, 0}}, 0, 0);
  CHECK(r.c[0] == 0x6627e8d5u);
  CHECK(r.c[1] == 0xe169c58du);
  CHECK(r.c[2] == 0xbc57ac4cu);
  CHECK(r.c[3] == 0x9b00dbd8u);
  r = philox4x32_10({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu);
  CHECK(r.c[0] == 0x408f276du);
  CHECK(r.c[1] == 0x41c83b0eu);
  CHECK(r.c[2] == 0xa20bc7c6u);
  CHECK(r.c[3] == 0x6d5451fdu);
  r = philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  CHECK(r.c[0] == 0xd16cfe09u);
  CHECK(r.c[1] == 0x94fdccebu);
  CHECK(r.c[2] == 0x5001e420u);
  CHECK(r.c[3] == 0x24126ea1u);
}
