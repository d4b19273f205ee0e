// Hash combining for the metadata value types (meshes, specs, shardings, plan keys).
#pragma once

#include <cstddef>
#include <functional>

namespace dax::detail {

inline void hash_combine(size_t& seed, size_t value) {
  seed ^= value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
}

template <class T>
void hash_into(size_t& seed, const T& value) {
  hash_combine(seed, std::hash<T>{}(value));
}

}  // namespace dax::detail
