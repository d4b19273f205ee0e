// What the collective guards cost per op: a small sum (one all-reduce) and a small reshard
// (one all-gather) over all ranks, timed per call, next to the raw MPI_Allreduce / MPI_Allgather
// of the same bytes in the same run. Run it with DAX_CHECK_COLLECTIVES=0 (no check), unset (the
// default light check) and =1 (the full check) to see each check's price; the watchdog
// (DAX_TIMEOUT_S) is armed either way.
//   mpirun -np 2 ./check_cost_bench [iterations]
#include <dax/dax.hpp>

#include "bench_common.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int n = rt.size();
  const dax::Mesh mesh({n}, {"x"});
  const auto x = dax::ones<float>({8 * n}, dax::NamedSharding(mesh, dax::P("x")));
  const dax::NamedSharding replicated(mesh, dax::P());
  std::vector<float> in(8 * n, 1.0f), out(8 * n);
  volatile float sink = 0;
  const double sum_us = dax::bench::slowest_rank_per_call_us([&] { sink = sink + dax::sum(x).local_data()[0]; }, iters);
  const double raw_reduce_us = dax::bench::slowest_rank_per_call_us([&] {
    MPI_Allreduce(in.data(), out.data(), 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    sink = sink + out[0];
  }, iters);
  const double gather_us = dax::bench::slowest_rank_per_call_us([&] { sink = sink + dax::reshard(x, replicated).local_data()[0]; }, iters);
  const double raw_gather_us = dax::bench::slowest_rank_per_call_us([&] {
    MPI_Allgather(in.data(), 8, MPI_FLOAT, out.data(), 8, MPI_FLOAT, MPI_COMM_WORLD);
    sink = sink + out[0];
  }, iters);
  const auto& checks = dax::detail::collective_checks();
  const char* mode = checks.fingerprints ? "full" : checks.light ? "light" : "off";
  if (rt.rank() == 0) {
    std::printf("%d ranks, check %s, per op (us): sum %.2f (raw MPI_Allreduce %.2f, +%.2f), "
                "reshard->P() %.2f (raw MPI_Allgather %.2f, +%.2f)\n",
                n, mode, sum_us, raw_reduce_us, sum_us - raw_reduce_us, gather_us, raw_gather_us,
                gather_us - raw_gather_us);
    std::ofstream json(std::string("check_cost_bench_") + mode + ".json");
    json << "{\"benchmark\": \"check_cost\", \"ranks\": " << n << ", \"check\": \"" << mode << "\""
         << ", \"sum_us\": " << sum_us << ", \"raw_allreduce_us\": " << raw_reduce_us << ", \"reshard_us\": " << gather_us
         << ", \"raw_allgather_us\": " << raw_gather_us << "}\n";
  }
  return 0;
}
