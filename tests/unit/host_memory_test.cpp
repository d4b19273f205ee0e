// Host blocks: 64-byte aligned, and blocks of 4 MiB and more start on a 2 MiB boundary so that
// transparent huge pages can back them (unless DAX_HUGE_PAGES=0). Every byte asked for is usable.
#include <catch2/catch.hpp>

#include <dax/backend/cpu/memory.hpp>

#include <cstdint>
#include <cstring>

TEST_CASE("host blocks are aligned for their size", "[memory]") {
  dax::detail::cpu::HostMemory memory;
  const bool huge = dax::detail::cpu::huge_pages_enabled();
  for (size_t bytes : {size_t(1), size_t(100), size_t(65536), size_t(4) << 20, (size_t(4) << 20) + 12345,
                       size_t(33) << 20}) {
    void* p = memory.allocate(bytes);
    const auto at = reinterpret_cast<uintptr_t>(p);
    INFO(bytes << " bytes at " << at);
    REQUIRE(at % 64 == 0);
    if (bytes >= (size_t(4) << 20)) REQUIRE((at % (size_t(2) << 20) == 0) == huge);
    std::memset(p, 0x5a, bytes);  // all of it is ours
    REQUIRE(static_cast<unsigned char*>(p)[bytes - 1] == 0x5a);
    memory.deallocate(p, bytes);
  }
}
