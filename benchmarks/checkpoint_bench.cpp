// Checkpoint benchmark: dax::save and dax::load of a float32 array sharded over every rank, against
// plain POSIX I/O of the same bytes measured in the same run: one rank writing the gathered array
// to one file (the gather itself not timed), and every rank writing its own piece to its own file
// with pwrite. Every write is made durable (fsync; dax::save syncs too); reads come from the page
// cache. Times are the slowest rank's, median of the iterations; ratio = plain time / dax time.
// Usage: mpirun -np 4 checkpoint_bench [--mib 256] [--iters 3] [--dir DIR] [--json checkpoint_bench.json]
#include <dax/dax.hpp>

#include "bench_common.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "checkpoint_bench: " << what << ": " << std::strerror(errno) << "\n";
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void write_file(const std::string& path, const void* data, size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  check(fd >= 0, "open " + path);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t w = ::pwrite(fd, static_cast<const char*>(data) + done, bytes - done, static_cast<off_t>(done));
    check(w > 0, "pwrite " + path);
    done += static_cast<size_t>(w);
  }
  check(::fsync(fd) == 0, "fsync " + path);
  ::close(fd);
}

void read_file(const std::string& path, void* data, size_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  check(fd >= 0, "open " + path);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t r = ::pread(fd, static_cast<char*>(data) + done, bytes - done, static_cast<off_t>(done));
    check(r > 0, "pread " + path);
    done += static_cast<size_t>(r);
  }
  ::close(fd);
}

struct Row {
  std::string name, baseline;
  double bytes = 0, dax_s = 0, plain_s = 0;
};

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  int64_t mib = 256;
  int iters = 3;
  std::string dir = (std::filesystem::temp_directory_path() / "dax_checkpoint_bench").string();
  std::string json = "checkpoint_bench.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mib") mib = std::stoll(argv[i + 1]);
    else if (flag == "--iters") iters = std::stoi(argv[i + 1]);
    else if (flag == "--dir") dir = argv[i + 1];
    else if (flag == "--json") json = argv[i + 1];
  }
  const int n = rt.size(), rank = rt.rank();
  const dax::Shape shape = dax::bench::square_float_shape(mib);
  const int64_t rows = shape[0], cols = shape[1];
  const double bytes = double(rows) * double(cols) * 4;
  const dax::NamedSharding sharded(dax::Mesh({n}, {"x"}), dax::P("x"));
  const auto x = dax::make_array_from_callback<float>(shape, sharded, [&](const std::vector<dax::Slice>& index) {
    std::vector<float> piece(dax::numel(index));
    dax::for_each_in_box(shape, index, [&](int64_t k, int64_t flat) { piece[k] = float(flat % 1000) * 0.25f; });
    return piece;
  });
  const std::vector<float> gathered = rank == 0 ? x.to_host() : (x.to_host(), std::vector<float>{});
  const auto local = x.local_data();
  std::vector<float> scratch(local.size()), whole(rank == 0 ? gathered.size() : 0);
  if (rank == 0) std::filesystem::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string dax_path = dir + "/dax.npy", one_path = dir + "/plain.bin";
  const std::string own_path = dir + "/piece." + std::to_string(rank) + ".bin";

  // dax and plain calls alternate so drift in the machine (page cache, disk) hits both alike.
  std::vector<double> save_t, load_t, one_w, own_w, own_r, one_r, sum_t;
  bool correct = true;
  for (int i = 0; i < iters + 1; ++i) {  // the first round warms up
    const double s = dax::bench::slowest_rank_seconds([&] { dax::save(dax_path, x); });
    const double w1 = dax::bench::slowest_rank_seconds([&] {
      if (rank == 0) write_file(one_path, gathered.data(), gathered.size() * 4);
    });
    const double wn = dax::bench::slowest_rank_seconds([&] { write_file(own_path, local.data(), local.size() * 4); });
    dax::DistArray<float> y = x;
    const double l = dax::bench::slowest_rank_seconds([&] { y = dax::load<float>(dax_path, sharded); });
    const double rn = dax::bench::slowest_rank_seconds([&] { read_file(own_path, scratch.data(), scratch.size() * 4); });
    const double r1 = dax::bench::slowest_rank_seconds([&] {
      if (rank == 0) read_file(one_path, whole.data(), whole.size() * 4);
    });
    const double c = dax::bench::slowest_rank_seconds([&] {
      volatile uint64_t sink = dax::detail::checkpoint::piece_checksum(local.data(), shape, x.local_index());
      (void)sink;
    });
    correct = correct && std::equal(y.local_data().begin(), y.local_data().end(), local.begin());
    if (i == 0) continue;
    save_t.push_back(s), one_w.push_back(w1), own_w.push_back(wn);
    load_t.push_back(l), own_r.push_back(rn), one_r.push_back(r1), sum_t.push_back(c);
  }
  int all_correct = correct;
  MPI_Allreduce(MPI_IN_PLACE, &all_correct, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);

  const std::vector<Row> table{
      {"save", "one rank writes all", bytes, dax::bench::median(save_t), dax::bench::median(one_w)},
      {"save", "each rank own file", bytes, dax::bench::median(save_t), dax::bench::median(own_w)},
      {"load", "one rank reads all", bytes, dax::bench::median(load_t), dax::bench::median(one_r)},
      {"load", "each rank own file", bytes, dax::bench::median(load_t), dax::bench::median(own_r)},
  };
  const double checksum_s = dax::bench::median(sum_t);
  if (rank == 0) {
    std::cout << "# dax checkpoint benchmark: float32 " << dax::to_string(shape) << " (" << mib << " MiB) "
              << dax::to_string(sharded.spec()) << " over " << n << " rank" << (n == 1 ? "" : "s") << ", median of "
              << iters << " (slowest rank); writes fsync'd, reads from the page cache\n";
    std::cout << std::left << std::setw(6) << "# op" << std::setw(22) << "plain baseline" << std::right
              << std::setw(12) << "size(B)" << std::setw(10) << "dax(ms)" << std::setw(10) << "GB/s"
              << std::setw(11) << "plain(ms)" << std::setw(10) << "GB/s" << std::setw(8) << "ratio" << "\n";
    std::ostringstream js;
    js << "{\n  \"benchmark\": \"checkpoint\", \"ranks\": " << n << ", \"dtype\": \"float32\", \"mib\": " << mib
       << ", \"iters\": " << iters << ", \"verified\": " << (all_correct ? "true" : "false")
       << ", \"checksum_ms\": " << checksum_s * 1e3 << ",\n  \"rows\": [\n";
    for (size_t i = 0; i < table.size(); ++i) {
      const Row& r = table[i];
      const double dax_gbs = r.bytes / r.dax_s / 1e9, plain_gbs = r.bytes / r.plain_s / 1e9;
      const double ratio = r.plain_s / r.dax_s;
      std::cout << std::left << std::setw(6) << r.name << std::setw(22) << r.baseline << std::right << std::setw(12)
                << int64_t(r.bytes) << std::fixed << std::setprecision(1) << std::setw(10) << r.dax_s * 1e3
                << std::setprecision(2) << std::setw(10) << dax_gbs << std::setprecision(1) << std::setw(11)
                << r.plain_s * 1e3 << std::setprecision(2) << std::setw(10) << plain_gbs << std::setw(8) << ratio
                << "\n";
      js << "    {\"op\": \"" << r.name << "\", \"baseline\": \"" << r.baseline << "\", \"bytes\": " << int64_t(r.bytes)
         << ", \"dax_ms\": " << r.dax_s * 1e3 << ", \"dax_GBps\": " << dax_gbs << ", \"plain_ms\": "
         << r.plain_s * 1e3 << ", \"plain_GBps\": " << plain_gbs << ", \"ratio\": " << ratio << "}"
         << (i + 1 < table.size() ? "," : "") << "\n";
    }
    js << "  ]\n}\n";
    std::ofstream(json) << js.str();
    std::cout << "# checksum alone (largest piece): " << std::setprecision(1) << checksum_s * 1e3 << " ms; loads "
              << (all_correct ? "verified" : "WRONG") << "; ratio = plain time / dax time; JSON in " << json << "\n";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::filesystem::remove_all(dir);
  return all_correct ? 0 : 1;
}
