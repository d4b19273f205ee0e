// Reshard benchmark, nccl-tests style: for each transition, the bytes, the time (max over ranks,
// median over iterations), algbw, busbw with the collective's factor, and the ratio to the raw MPI
// call moving the same bytes in the same run (raw time / dax time; 1.0 = as fast as MPI).
// Usage: mpirun -np 4 reshard_bench [--mib 64] [--iters 10] [--json reshard_bench.json]
#include <dax/dax.hpp>

#include "bench_common.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace {

struct Row {
  std::string name, collective;
  double bytes = 0, dax_s = 0, raw_s = 0, bus_factor = 1;
};

// Median over iterations of the slowest rank's time; dax and raw calls alternate so drift in the
// machine's load hits both alike.
std::pair<double, double> time_pair(const std::function<void()>& dax_call, const std::function<void()>& raw_call,
                                    int iters) {
  const auto once = dax::bench::slowest_rank_seconds;
  for (int i = 0; i < 2; ++i) once(dax_call), once(raw_call);  // warm-up: plans, caches, pages
  std::vector<double> d, r;
  for (int i = 0; i < iters; ++i) {
    d.push_back(once(dax_call));
    r.push_back(once(raw_call));
  }
  return {dax::bench::median(d), dax::bench::median(r)};
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  int64_t mib = 64;
  int iters = 10;
  std::string json = "reshard_bench.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mib") mib = std::stoll(argv[i + 1]);
    else if (flag == "--iters") iters = std::stoi(argv[i + 1]);
    else if (flag == "--json") json = argv[i + 1];
  }
  const int n = rt.size();
  const dax::Shape shape = dax::bench::square_float_shape(mib);
  const int64_t rows = shape[0], cols = shape[1];
  const int64_t total = rows * cols, piece = total / n;
  const double bytes = double(total) * 4;

  const dax::Mesh line({n}, {"x"});
  auto on = [&](const dax::Mesh& m, dax::P spec) { return dax::NamedSharding(m, spec); };
  std::vector<float> host(total);
  for (int64_t i = 0; i < total; ++i) host[i] = float(i % 1000) * 0.25f;
  const auto replicated = dax::device_put(host, shape, on(line, dax::P()));
  const auto by_rows = dax::reshard(replicated, on(line, dax::P("x")));
  const auto partial = dax::from_local(host, shape, on(line, dax::P().with_unreduced("x")));

  std::vector<float> send(total), recv(total);
  std::memcpy(send.data(), host.data(), total * 4);
  const double f = double(n - 1) / n;
  std::vector<Row> table;
  auto measure = [&](Row row, const std::function<void()>& dax_call, const std::function<void()>& raw_call) {
    std::tie(row.dax_s, row.raw_s) = time_pair(dax_call, raw_call, iters);
    table.push_back(row);
  };

  measure({"S(0) -> R", "all_gather", bytes, 0, 0, f},
          [&] { dax::reshard(by_rows, on(line, dax::P())); },
          [&] { MPI_Allgather(send.data(), piece, MPI_FLOAT, recv.data(), piece, MPI_FLOAT, MPI_COMM_WORLD); });
  measure({"S(0) -> S(1)", "all_to_all", bytes / n, 0, 0, f},
          [&] { dax::reshard(by_rows, on(line, dax::P(dax::none, "x"))); },
          [&] { MPI_Alltoall(send.data(), piece / n, MPI_FLOAT, recv.data(), piece / n, MPI_FLOAT, MPI_COMM_WORLD); });
  measure({"U -> R", "all_reduce", bytes, 0, 0, 2 * f},
          [&] { dax::reshard(partial, on(line, dax::P())); },
          [&] { MPI_Allreduce(send.data(), recv.data(), total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
  measure({"U -> S(0)", "reduce_scatter", bytes, 0, 0, f},
          [&] { dax::reshard(partial, on(line, dax::P("x"))); },
          [&] { MPI_Reduce_scatter_block(send.data(), recv.data(), piece, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
  measure({"R -> S(0)", "local_slice", bytes / n, 0, 0, 1},
          [&] { dax::reshard(replicated, on(line, dax::P("x"))); },
          [&] { std::memcpy(recv.data(), send.data() + rt.rank() * piece, piece * 4); });
  if (n == 4) {
    const dax::Mesh grid({2, 2}, {"x", "y"});
    const auto blocks = dax::reshard(dax::device_put(host, shape, on(grid, dax::P())), on(grid, dax::P("x", "y")));
    measure({"S(0,1) -> R (2x2)", "all_gather", bytes, 0, 0, f},
            [&] { dax::reshard(blocks, on(grid, dax::P())); },
            [&] { MPI_Allgather(send.data(), piece, MPI_FLOAT, recv.data(), piece, MPI_FLOAT, MPI_COMM_WORLD); });
    const auto xy_rows = dax::reshard(blocks, on(grid, dax::P(dax::axes("x", "y"))));
    measure({"S(0:xy) -> S(1:xy) (2x2)", "all_to_all", bytes / n, 0, 0, f},
            [&] { dax::reshard(xy_rows, on(grid, dax::P(dax::none, dax::axes("x", "y")))); },
            [&] { MPI_Alltoall(send.data(), piece / n, MPI_FLOAT, recv.data(), piece / n, MPI_FLOAT, MPI_COMM_WORLD); });
  }

  if (rt.rank() == 0) {
    std::cout << "# dax reshard benchmark: float32 " << dax::to_string(shape) << " (" << mib << " MiB), "
              << n << " ranks, median of " << iters << " iterations (max over ranks)\n";
    std::cout << std::left << std::setw(26) << "# transition" << std::setw(16) << "collective" << std::right
              << std::setw(12) << "size(B)" << std::setw(11) << "dax(us)" << std::setw(10) << "algbw"
              << std::setw(10) << "busbw" << std::setw(11) << "mpi(us)" << std::setw(10) << "mpi_bus"
              << std::setw(8) << "ratio" << "\n";
    std::ostringstream js;
    js << "{\n  \"benchmark\": \"reshard\", \"ranks\": " << n << ", \"dtype\": \"float32\", \"mib\": " << mib
       << ", \"iters\": " << iters << ",\n  \"rows\": [\n";
    for (size_t i = 0; i < table.size(); ++i) {
      const Row& r = table[i];
      const double algbw = r.bytes / r.dax_s / 1e9, busbw = algbw * r.bus_factor;
      const double raw_bus = r.bytes / r.raw_s / 1e9 * r.bus_factor, ratio = r.raw_s / r.dax_s;
      std::cout << std::left << std::setw(26) << r.name << std::setw(16) << r.collective << std::right
                << std::setw(12) << int64_t(r.bytes) << std::fixed << std::setprecision(1) << std::setw(11)
                << r.dax_s * 1e6 << std::setprecision(2) << std::setw(10) << algbw << std::setw(10) << busbw
                << std::setprecision(1) << std::setw(11) << r.raw_s * 1e6 << std::setprecision(2)
                << std::setw(10) << raw_bus << std::setw(8) << ratio << "\n";
      js << "    {\"transition\": \"" << r.name << "\", \"collective\": \"" << r.collective
         << "\", \"bytes\": " << int64_t(r.bytes) << ", \"dax_us\": " << r.dax_s * 1e6
         << ", \"algbw_GBps\": " << algbw << ", \"busbw_GBps\": " << busbw << ", \"mpi_us\": " << r.raw_s * 1e6
         << ", \"ratio\": " << ratio << "}" << (i + 1 < table.size() ? "," : "") << "\n";
    }
    js << "  ]\n}\n";
    std::ofstream(json) << js.str();
    std::cout << "# algbw/busbw in GB/s; ratio = mpi time / dax time; JSON in " << json << "\n";
  }
  return 0;
}
