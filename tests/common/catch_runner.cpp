// Catch's implementation, compiled once for every test program (the unit, multi-rank, io and
// jax_blocks tests, and the nvcc-built CUDA tests): each copy took 30-40 s of -O3. It includes no
// dax header (the device id is the world rank), so the g++ and the nvcc builds of dax never meet
// in one program.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include "catch_runner.hpp"

namespace dax::test {

int run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }

int run_catch_on_every_rank(int argc, char** argv, const std::string& heading) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  session.configData().name = heading + " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  int failed = session.run();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any == 0 ? 0 : 1;
}

}  // namespace dax::test
