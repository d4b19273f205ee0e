// A program that goes wrong on purpose, run by ctest under mpiexec: the job must end with a clear
// error within DAX_TIMEOUT_S, never hang.
//   hang skip  -- rank 1 skips a reshard the others run, and leaves
//   hang kill  -- rank 1 dies (SIGKILL) while the others wait for it in a collective
//   hang hook  -- as skip, with an abort hook (what ncclCommAbort is on GPUs) that must run
//   hang stall -- rank 1 sleeps (30 s) before the reshard: only the timeout can end the wait
#include <dax/dax.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  const dax::Mesh mesh({rt.size()}, {"x"});
  const auto x = dax::ones<float>({4 * rt.size()}, dax::NamedSharding(mesh, dax::P("x")));
  dax::sum(x);  // every rank: the group exists and works
  if (mode == "hook") {
    const int rank = rt.rank();
    dax::detail::abort_hooks().add(&rt, [rank] { std::fprintf(stderr, "rank %d: the abort hook ran\n", rank); });
  }
  if ((mode == "skip" || mode == "hook") && rt.rank() == 1) {
    std::fprintf(stderr, "rank 1: skipping the reshard and leaving\n");
    return 0;
  } else if (mode == "kill" && rt.rank() == 1) {
    std::raise(SIGKILL);
  } else {
    if (mode == "stall" && rt.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(30));
    dax::reshard(x, dax::NamedSharding(mesh, dax::P()));
  }
  dax::sum(x * 2.0f);
  std::printf("rank %d: finished, which a diverged job must not\n", rt.rank());
  return 0;
}
