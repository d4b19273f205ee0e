// Which backend a process runs on: DAX_BACKEND=cpu|cuda, else CUDA when compiled with it and a
// GPU is visible, else CPU.
#pragma once

#include <cstdlib>
#include <string>

#include <dax/core/error.hpp>

namespace dax {

enum class Backend { cpu, cuda };

inline std::string to_string(Backend b) { return b == Backend::cpu ? "cpu" : "cuda"; }

/// The name visualize_sharding prints for the backend's devices.
inline std::string platform_name(Backend b) { return b == Backend::cpu ? "CPU" : "GPU"; }

namespace detail {

inline bool compiled_with_cuda() {
#if defined(DAX_HAS_CUDA) && defined(__CUDACC__)
  return true;
#else
  return false;
#endif
}

inline Backend choose_backend() {
  const char* env = std::getenv("DAX_BACKEND");
  const std::string wanted = env ? env : "";
  if (wanted == "cpu") return Backend::cpu;
  if (wanted == "cuda") {
    DAX_CHECK(compiled_with_cuda(), "DAX_BACKEND=cuda, but this program was compiled without CUDA "
              "(build it with nvcc and DAX_ENABLE_CUDA=ON)");
    fail("DAX_BACKEND=cuda: the CUDA backend is not available yet in this version of dax");
  }
  DAX_CHECK(wanted.empty(), "DAX_BACKEND must be 'cpu' or 'cuda', got '", wanted, "'");
  return Backend::cpu;  // CUDA joins the automatic choice when backend/cuda lands
}

}  // namespace detail
}  // namespace dax
