// dax::label_memory(tree, part): counts the buffers of a tree's leaves under a memory part from
// now on (backend/memory_parts.hpp), e.g. parameters that an update allocated anew. dax's
// optimizers label their parameters and state themselves after every step.
#pragma once

#include <string_view>

#include <dax/autodiff/tree.hpp>
#include <dax/backend/memory_parts.hpp>

namespace dax {

template <class Tree>
void label_memory(const Tree& tree, std::string_view part) {
  const int index = detail::memory_part_index(part);
  tree_for_each([&](const auto& leaf) {
    if (const auto& buffer = leaf.buffer()) buffer->relabel(index);
  }, tree);
}

}  // namespace dax
