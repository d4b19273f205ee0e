// The process's GPU: which device this rank drives, its one stream and its cuBLAS handle, plus the
// checks that turn CUDA and cuBLAS return codes into dax::Error and the launch shape kernels use.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include <dax/backend/gpu_query.hpp>
#include <dax/backend/launch_shape.hpp>
#include <dax/comm/collective_checks.hpp>
#include <dax/core/error.hpp>

namespace dax::detail::cuda {

/// Throws dax::Error naming `call` when `status` is an error.
inline void check_cuda(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  // Clear the thread's last error too, or the next launch check would blame its kernel for it
  // (sticky errors, from a faulting kernel, stay whatever is done here).
  (void)cudaGetLastError();
  fail("CUDA error: ", call, " returned ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

inline void check_cublas(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail("cuBLAS error: ", call, " returned ", cublasGetStatusName(status), " (", cublasGetStatusString(status), ")");
}

}  // namespace dax::detail::cuda

#define DAX_CUDA_CHECK(call) ::dax::detail::cuda::check_cuda((call), #call)
#define DAX_CUBLAS_CHECK(call) ::dax::detail::cuda::check_cublas((call), #call)

namespace dax::detail::cuda {

/// Asks CUDA how many devices this process can see, keeping CUDA's error when the question
/// fails (no driver, a driver too old, no device): never a silent 0. Does not throw.
inline GpuQuery query_gpus() {
  GpuQuery q;
  q.call = "cudaGetDeviceCount";
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
    q.visible_devices_set = true;
    q.visible_devices = env;
  }
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    q.error_name = cudaGetErrorName(status);
    q.error_text = cudaGetErrorString(status);
    return q;
  }
  q.count = count;
  return q;
}

/// Devices this process can see; throws dax::Error with CUDA's reason when there are none.
inline int visible_gpus() {
  const GpuQuery q = query_gpus();
  DAX_CHECK(q.count > 0, "CUDA backend: ", describe_gpu_query(q));
  return q.count;
}

/// The report of a wait for the device that outlived DAX_TIMEOUT_S (run by the watchdog thread).
inline std::string describe_stuck_wait(const void* what) {
  const QueuedCollective& last = last_queued_collective();
  const char* call = last.call.load();
  const std::string* group = last.group.load();
  const int rank = last.world_rank.load();
  const double timeout = job_watchdog() ? job_watchdog()->timeout_s() : collective_checks().timeout_s;
  return cat("dax: ", rank >= 0 ? cat("world rank ", rank, ": ") : std::string(), static_cast<const char*>(what),
             " did not finish within ", timeout, " s (DAX_TIMEOUT_S); ",
             call != nullptr && group != nullptr
                 ? cat("the last collective queued on the GPU was ", call, " on the group ", *group,
                       ", which a member may have skipped or left")
                 : std::string("no collective was queued on the GPU, so a kernel is stuck"),
             ". Aborting the job (ncclCommAbort first).");
}

/// The device a rank drives and the one stream all of its work goes on. Every kernel, copy, GEMM
/// and collective is ordered on that stream, which is what lets a freed block be reused at once
/// (see memory.cuh) and keeps the host waiting only where a value must reach it.
class DeviceContext {
 public:
  DeviceContext() = default;
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;
  // No CUDA calls here: at static destruction the CUDA runtime may already be unloaded. The
  // runtime calls shutdown() while everything is still alive.
  ~DeviceContext() = default;

  /// Binds this process to GPU node_local_rank % visible GPUs and creates its stream and handle.
  /// Calling it again for the same GPU does nothing.
  void init(int node_local_rank) {
    const int gpus = visible_gpus();
    const int device = node_local_rank % gpus;
    if (initialized_) {
      DAX_CHECK(device == device_, "CUDA backend: already running on GPU ", device_, "; cannot switch to GPU ", device,
                " (node-local rank ", node_local_rank, ")");
      return;
    }
    DAX_CUDA_CHECK(cudaSetDevice(device));
    cudaStream_t stream = nullptr;
    DAX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasHandle_t blas = nullptr;
    try {
      DAX_CUBLAS_CHECK(cublasCreate(&blas));
      DAX_CUBLAS_CHECK(cublasSetStream(blas, stream));
      DAX_CUBLAS_CHECK(cublasSetPointerMode(blas, CUBLAS_POINTER_MODE_HOST));  // alpha, beta on the host
      DAX_CUBLAS_CHECK(cublasSetMathMode(blas, math_mode(true)));              // gemm.cuh sets it per call
    } catch (...) {
      if (blas) (void)cublasDestroy(blas);
      (void)cudaStreamDestroy(stream);
      throw;
    }
    device_ = device;
    stream_ = stream;
    blas_ = blas;
    initialized_ = true;
  }

  /// Destroys the handle and the stream (waiting for the stream's work first); safe to call twice.
  void shutdown() {
    if (!initialized_) return;
    initialized_ = false;
    const cudaError_t synced = cudaStreamSynchronize(stream_);
    const cublasStatus_t handle = cublasDestroy(blas_);
    const cudaError_t stream = cudaStreamDestroy(stream_);
    blas_ = nullptr;
    stream_ = nullptr;
    check_cuda(synced, "cudaStreamSynchronize(stream)");
    check_cublas(handle, "cublasDestroy(handle)");
    check_cuda(stream, "cudaStreamDestroy(stream)");
  }

  bool initialized() const { return initialized_; }

  int device() const {
    require();
    return device_;
  }
  cudaStream_t stream() const {
    require();
    return stream_;
  }
  cublasHandle_t blas() const {
    require();
    return blas_;
  }

  /// Waits for everything queued on the stream. Watched like a collective: NCCL calls return once
  /// queued, so a peer that never joins one shows up here, as a wait that outlives DAX_TIMEOUT_S;
  /// the watchdog then reports `what` and the last collective queued, and aborts the job (after
  /// ncclCommAbort). `what` must outlive the wait (a string literal).
  void synchronize(const char* what = "a wait for the GPU's queued work") const {
    const Watched watched(job_watchdog(), what, &describe_stuck_wait);
    DAX_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }

  /// cuBLAS math mode for a precision. Exact float32 also keeps reductions inside half and
  /// bfloat16 products in float32 (cuBLAS may otherwise reduce split-K parts in the output type).
  static cublasMath_t math_mode(bool exact_float32) {
    return exact_float32
               ? static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)
               : CUBLAS_TF32_TENSOR_OP_MATH;
  }

 private:
  void require() const {
    DAX_CHECK(initialized_,
              "CUDA backend used before its device was set up "
              "(dax::Runtime initializes it; create one first)");
  }

  bool initialized_ = false;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
};

/// The process's device context.
inline DeviceContext& context() {
  static DeviceContext instance;
  return instance;
}

inline void synchronize() { context().synchronize(); }

// ---- launch shape shared by the kernels (the arithmetic is backend/launch_shape.hpp's) ----

using ::dax::detail::block_threads;

/// A GridShape as CUDA's dim3; every dimension is within CUDA's limits by construction.
inline dim3 to_dim3(const GridShape& grid) {
  return dim3(static_cast<unsigned>(grid.x), static_cast<unsigned>(grid.y), static_cast<unsigned>(grid.z));
}

/// Blocks for a grid-stride loop over `count` > 0 items (callers return before launching nothing),
/// `per_block` items per block per pass.
inline dim3 grid_blocks(int64_t count, int64_t per_block = block_threads) {
  return to_dim3(loop_grid(count, per_block));
}

/// Turns a failed launch (bad configuration, or an earlier kernel's fault) into a dax::Error.
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

#if defined(__CUDACC__)
/// First item and step of a grid-stride loop over a 1-d grid, in 64 bits: the products are taken
/// after widening, so no block index times block size wraps at 2^32.
__device__ inline int64_t grid_first() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t grid_step() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }
#endif

}  // namespace dax::detail::cuda
