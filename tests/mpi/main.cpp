// The runner of the multi-rank tests: starts the dax runtime, runs Catch on every rank (the
// heading names the rank), and exits non-zero on every rank if any rank failed.
#include <dax/dax.hpp>

#include "../common/catch_runner.hpp"

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  return dax::test::run_catch_on_every_rank(argc, argv, "dax_mpi_tests");
}
