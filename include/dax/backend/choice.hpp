// Which backend a process runs on: DAX_BACKEND=cpu|cuda, else CUDA when the program was compiled
// with it (nvcc + DAX_HAS_CUDA) and a GPU is visible, else CPU. The choice belongs to the backend
// layer: the runtime above makes it at start-up (runtime/runtime.hpp) and records it here; the
// backend dispatch (backend/device_ops.hpp) and the cost model (ops/cost.hpp) read it.
#pragma once

#include <cstdlib>
#include <string>

#include <dax/backend/gpu_query.hpp>
#include <dax/core/error.hpp>
#include <dax/core/macros.hpp>

namespace dax {

/// `meta`: simulated devices whose buffers hold no data (dax::MetaDevices, runtime/runtime.hpp).
enum class Backend { cpu, cuda, meta };

inline std::string to_string(Backend b) { return b == Backend::cpu ? "cpu" : b == Backend::cuda ? "cuda" : "meta"; }

/// The name visualize_sharding prints for the backend's devices.
inline std::string platform_name(Backend b) { return b == Backend::cpu ? "CPU" : b == Backend::cuda ? "GPU" : "META"; }

namespace detail {

inline constexpr bool compiled_with_cuda() { return DAX_CUDA_BACKEND == 1; }

/// The backend of the live runtime (CPU while none is alive).
inline Backend& active_backend() {
  static Backend backend = Backend::cpu;
  return backend;
}

/// The choice for DAX_BACKEND = `wanted` ("" when unset) given what the GPU query found.
inline Backend choose_backend(const std::string& wanted, const GpuQuery& gpus) {
  if (wanted == "cpu") return Backend::cpu;
  if (wanted == "cuda") {
    DAX_CHECK(compiled_with_cuda(), "DAX_BACKEND=cuda, but this program was compiled without CUDA "
              "(compile it with nvcc and link dax::dax_cuda, which defines DAX_HAS_CUDA)");
    DAX_CHECK(gpus.count > 0, "DAX_BACKEND=cuda, but ", describe_gpu_query(gpus));
    return Backend::cuda;
  }
  DAX_CHECK(wanted.empty(), "DAX_BACKEND must be 'cpu' or 'cuda', got '", wanted, "'");
  return compiled_with_cuda() && gpus.count > 0 ? Backend::cuda : Backend::cpu;
}

inline Backend choose_backend(const GpuQuery& gpus) {
  const char* env = std::getenv("DAX_BACKEND");
  return choose_backend(env ? env : "", gpus);
}

}  // namespace detail
}  // namespace dax
