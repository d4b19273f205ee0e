// Catch's implementation for dax_cuda_mpi_tests, compiled once by g++ (nvcc took minutes over it).
// It includes no dax header: dax's inline functions differ between the g++ and the nvcc build
// (DAX_CUDA_BACKEND), so only the nvcc translation unit may define them.
#define CATCH_CONFIG_RUNNER
#include "../common/catch_mpi_runner.hpp"

namespace dax::test {

int run_cuda_mpi_tests(int argc, char** argv) {
  return run_catch_on_every_rank(argc, argv, "dax_cuda_mpi_tests, CUDA backend");
}

}  // namespace dax::test
