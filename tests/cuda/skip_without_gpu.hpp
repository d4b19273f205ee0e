// The first call of every CUDA test: without a visible GPU it says so and exits with 77, which
// ctest reports as skipped (CI has nvcc but no GPU).
#pragma once

#include <cstdio>
#include <cstdlib>

#include <dax/backend/cuda/device.cuh>

namespace dax::test {

/// The number of visible GPUs; exits with 77 when there is none, naming what needed one.
inline int gpus_or_skip(const char* what) {
  const int gpus = detail::cuda::visible_gpus();
  if (gpus > 0) return gpus;
  std::printf("SKIPPED: no CUDA device visible; %s need a GPU\n", what);
  std::exit(77);
}

}  // namespace dax::test
