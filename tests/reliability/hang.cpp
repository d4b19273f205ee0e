// A program that goes wrong on purpose, run by ctest under mpiexec: the job must end with a clear
// error within DAX_TIMEOUT_S, never hang.
//   hang skip  -- rank 1 skips a reshard the others run, and leaves
//   hang kill  -- rank 1 dies (SIGKILL) while the others wait for it in a collective
//   hang hook  -- as skip, with an abort hook (what ncclCommAbort is on GPUs) that must run
//   hang stall -- rank 1 sleeps (30 s) before the reshard: only the timeout can end the wait
//   hang kill_in_all_reduce / kill_in_all_to_all / kill_in_exchange -- every rank runs that
//      collective over and over (an all-reduce of a matmul's partial sums; a rows -> columns reshard,
//      an all-to-all through MPI under DAX_CMA=0 and the strided peer-write exchange by default) and
//      rank 1 is killed (SIGKILL) from another thread in the middle of it (tests/reliability/
//      kill_collective.sh checks how fast the others stop and what is left behind)
#include <dax/dax.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
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
  if (mode.rfind("kill_in_", 0) == 0) {
    if (rt.rank() == 0) {  // the job's id, which names the shared-memory files MPI makes for it
      const char* job = std::getenv("OMPI_MCA_ess_base_jobid");
      std::printf("job %s\n", job ? job : "unknown");
      std::fflush(stdout);
    }
    const int64_t n = 512 * rt.size();
    const auto a = dax::ones<float>({n, n}, dax::NamedSharding(mesh, dax::P(dax::none, "x")));
    const auto b = dax::ones<float>({n, n}, dax::NamedSharding(mesh, dax::P("x", dax::none)));
    const dax::NamedSharding rows(mesh, dax::P("x", dax::none)), cols(mesh, dax::P(dax::none, "x"));
    std::thread killer;
    if (rt.rank() == 1)
      killer = std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        std::printf("rank 1: killed (SIGKILL) in the middle of the collectives\n");
        std::fflush(stdout);
        std::raise(SIGKILL);
      });
    for (int i = 0; i < 100000; ++i) {
      if (mode == "kill_in_all_reduce")  // (n, n) partial sums, all-reduced
        (void)dax::reshard(dax::matmul(a, b), dax::NamedSharding(mesh, dax::P()));
      else (void)dax::reshard(dax::reshard(b, cols), rows);
    }
    if (killer.joinable()) killer.join();
    return 0;
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
