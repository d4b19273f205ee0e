// Reading only one's piece, measured (issue 23): writes a safetensors file of one float32 matrix
// [vocabulary, hidden] (2 GiB by default) with dax::save_safetensors, loads it with the vocabulary
// split over the ranks and then with the hidden dimension split, and reports the bytes each rank
// read from the kernel during each load (`rchar` of /proc/self/io: every read, cached or not) next
// to the file's size. Each rank should read about 1/ranks of it, never the whole file. The loaded
// pieces are checked against the values written; the file is deleted at the end.
// Usage: mpirun -np 4 safetensors_bench [--mib 2048] [--dir /tmp] [--json safetensors_bench.json]
#include <dax/dax.hpp>

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

int64_t rchar() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return -1;
}

float value_at(int64_t flat) { return static_cast<float>(flat % 1000003) * 0.5f; }

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime runtime(argc, argv);
  int64_t mib = 2048;
  std::string dir = "/tmp", json;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mib") mib = std::stoll(argv[i + 1]);
    else if (a == "--dir") dir = argv[i + 1];
    else if (a == "--json") json = argv[i + 1];
  }
  const int n = runtime.size(), me = runtime.rank();
  const int64_t hidden = 4096;
  const int64_t vocab = std::max<int64_t>(1, (mib << 20) / (hidden * 4));
  const dax::Shape shape{vocab, hidden};
  const dax::Mesh line({n}, {"x"});
  const std::string path = dir + "/dax_safetensors_bench_" + std::to_string(::getpid()) + ".safetensors";
  std::string shared = path;  // rank 0's name, for all
  {
    int64_t len = static_cast<int64_t>(shared.size());
    MPI_Bcast(&len, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    shared.resize(len);
    MPI_Bcast(shared.data(), static_cast<int>(len), MPI_CHAR, 0, MPI_COMM_WORLD);
  }

  auto seconds_max = [](double s) {
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return s;
  };
  using clock = std::chrono::steady_clock;
  double write_s = 0;
  {
    const auto x = dax::make_array_from_callback<float>(
        shape, dax::NamedSharding(line, dax::P("x")), [&](const std::vector<dax::Slice>& index) {
          std::vector<float> v(static_cast<size_t>(index[0].size() * hidden));
          for (int64_t r = 0; r < index[0].size(); ++r)
            for (int64_t c = 0; c < hidden; ++c) v[r * hidden + c] = value_at((index[0].start + r) * hidden + c);
          return v;
        });
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = clock::now();
    dax::save_safetensors(shared, {{"embed", x}});
    write_s = seconds_max(std::chrono::duration<double>(clock::now() - t0).count());
  }
  const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(shared));

  struct Case {
    const char* split;
    dax::PartitionSpec spec;
  };
  const std::vector<Case> cases{{"vocabulary", dax::P("x", dax::none)}, {"hidden", dax::P(dax::none, "x")}};
  std::ostringstream out_json;
  out_json << "{\"ranks\": " << n << ", \"file_bytes\": " << file_bytes << ", \"write_s\": " << write_s
           << ", \"loads\": [";
  if (me == 0)
    std::cout << "safetensors file: " << shape[0] << " x " << shape[1] << " float32, " << file_bytes
              << " bytes; written by " << n << " ranks in " << std::fixed << std::setprecision(3) << write_s
              << " s\n";
  bool all_right = true;
  for (size_t k = 0; k < cases.size(); ++k) {
    const dax::NamedSharding sharding(line, cases[k].spec);
    MPI_Barrier(MPI_COMM_WORLD);
    const int64_t before = rchar();
    const auto t0 = clock::now();
    const auto y = dax::load<float>(shared, "embed", sharding);
    const double s = seconds_max(std::chrono::duration<double>(clock::now() - t0).count());
    const int64_t read = rchar() - before;
    // The piece holds what was written.
    const auto piece = y.local_to_host();
    const dax::Box box = y.local_index();
    int64_t i = 0, wrong = 0;
    for (int64_t r = box[0].start; r < box[0].stop; ++r)
      for (int64_t c = box[1].start; c < box[1].stop; ++c) wrong += piece[i++] != value_at(r * hidden + c);
    all_right = all_right && wrong == 0;
    std::vector<int64_t> reads(n), pieces(n);
    const int64_t piece_bytes = static_cast<int64_t>(piece.size()) * 4;
    MPI_Gather(&read, 1, MPI_INT64_T, reads.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_Gather(&piece_bytes, 1, MPI_INT64_T, pieces.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (me == 0) {
      std::cout << "\nload with the " << cases[k].split << " dimension split (" << dax::to_string(sharding.spec())
                << "): " << std::setprecision(3) << s << " s (slowest rank), " << std::setprecision(2)
                << file_bytes / s / 1e9 << " GB/s\n"
                << "  rank   rchar bytes   of the file   piece bytes\n";
      for (int r = 0; r < n; ++r)
        std::cout << "  " << std::setw(4) << r << "  " << std::setw(12) << reads[r] << "  " << std::setw(11)
                  << std::setprecision(4) << static_cast<double>(reads[r]) / file_bytes << "  " << std::setw(12)
                  << pieces[r] << "\n";
      out_json << (k ? ", " : "") << "{\"split\": \"" << cases[k].split << "\", \"seconds\": " << s
               << ", \"rchar\": [";
      for (int r = 0; r < n; ++r) out_json << (r ? ", " : "") << reads[r];
      out_json << "], \"piece_bytes\": [";
      for (int r = 0; r < n; ++r) out_json << (r ? ", " : "") << pieces[r];
      out_json << "]}";
    }
  }
  out_json << "]}";
  int ok = all_right ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) {
    std::remove(shared.c_str());
    std::cout << (ok ? "\nevery piece holds the values written\n" : "\nWRONG VALUES in a loaded piece\n");
    if (!json.empty()) std::ofstream(json) << out_json.str() << "\n";
  }
  return ok ? 0 : 1;
}
