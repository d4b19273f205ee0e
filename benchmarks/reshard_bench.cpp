// Reshard benchmark, nccl-tests style: for each transition, the bytes, the time (max over ranks,
// median over iterations), algbw, busbw with the collective's factor, and two ratios to the raw
// MPI call moving the same bytes in the same run (raw time / dax time; 1.0 = as fast as MPI):
//   ratio   raw MPI on buffers from dax's own host allocator (the same kind of memory: on Linux,
//           2 MiB-aligned blocks with transparent huge pages), the like-for-like comparison;
//   user    raw MPI on plain std::vector buffers (4 KiB pages), what a hand-written program gets.
// Each ratio is the median over iterations of the ratio of calls made back to back (the three
// calls of an iteration rotate their order), which cancels this machine's slow drifts in memory
// bandwidth. `mem` is the reshard's peak of extra dax memory over one output piece (1.0 = only
// the output; MPI's own buffers are not counted).
// Usage: mpirun -np 4 reshard_bench [--mib 64] [--shape 8192x1024] [--dtype float32|float64] [--iters 10]
//        [--json reshard_bench.json]   (--shape overrides --mib's square-ish array)
#include <dax/dax.hpp>

#include "bench_common.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <type_traits>

namespace {

struct Row {
  std::string name, collective;
  double bytes = 0, bus_factor = 1;
  double dax_s = 0, raw_s = 0, user_s = 0, ratio = 0, user_ratio = 0, mem = 0;
};

/// Times dax, raw-on-dax-memory and raw-on-user-memory calls, `iters` rounds after two warm-ups,
/// rotating their order each round. Fills the row's medians and paired ratios.
void time_three(Row& row, const std::function<void()>& dax_call, const std::function<void()>& raw_call,
                const std::function<void()>& user_call, int iters) {
  const auto once = dax::bench::slowest_rank_seconds;
  const std::array<const std::function<void()>*, 3> calls{&dax_call, &raw_call, &user_call};
  for (int i = 0; i < 2; ++i)
    for (auto* c : calls) once(*c);  // plans, caches, pages
  std::array<std::vector<double>, 3> t;
  for (int i = 0; i < iters; ++i)
    for (int k = 0; k < 3; ++k) {
      const int which = (i + k) % 3;
      t[which].push_back(once(*calls[which]));
    }
  std::vector<double> ratio, user_ratio;
  for (int i = 0; i < iters; ++i) {
    ratio.push_back(t[1][i] / t[0][i]);
    user_ratio.push_back(t[2][i] / t[0][i]);
  }
  row.dax_s = dax::bench::median(t[0]);
  row.raw_s = dax::bench::median(t[1]);
  row.user_s = dax::bench::median(t[2]);
  row.ratio = dax::bench::median(ratio);
  row.user_ratio = dax::bench::median(user_ratio);
}

}  // namespace

template <class T>
void run(dax::Runtime& rt, const dax::Shape& shape, int iters, const std::string& json) {
  const int n = rt.size();
  const int64_t rows = shape[0], cols = shape[1];
  const int64_t total = rows * cols, piece = total / n;
  const double bytes = double(total) * sizeof(T);

  const dax::Mesh line({n}, {"x"});
  auto on = [&](const dax::Mesh& m, dax::P spec) { return dax::NamedSharding(m, spec); };
  std::vector<T> host(total);
  for (int64_t i = 0; i < total; ++i) host[i] = T(i % 1000) * T(0.25);
  const auto replicated = dax::device_put(host, shape, on(line, dax::P()));
  const auto by_rows = dax::reshard(replicated, on(line, dax::P("x")));
  const auto partial = dax::from_local(host, shape, on(line, dax::P().with_unreduced("x")));

  // The raw calls' buffers: from dax's host allocator (like dax's pieces), and plain vectors.
  const auto send_block = dax::detail::cpu::allocate(total * sizeof(T)), recv_block = dax::detail::cpu::allocate(total * sizeof(T));
  T* const send = static_cast<T*>(send_block->data());
  T* const recv = static_cast<T*>(recv_block->data());
  std::vector<T> user_send(host), user_recv(total);
  std::memcpy(send, host.data(), total * sizeof(T));
  std::memset(static_cast<void*>(recv), 0, total * sizeof(T));
  const MPI_Datatype mt = std::is_same_v<T, double> ? MPI_DOUBLE : MPI_FLOAT;
  const double f = double(n - 1) / n;
  std::vector<Row> table;
  // `raw(s, r)` is the raw call on send/receive buffers s and r: run on both kinds of memory.
  auto measure = [&](Row row, const std::function<dax::DistArray<T>()>& dax_call,
                     const std::function<void(T*, T*)>& raw) {
    time_three(row, [&] { dax_call(); }, [&] { raw(send, recv); }, [&] { raw(user_send.data(), user_recv.data()); },
               iters);
    dax::reset_peak_memory();
    const int64_t before = dax::memory_stats().bytes_in_use;
    const auto out = dax_call();
    const double out_bytes = double(dax::numel(out.local_shape())) * sizeof(T);
    double mem = out_bytes > 0 ? double(dax::memory_stats().peak_bytes_in_use - before) / out_bytes : 0;
    MPI_Allreduce(MPI_IN_PLACE, &mem, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    row.mem = mem;
    table.push_back(row);
  };

  measure({"S(0) -> R", "all_gather", bytes, f},
          [&] { return dax::reshard(by_rows, on(line, dax::P())); },
          [&](T* send, T* recv) { MPI_Allgather(send, piece, mt, recv, piece, mt, MPI_COMM_WORLD); });
  measure({"S(0) -> S(1)", "all_to_all", bytes / n, f},
          [&] { return dax::reshard(by_rows, on(line, dax::P(dax::none, "x"))); },
          [&](T* send, T* recv) { MPI_Alltoall(send, piece / n, mt, recv, piece / n, mt, MPI_COMM_WORLD); });
  const auto by_cols = dax::reshard(replicated, on(line, dax::P(dax::none, "x")));
  measure({"S(1) -> S(0)", "all_to_all", bytes / n, f},
          [&] { return dax::reshard(by_cols, on(line, dax::P("x"))); },
          [&](T* send, T* recv) { MPI_Alltoall(send, piece / n, mt, recv, piece / n, mt, MPI_COMM_WORLD); });
  measure({"S(1) -> R", "all_gather", bytes, f},
          [&] { return dax::reshard(by_cols, on(line, dax::P())); },
          [&](T* send, T* recv) { MPI_Allgather(send, piece, mt, recv, piece, mt, MPI_COMM_WORLD); });
  measure({"U -> R", "all_reduce", bytes, 2 * f},
          [&] { return dax::reshard(partial, on(line, dax::P())); },
          [&](T* send, T* recv) { MPI_Allreduce(send, recv, total, mt, MPI_SUM, MPI_COMM_WORLD); });
  measure({"U -> S(0)", "reduce_scatter", bytes, f},
          [&] { return dax::reshard(partial, on(line, dax::P("x"))); },
          [&](T* send, T* recv) { MPI_Reduce_scatter_block(send, recv, piece, mt, MPI_SUM, MPI_COMM_WORLD); });
  measure({"R -> S(0)", "local_slice", bytes / n, 1},
          [&] { return dax::reshard(replicated, on(line, dax::P("x"))); },
          [&](T* send, T* recv) { std::memcpy(recv, send + rt.rank() * piece, piece * sizeof(T)); });
  // A block of columns: a strided read of the replicated piece, against a memcpy of the same bytes.
  measure({"R -> S(1)", "local_slice", bytes / n, 1},
          [&] { return dax::reshard(replicated, on(line, dax::P(dax::none, "x"))); },
          [&](T* send, T* recv) { std::memcpy(recv, send + rt.rank() * piece, piece * sizeof(T)); });
  if (n == 4) {
    const dax::Mesh grid({2, 2}, {"x", "y"});
    const auto blocks = dax::reshard(dax::device_put(host, shape, on(grid, dax::P())), on(grid, dax::P("x", "y")));
    measure({"S(0,1) -> R (2x2)", "all_gather", bytes, f},
            [&] { return dax::reshard(blocks, on(grid, dax::P())); },
            [&](T* send, T* recv) { MPI_Allgather(send, piece, mt, recv, piece, mt, MPI_COMM_WORLD); });
    const auto xy_rows = dax::reshard(blocks, on(grid, dax::P(dax::axes("x", "y"))));
    measure({"S(0:xy) -> S(1:xy) (2x2)", "all_to_all", bytes / n, f},
            [&] { return dax::reshard(xy_rows, on(grid, dax::P(dax::none, dax::axes("x", "y")))); },
            [&](T* send, T* recv) { MPI_Alltoall(send, piece / n, mt, recv, piece / n, mt, MPI_COMM_WORLD); });
  }

  if (rt.rank() == 0) {
    std::cout << "# dax reshard benchmark: " << dax::to_string(dax::dtype_v<T>) << " " << dax::to_string(shape) << " (" << bytes / (1 << 20) << " MiB), "
              << n << " ranks, median of " << iters << " iterations (max over ranks)\n";
    std::cout << std::left << std::setw(26) << "# transition" << std::setw(16) << "collective" << std::right
              << std::setw(12) << "size(B)" << std::setw(11) << "dax(us)" << std::setw(9) << "algbw"
              << std::setw(9) << "busbw" << std::setw(11) << "mpi(us)" << std::setw(9) << "mpi_bus"
              << std::setw(8) << "ratio" << std::setw(11) << "user(us)" << std::setw(7) << "user"
              << std::setw(6) << "mem" << "\n";
    std::ostringstream js;
    js << "{\n  \"benchmark\": \"reshard\", \"ranks\": " << n << ", \"dtype\": \"" << dax::to_string(dax::dtype_v<T>)
       << "\", \"shape\": \"" << dax::to_string(shape) << "\", \"mib\": " << bytes / (1 << 20)
       << ", \"iters\": " << iters << ", \"huge_pages\": " << (dax::detail::cpu::huge_pages_enabled() ? "true" : "false")
       << ",\n  \"rows\": [\n";
    for (size_t i = 0; i < table.size(); ++i) {
      const Row& r = table[i];
      const double algbw = r.bytes / r.dax_s / 1e9, busbw = algbw * r.bus_factor;
      const double raw_bus = r.bytes / r.raw_s / 1e9 * r.bus_factor;
      std::cout << std::left << std::setw(26) << r.name << std::setw(16) << r.collective << std::right
                << std::setw(12) << int64_t(r.bytes) << std::fixed << std::setprecision(1) << std::setw(11)
                << r.dax_s * 1e6 << std::setprecision(2) << std::setw(9) << algbw << std::setw(9) << busbw
                << std::setprecision(1) << std::setw(11) << r.raw_s * 1e6 << std::setprecision(2)
                << std::setw(9) << raw_bus << std::setw(8) << r.ratio << std::setprecision(1) << std::setw(11)
                << r.user_s * 1e6 << std::setprecision(2) << std::setw(7) << r.user_ratio << std::setw(6) << r.mem
                << "\n";
      js << "    {\"transition\": \"" << r.name << "\", \"collective\": \"" << r.collective
         << "\", \"bytes\": " << int64_t(r.bytes) << ", \"dax_us\": " << r.dax_s * 1e6
         << ", \"algbw_GBps\": " << algbw << ", \"busbw_GBps\": " << busbw << ", \"mpi_us\": " << r.raw_s * 1e6
         << ", \"ratio\": " << r.ratio << ", \"user_mpi_us\": " << r.user_s * 1e6
         << ", \"user_ratio\": " << r.user_ratio << ", \"peak_extra_over_output\": " << r.mem << "}"
         << (i + 1 < table.size() ? "," : "") << "\n";
    }
    js << "  ]\n}\n";
    std::ofstream(json) << js.str();
    std::cout << "# algbw/busbw in GB/s; ratio = mpi / dax time, MPI on dax-allocated buffers; user = the same on\n"
              << "# std::vector buffers; both medians of back-to-back ratios; mem = peak extra dax memory / output\n"
              << "# piece; JSON in " << json << "\n";
  }
}

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  int64_t mib = 64;
  int iters = 10;
  std::string json = "reshard_bench.json", dtype = "float32";
  dax::Shape shape;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mib") mib = std::stoll(argv[i + 1]);
    else if (flag == "--iters") iters = std::stoi(argv[i + 1]);
    else if (flag == "--json") json = argv[i + 1];
    else if (flag == "--dtype") dtype = argv[i + 1];
    else if (flag == "--shape") {  // RxC
      const std::string v = argv[i + 1];
      const size_t x = v.find('x');
      shape = {std::stoll(v.substr(0, x)), std::stoll(v.substr(x + 1))};
    }
  }
  if (shape.empty()) shape = dax::bench::square_float_shape(mib);
  if (dtype == "float64") run<double>(rt, shape, iters, json);
  else run<float>(rt, shape, iters, json);
  return 0;
}
