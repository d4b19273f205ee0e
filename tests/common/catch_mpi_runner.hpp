// The body of the multi-rank test runners (tests/mpi/main.cpp, tests/cuda/mpi_main.cu): Catch on
// every rank under a heading that names the rank, and one exit status for all ranks (non-zero
// everywhere if any rank failed). Include after defining CATCH_CONFIG_RUNNER.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include <dax/dax.hpp>

namespace dax::test {

inline int run_catch_on_every_rank(int argc, char** argv, const std::string& heading) {
  const Runtime& rt = Runtime::current();
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  session.configData().name = heading + " (rank " + std::to_string(rt.rank()) + " of " + std::to_string(rt.size()) + ")";
  int failed = session.run();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any == 0 ? 0 : 1;
}

}  // namespace dax::test
