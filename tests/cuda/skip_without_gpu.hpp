// The first call of every CUDA test: without a visible GPU it says why (CUDA's own error when the
// query failed) and exits with 77, which ctest reports as skipped (CI has nvcc but no GPU). Where a
// GPU is visible (nvidia-smi -L lists one, or /dev/nvidia0 exists) but CUDA finds none, it fails
// instead: a GPU test that skips on a GPU machine would hide a broken setup.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <dax/backend/cuda/device.cuh>

#include "../common/gpu_verdict.hpp"

namespace dax::test {

/// The number of visible GPUs; exits with 77 (skip) or 1 (fail), naming what needed one.
inline int gpus_or_skip(const char* what) {
  const detail::GpuQuery q = detail::cuda::query_gpus();
  const GpuVerdict verdict = gpu_verdict(q, q.count > 0 ? std::string() : system_gpu_evidence(), what);
  if (verdict.kind == GpuVerdict::run) return q.count;
  std::printf("%s\n", verdict.message.c_str());
  std::fflush(stdout);
  std::exit(verdict.kind == GpuVerdict::skip ? 77 : 1);
}

}  // namespace dax::test
