// What asking CUDA for its GPUs found, and the words for it. The query itself lives in
// backend/cuda/device.cuh (nvcc only); this part is plain C++, so the messages are the same in
// every build and the unit tests check them without a GPU. A failed query is never a silent 0:
// its CUDA error travels with it into the runtime's error, a test's skip line and the benchmark.
#pragma once

#include <string>

#include <dax/core/error.hpp>

namespace dax::detail {

struct GpuQuery {
  int count = 0;               ///< devices CUDA reports (0 when the query failed)
  std::string call;            ///< the call asked, e.g. "cudaGetDeviceCount"
  std::string error_name;      ///< CUDA's name of its error ("" when the query succeeded)
  std::string error_text;      ///< CUDA's description of it
  bool visible_devices_set = false;  ///< whether CUDA_VISIBLE_DEVICES was set
  std::string visible_devices;       ///< its value

  bool failed() const { return !error_name.empty(); }
};

/// A hint for the CUDA errors a GPU query meets on a machine that is set up wrong.
inline std::string gpu_query_hint(const std::string& error_name) {
  if (error_name == "cudaErrorInsufficientDriver")
    return "the NVIDIA driver is missing, or older than the CUDA runtime this program was built with: "
           "install or update the driver (nvidia-smi shows its version)";
  if (error_name == "cudaErrorNoDevice") return "the driver sees no CUDA-capable device";
  if (error_name == "cudaErrorSystemDriverMismatch")
    return "the driver's kernel module and its user-space library are different versions: reload the module or reboot";
  if (error_name == "cudaErrorCompatNotSupportedOnDevice")
    return "the forward-compatibility package does not support this GPU";
  if (error_name == "cudaErrorDevicesUnavailable")
    return "every device is busy or in an exclusive compute mode (nvidia-smi -q -d COMPUTE)";
  if (error_name == "cudaErrorInitializationError" || error_name == "cudaErrorNotPermitted")
    return "CUDA could not initialize: check the permissions of /dev/nvidia*";
  return "";
}

/// One line for what the query found: how many devices, or why there are none to use.
inline std::string describe_gpu_query(const GpuQuery& q) {
  const std::string env =
      q.visible_devices_set ? cat("; CUDA_VISIBLE_DEVICES='", q.visible_devices, "'") : std::string();
  const std::string call = q.call.empty() ? std::string("cudaGetDeviceCount") : q.call;
  if (q.failed()) {
    const std::string hint = gpu_query_hint(q.error_name);
    return cat("no usable CUDA device: ", call, " failed with ", q.error_name, " (", q.error_text, ")",
               hint.empty() ? std::string() : ": " + hint, env);
  }
  if (q.count == 0) return cat("no CUDA device visible: ", call, " found none", env);
  return cat(q.count, " CUDA device", q.count == 1 ? "" : "s", " visible", env);
}

}  // namespace dax::detail
