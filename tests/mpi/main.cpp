// The runner of the multi-rank tests: starts the dax runtime, runs Catch on every rank (the
// heading names the rank), and exits non-zero on every rank if any rank failed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <dax/dax.hpp>

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  session.configData().name = "dax_mpi_tests (rank " + std::to_string(rt.rank()) + " of " +
                              std::to_string(rt.size()) + ")";
  int failed = session.run();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any == 0 ? 0 : 1;
}
