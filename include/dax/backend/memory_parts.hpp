// What a device's memory holds, by part: each dax buffer is counted under the part that was
// current when it was allocated (dax::MemoryPart, a scope), or under the part a tree was labelled
// with since (dax::label_memory), and the allocator keeps each part's bytes at its peak. So
// dax::memory_stats() (and dax::simulate's report) say what the peak was made of: parameters,
// optimizer state, the activations the forward kept for the backward, the gradients, the
// backward's temporaries, and the rest. value_and_grad names its forward and backward itself, inside
// any part the caller has not named.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include <dax/core/error.hpp>

namespace dax {
namespace detail {

inline constexpr int kMemoryParts = 12;  // part 0 is "other": memory allocated outside any part
/// The parts autodiff names (value_and_grad, a pipeline's passes) where the caller has named none.
inline constexpr const char* kForwardPart = "forward (activations kept for the backward)";
inline constexpr const char* kBackwardPart = "backward (temporaries)";
/// The parameters' gradients: the cotangents that reached a parameter during a backward (summed
/// so far) and the gradient trees value_and_grad and a pipeline return.
inline constexpr const char* kGradientsPart = "gradients";

struct MemoryPartNames {
  std::mutex mutex;
  std::array<std::string, kMemoryParts> names{"other"};
  int count = 1;
};

inline MemoryPartNames& memory_part_names() {
  static MemoryPartNames names;
  return names;
}

/// The index of the part called `name`, registered on first use (at most kMemoryParts - 1 names).
inline int memory_part_index(std::string_view name) {
  MemoryPartNames& n = memory_part_names();
  std::lock_guard lock(n.mutex);
  for (int i = 0; i < n.count; ++i)
    if (n.names[static_cast<size_t>(i)] == name) return i;
  DAX_CHECK(n.count < kMemoryParts, "dax::MemoryPart: at most ", kMemoryParts - 1, " named parts, and '", name,
            "' would be one more");
  n.names[static_cast<size_t>(n.count)] = std::string(name);
  return n.count++;
}

inline std::string memory_part_name(int index) {
  MemoryPartNames& n = memory_part_names();
  std::lock_guard lock(n.mutex);
  return index >= 0 && index < n.count ? n.names[static_cast<size_t>(index)] : std::string();
}

/// The gradients' part, registered once.
inline int gradients_memory_part() {
  static const int index = memory_part_index(kGradientsPart);
  return index;
}

inline int memory_part_count() {
  MemoryPartNames& n = memory_part_names();
  std::lock_guard lock(n.mutex);
  return n.count;
}

/// The part new buffers of this thread are counted under.
inline int& current_memory_part() {
  thread_local int part = 0;
  return part;
}

}  // namespace detail

/// Buffers allocated in this scope (on this thread) count under the part `name` (nested: the
/// innermost). `weak`: only where no part is named yet (what value_and_grad uses).
class MemoryPart {
 public:
  explicit MemoryPart(std::string_view name, bool weak = false) : saved_(detail::current_memory_part()) {
    if (!weak || saved_ == 0) detail::current_memory_part() = detail::memory_part_index(name);
  }
  ~MemoryPart() { detail::current_memory_part() = saved_; }
  MemoryPart(const MemoryPart&) = delete;
  MemoryPart& operator=(const MemoryPart&) = delete;

 private:
  int saved_;
};

}  // namespace dax
