// The body of the multi-rank test runners (tests/mpi/main.cpp, tests/cuda/catch_runner.cpp): Catch
// on every rank under a heading that names the rank, and one exit status for all ranks (non-zero
// everywhere if any rank failed). Include after defining CATCH_CONFIG_RUNNER. It needs MPI only, not
// dax (the device id is the world rank), so the CUDA runner compiles Catch with g++ once.
#pragma once

#include <catch2/catch.hpp>
#include <mpi.h>

#include <string>

namespace dax::test {

inline int run_catch_on_every_rank(int argc, char** argv, const std::string& heading) {
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
