// AdamW's update of many tensors on the GPU (the contract of backend/adamw_update.hpp): the
// tensors go to the kernel by value, up to kAdamWBatch a launch (their pointers fit the 4 KB of
// a kernel's parameters), and every thread of the grid strides over each tensor in turn. A step of
// GPT-2 small's 148 parameters is 4 launches where one kernel per parameter per new value was 444.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include <dax/backend/adamw_update.hpp>
#include <dax/backend/cuda/device.cuh>

namespace dax::detail::cuda {

inline constexpr int kAdamWBatch = 48;  // 48 x 64 bytes of pointers and counts

template <class T>
struct AdamWBatch {
  AdamWTensor<T> tensors[kAdamWBatch];
  int count;
};

template <class T, class C>
__global__ void adamw_update_kernel(AdamWBatch<T> batch, AdamWCoefficients<C> k) {
  for (int t = 0; t < batch.count; ++t) {
    const AdamWTensor<T>& tensor = batch.tensors[t];
    for (int64_t i = grid_first(); i < tensor.n; i += grid_step()) k(tensor, i);
  }
}

/// The update of `count` tensors, kAdamWBatch a launch. Queued on the stream.
template <class T, class C>
void adamw_update(const AdamWTensor<T>* tensors, int64_t count, const AdamWCoefficients<C>& k) {
  for (int64_t first = 0; first < count; first += kAdamWBatch) {
    AdamWBatch<T> batch{};
    batch.count = static_cast<int>(std::min<int64_t>(kAdamWBatch, count - first));
    int64_t largest = 0;
    for (int t = 0; t < batch.count; ++t) {
      batch.tensors[t] = tensors[first + t];
      largest = std::max(largest, tensors[first + t].n);
    }
    if (largest == 0) continue;
    adamw_update_kernel<<<grid_blocks(largest), block_threads, 0, context().stream()>>>(batch, k);
    check_launch("adamw_update_kernel");
  }
}

}  // namespace dax::detail::cuda
