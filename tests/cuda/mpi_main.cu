// The runner of the multi-rank tests compiled by nvcc for the CUDA backend: the same test sources
// as tests/mpi, run on the GPU. Skips (exit 77 on every rank) when no GPU is visible.
#define CATCH_CONFIG_RUNNER
#include "../common/catch_mpi_runner.hpp"
#include "skip_without_gpu.hpp"

int main(int argc, char** argv) {
  const int gpus = dax::test::gpus_or_skip("the CUDA backend's ops and reshard tests");
  dax::Runtime rt(argc, argv);
  if (rt.backend() != dax::Backend::cuda) {
    std::printf("dax_cuda_mpi_tests: expected the CUDA backend with %d GPU(s) visible, got %s\n", gpus,
                dax::to_string(rt.backend()).c_str());
    return 1;
  }
  return dax::test::run_catch_on_every_rank(argc, argv, "dax_cuda_mpi_tests, CUDA backend");
}
