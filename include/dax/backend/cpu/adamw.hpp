// AdamW's update of many tensors on the CPU (the contract of backend/adamw_update.hpp): a loop
// over each tensor's elements.
#pragma once

#include <cstdint>

#include <dax/backend/adamw_update.hpp>

namespace dax::detail::cpu {

template <class T, class C>
void adamw_update(const AdamWTensor<T>* tensors, int64_t count, const AdamWCoefficients<C>& k) {
  for (int64_t t = 0; t < count; ++t)
    for (int64_t i = 0; i < tensors[t].n; ++i) k(tensors[t], i);
}

}  // namespace dax::detail::cpu
