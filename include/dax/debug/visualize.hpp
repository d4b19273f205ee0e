// visualize_sharding: prints the box picture of an array's layout on rank 0.
#pragma once

#include <iostream>

#include <dax/array/dist_array.hpp>
#include <dax/sharding/visualize.hpp>

namespace dax {

inline void visualize_sharding(const Shape& shape, const NamedSharding& sharding, std::ostream& out = std::cout) {
  const std::string picture = sharding_picture(shape, sharding, platform_name(Runtime::current().backend()));
  if (Runtime::current().rank() == 0) out << picture << std::flush;
}

template <class T>
void visualize_sharding(const DistArray<T>& x, std::ostream& out = std::cout) {
  visualize_sharding(x.shape(), x.sharding(), out);
}

}  // namespace dax
