// Host blocks: 64-byte aligned, and blocks of 4 MiB and more start on a 2 MiB boundary so that
// transparent huge pages can back them (unless DAX_HUGE_PAGES=0). Every byte asked for is usable.
// Shareable blocks (a strided exchange's receive pieces) are seen alike through a peer's mapping.
#include <catch2/catch.hpp>

#include <dax/backend/cpu/memory.hpp>
#include <dax/comm/node_shared_memory.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <algorithm>
#include <memory>
#include <vector>

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

TEST_CASE("shareable host blocks: another mapping sees the same bytes, and they are given back", "[memory]") {
  // A block the node's other processes can map (comm/node_shared_memory.hpp), mapped a second time
  // here through /proc/<pid>/fd/<fd> exactly as a peer maps it.
  auto& blocks = dax::detail::NodeSharedBlocks::process();
  const int64_t before = blocks.live();
  const size_t bytes = (size_t(5) << 20) + 100;
  dax::detail::cpu::HostMemory memory;
  void* p = memory.allocate_shared(bytes);
  REQUIRE(p != nullptr);
  const auto place = blocks.find(static_cast<char*>(p) + 4096, 64);
  if (!place) {  // no memfd here: an ordinary block, which must still be whole and usable
    WARN("this system gave no shareable block (memfd); ordinary memory instead");
    std::memset(p, 1, bytes);
    memory.deallocate_shared(p, bytes);
    return;
  }
  REQUIRE(place->offset == 4096);
  REQUIRE(place->length >= static_cast<int64_t>(bytes));
  REQUIRE(blocks.live() == before + 1);
  REQUIRE_FALSE(blocks.find(static_cast<char*>(p) + place->length - 8, 64));  // runs past its end
  int x = 0;
  REQUIRE_FALSE(blocks.find(&x, sizeof x));  // not a shareable block
  auto* mine = static_cast<uint32_t*>(p);
  for (size_t i = 0; i < bytes / 4; ++i) mine[i] = static_cast<uint32_t>(i * 2654435761u);
  dax::detail::SharedPlace whole = *place;
  whole.offset = 0;
  auto& peers = dax::detail::PeerMappings::process();
  char* other = peers.map(getpid(), whole);
  REQUIRE(other != nullptr);
  REQUIRE(other != p);
  REQUIRE(peers.map(getpid(), whole) == other);  // kept, not mapped again
  auto* theirs = reinterpret_cast<uint32_t*>(other);
  REQUIRE(std::memcmp(theirs, mine, bytes) == 0);
  theirs[12345] = 77;  // written through the other mapping, seen in the block
  REQUIRE(mine[12345] == 77);
  memory.deallocate_shared(p, bytes);
  REQUIRE(blocks.live() == before);
  REQUIRE_FALSE(blocks.find(p, 1));
  // The peer's stale mapping holds no memory: the block was emptied before it was given back.
  REQUIRE(theirs[12345] == 0);
  // A process that does not exist maps nothing (the exchange then copies by the kernel).
  REQUIRE(peers.map(-1, whole) == nullptr);
}

TEST_CASE("the caching allocator keeps shareable and ordinary blocks apart", "[memory]") {
  auto allocator = std::make_shared<dax::detail::cpu::HostAllocator>();
  const size_t bytes = size_t(1) << 20;
  void* shared = allocator->allocate(bytes, true);
  allocator->deallocate(shared, bytes, true);
  void* ordinary = allocator->allocate(bytes);
  REQUIRE(ordinary != shared);  // the cached shareable block is not handed out as an ordinary one
  REQUIRE(allocator->allocate(bytes, true) == shared);  // but is reused as a shareable one
  allocator->deallocate(shared, bytes, true);
  allocator->deallocate(ordinary, bytes);
  const auto stats = allocator->stats();
  REQUIRE(stats.requests == 3);
  REQUIRE(stats.system_allocations == 2);
  REQUIRE(stats.bytes_requested == 0);
  auto& blocks = dax::detail::NodeSharedBlocks::process();
  const int64_t live = blocks.live();
  const int64_t made_shareable = blocks.find(shared, 1) ? 1 : 0;  // 0 where the system has no memfd
  allocator->release_cached();
  REQUIRE(blocks.live() == live - made_shareable);
}

TEST_CASE("peer mappings stay valid while in use, and trim keeps the most recent", "[memory]") {
  // An exchange maps every peer's piece before it copies: with more peers than the cache keeps,
  // no mapping it got may go away before trim(), called after its copies.
  auto& blocks = dax::detail::NodeSharedBlocks::process();
  auto& peers = dax::detail::PeerMappings::process();
  const size_t count = dax::detail::PeerMappings::kKept + 5, bytes = 8192;
  std::vector<void*> made;
  std::vector<char*> mapped;
  peers.trim(0);
  const size_t kept_before = peers.kept();
  for (size_t i = 0; i < count; ++i) {
    void* p = blocks.create(bytes);
    if (!p) break;
    made.push_back(p);
    static_cast<int*>(p)[7] = static_cast<int>(1000 + i);
    auto place = *blocks.find(p, bytes);
    place.offset = 0;
    mapped.push_back(peers.map(getpid(), place));
    REQUIRE(mapped.back() != nullptr);
  }
  if (made.size() < count) {
    WARN("this system gave no shareable blocks (memfd); nothing to map");
    for (void* p : made) blocks.destroy(p);
    return;
  }
  for (size_t i = 0; i < count; ++i) REQUIRE(reinterpret_cast<int*>(mapped[i])[7] == static_cast<int>(1000 + i));
  REQUIRE(peers.kept() == kept_before + count);
  peers.trim(3);  // the last three used are kept, and kKept more
  REQUIRE(peers.kept() == std::min(kept_before + count, 3 + dax::detail::PeerMappings::kKept));
  for (size_t i = count - 3; i < count; ++i) REQUIRE(reinterpret_cast<int*>(mapped[i])[7] == static_cast<int>(1000 + i));
  for (void* p : made) blocks.destroy(p);
}

TEST_CASE("an allocation that fails leaves the counters as they were and says what dax held", "[memory]") {
  // A raw memory of 1000 bytes: the caching allocator's retry after returning its cache fails too.
  struct Small {
    size_t held = 0;
    void* allocate(size_t bytes) {
      if (held + bytes > 1000) dax::detail::fail_out_of_memory("test memory: out of memory allocating ", bytes, " bytes");
      held += bytes;
      return ::operator new(bytes);
    }
    void deallocate(void* p, size_t bytes) {
      held -= bytes;
      ::operator delete(p);
    }
  };
  auto allocator = std::make_shared<dax::detail::CachingAllocator<Small>>();
  void* kept = allocator->allocate(512);
  void* cached = allocator->allocate(256);
  allocator->deallocate(cached, 256);  // cached: given back to Small before the retry
  const auto before = allocator->stats();
  try {
    allocator->allocate(900);
    FAIL("900 bytes more fit in a memory of 1000");
  } catch (const dax::OutOfMemoryError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("test memory: out of memory allocating 1024 bytes; dax held 512 bytes in use here (peak 768 "
                    "requested) and returned its cache of 256 bytes before trying again") == 0);
  }
  const auto after = allocator->stats();
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.bytes_requested == before.bytes_requested);
  CHECK(after.peak_bytes_requested == before.peak_bytes_requested);
  CHECK(after.requests == before.requests);
  CHECK(after.system_allocations == before.system_allocations);
  CHECK(after.bytes_cached == 0);
  allocator->deallocate(kept, 512);
}

TEST_CASE("out of memory, the allocator returns its cache and succeeds; other failures pass through", "[memory]") {
  // A raw memory of 1500 bytes that can also be told to fail as a device would (not for lack of
  // memory): that error must come through as it was, without a retry or the cache returned.
  struct State {
    size_t held = 0;
    int calls = 0;
    bool broken = false;
  } state;
  struct Small {
    State* state;
    void* allocate(size_t bytes) {
      ++state->calls;
      DAX_CHECK(!state->broken, "test memory: device lost");
      if (state->held + bytes > 1500)
        dax::detail::fail_out_of_memory("test memory: out of memory allocating ", bytes, " bytes");
      state->held += bytes;
      return ::operator new(bytes);
    }
    void deallocate(void* p, size_t bytes) {
      state->held -= bytes;
      ::operator delete(p);
    }
  };
  auto allocator = std::make_shared<dax::detail::CachingAllocator<Small>>(Small{&state});
  void* kept = allocator->allocate(256);
  void* cached = allocator->allocate(512);
  allocator->deallocate(cached, 512);  // 768 held by Small, 512 of them cached

  // 768 more do not fit beside the cache, and do once it is returned: one success, counted once.
  void* fits = allocator->allocate(700);
  auto stats = allocator->stats();
  CHECK(stats.bytes_cached == 0);
  CHECK(stats.bytes_in_use == 256 + 768);
  CHECK(state.held == 256 + 768);
  CHECK(stats.bytes_requested == 256 + 700);
  CHECK(stats.requests == 3);
  CHECK(stats.system_allocations == 3);
  CHECK(stats.system_frees == 1);
  allocator->deallocate(fits, 700);

  // A failure that is not for lack of memory: passed through once, the cache and counters kept.
  state.broken = true;
  const int calls_before = state.calls;
  const auto before = allocator->stats();
  try {
    allocator->allocate(2000);
    FAIL("a broken memory handed out a block");
  } catch (const dax::OutOfMemoryError& e) {
    FAIL(std::string("a device failure was reported as out of memory: ") + e.what());
  } catch (const dax::Error& e) {
    CHECK(std::string(e.what()) == "test memory: device lost");
  }
  CHECK(state.calls == calls_before + 1);
  const auto after = allocator->stats();
  CHECK(after.bytes_cached == before.bytes_cached);
  CHECK(after.bytes_cached == 768);  // the 700-byte block, cached again
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.requests == before.requests);
  CHECK(after.system_allocations == before.system_allocations);
  state.broken = false;
  allocator->deallocate(kept, 256);
}
