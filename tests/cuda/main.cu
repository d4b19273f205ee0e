// The runner of the nvcc-built tests, one program (dax_cuda_tests): its first argument names what
// to run. `mpi` runs the multi-rank tests of tests/mpi compiled for the CUDA backend under Catch
// (the arguments after it are Catch's); `smoke`, `kernels`, `big_sizes` and `transport` run the
// standalone programs of this folder, whose `main` lives in a namespace of its own. Each skips
// (exit 77, on every rank) when no GPU is visible. The build includes this file first in one
// generated translation unit with all of those sources (tests/cuda/CMakeLists.txt), so nvcc parses
// dax once for them all; Catch itself runs from tests/common/catch_runner.cpp (g++).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>

#include <dax/dax.hpp>

#include "skip_without_gpu.hpp"

#include "../common/catch_runner.hpp"

// The standalone programs' entry points, defined further down the generated unit.
namespace dax_cuda_cuda_smoke_test {
int main(int argc, char** argv);
}
namespace dax_cuda_kernels_test {
int main();
}
namespace dax_cuda_big_sizes_test {
int main();
}
namespace dax_cuda_transport_test {
int main(int argc, char** argv);
}

namespace dax::test {

inline int run_cuda_mpi_tests(int argc, char** argv) {
  const int gpus = gpus_or_skip("the CUDA backend's ops and reshard tests");
  dax::Runtime rt(argc, argv);
  if (rt.backend() != dax::Backend::cuda) {
    std::printf("dax_cuda_tests mpi: expected the CUDA backend with %d GPU(s) visible, got %s\n", gpus,
                dax::to_string(rt.backend()).c_str());
    return 1;
  }
  return run_catch_on_every_rank(argc, argv, "dax_cuda_tests mpi, CUDA backend");
}

}  // namespace dax::test

int main(int argc, char** argv) {
  const char* what = argc >= 2 ? argv[1] : "";
  // What follows the name is the program's own arguments; the name takes argv[0]'s place.
  char** rest = argv + 1;
  if (argc >= 2) rest[0] = argv[0];
  if (std::strcmp(what, "mpi") == 0) return dax::test::run_cuda_mpi_tests(argc - 1, rest);
  if (std::strcmp(what, "smoke") == 0) return dax_cuda_cuda_smoke_test::main(argc - 1, rest);
  if (std::strcmp(what, "kernels") == 0) return dax_cuda_kernels_test::main();
  if (std::strcmp(what, "big_sizes") == 0) return dax_cuda_big_sizes_test::main();
  if (std::strcmp(what, "transport") == 0) return dax_cuda_transport_test::main(argc - 1, rest);
  std::fprintf(stderr, "usage: dax_cuda_tests mpi|smoke|kernels|big_sizes|transport [arguments]\n");
  return 2;
}
