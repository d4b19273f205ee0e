// The runner of the multi-rank tests compiled by nvcc for the CUDA backend: the same test sources
// as tests/mpi, run on the GPU. Skips (exit 77 on every rank) when no GPU is visible.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstdio>

#include <dax/dax.hpp>

int main(int argc, char** argv) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("SKIPPED: no CUDA device visible; the CUDA backend's ops and reshard tests need a GPU\n");
    return 77;
  }
  dax::Runtime rt(argc, argv);
  if (rt.backend() != dax::Backend::cuda) {
    std::printf("dax_cuda_mpi_tests: expected the CUDA backend with %d GPU(s) visible, got %s\n", gpus,
                dax::to_string(rt.backend()).c_str());
    return 1;
  }
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  session.configData().name = "dax_cuda_mpi_tests (rank " + std::to_string(rt.rank()) + " of " +
                              std::to_string(rt.size()) + ", CUDA backend)";
  int failed = session.run();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any == 0 ? 0 : 1;
}
