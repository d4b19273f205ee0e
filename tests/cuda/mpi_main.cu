// The runner of the multi-rank tests compiled by nvcc for the CUDA backend: the same test sources
// as tests/mpi, run on the GPU. Skips (exit 77 on every rank) when no GPU is visible. The build
// includes this file first in one generated translation unit with the test sources
// (tests/cuda/CMakeLists.txt); Catch itself runs from catch_runner.cpp (g++).
#include <catch2/catch.hpp>

#include <cstdio>

#include <dax/dax.hpp>

#include "skip_without_gpu.hpp"

namespace dax::test {
int run_cuda_mpi_tests(int argc, char** argv);  // catch_runner.cpp
}

int main(int argc, char** argv) {
  const int gpus = dax::test::gpus_or_skip("the CUDA backend's ops and reshard tests");
  dax::Runtime rt(argc, argv);
  if (rt.backend() != dax::Backend::cuda) {
    std::printf("dax_cuda_mpi_tests: expected the CUDA backend with %d GPU(s) visible, got %s\n", gpus,
                dax::to_string(rt.backend()).c_str());
    return 1;
  }
  return dax::test::run_cuda_mpi_tests(argc, argv);
}
