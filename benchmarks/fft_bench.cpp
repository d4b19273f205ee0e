// dax::fft against FFTW's MPI interface (Debian's libfftw3-mpi) on the same shapes in the same run
// (issue 45): complex double, slabs split over every rank along the first axis, forward transforms
// of all axes. Two result layouts each: the input's (FFTW-MPI's default; dax's Output::like_input)
// and the transposed one (FFTW_MPI_TRANSPOSED_OUT; dax's Output::transposed: one all-to-all fewer).
// Both plan with FFTW_MEASURE before timing (dax's default for pieces no other device holds); FFTW-MPI transforms in place, dax into a new array.
// Each round times every contender once (slowest rank), the order flipping every round; the median
// over rounds is reported, and the ratio FFTW-MPI time / dax time (>= 1: dax as fast or faster).
// The results are checked against each other before timing.
//
//   mpirun -np 2 ./fft_bench [rounds=5] [--small] [--estimate] [--json FILE]
#include <dax/dax.hpp>
#include <dax/fft.hpp>

#include <fftw3-mpi.h>

#include <algorithm>
#include <complex>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace {

using Z = std::complex<double>;

struct Result {
  std::string shape, layout;
  double fftw_s, dax_s;
};

/// One shape: FFTW-MPI (in place, its local slab) and dax (a DistArray split the same way).
std::vector<Result> run_shape(const std::vector<ptrdiff_t>& dims, int rounds) {
  dax::Runtime& rt = dax::Runtime::current();
  const int rank = rt.rank(), n = rt.size();
  const int rank_count = int(dims.size());
  ptrdiff_t local_n0 = 0, local_0_start = 0, local_n1 = 0, local_1_start = 0;
  const ptrdiff_t alloc = fftw_mpi_local_size_many_transposed(rank_count, dims.data(), 1, FFTW_MPI_DEFAULT_BLOCK,
                                                              FFTW_MPI_DEFAULT_BLOCK, MPI_COMM_WORLD, &local_n0,
                                                              &local_0_start, &local_n1, &local_1_start);
  ptrdiff_t inner = 1;
  for (size_t d = 1; d < dims.size(); ++d) inner *= dims[d];
  dax::Shape shape(dims.begin(), dims.end());
  // dax's ceil chunks and FFTW's default blocks agree when n divides the first two lengths.
  if (dims[0] % n != 0 || dims[1] % n != 0 || local_n0 != dims[0] / n) {
    if (rank == 0) std::cout << "# skipped " << dax::to_string(shape) << ": " << n << " ranks do not divide it evenly\n";
    return {};
  }
  std::vector<Z> local(static_cast<size_t>(local_n0 * inner));
  std::mt19937 rng(7 + rank);
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto& z : local) z = Z(u(rng), u(rng));

  fftw_complex* data = fftw_alloc_complex(alloc);
  const auto fill = [&] { std::memcpy(data, local.data(), local.size() * sizeof(Z)); };
  fftw_plan plain = fftw_mpi_plan_dft(rank_count, dims.data(), data, data, MPI_COMM_WORLD, FFTW_FORWARD, FFTW_MEASURE);
  fftw_plan transposed = fftw_mpi_plan_dft(rank_count, dims.data(), data, data, MPI_COMM_WORLD, FFTW_FORWARD,
                                           FFTW_MEASURE | FFTW_MPI_TRANSPOSED_OUT);

  const dax::Mesh mesh(dax::Shape{n}, {"x"});
  const auto x = dax::from_local(local, shape, dax::NamedSharding(mesh, dax::P("x")));
  // Plans made and buffers pooled before timing, and the two agree.
  const auto y = dax::fft::fftn(x);
  (void)dax::fft::fftn(x, {}, dax::fft::Norm::backward, dax::fft::Output::transposed);
  fill();
  fftw_execute(plain);
  double err = 0, scale = 0;
  const auto got = y.local_data();
  for (size_t i = 0; i < local.size(); ++i) {
    const Z want(data[i][0], data[i][1]);
    err = std::max(err, std::abs(got[i] - want));
    scale = std::max(scale, std::abs(want));
  }
  err = dax::bench::max_over_ranks(err / scale);
  if (rank == 0) std::cout << "# " << dax::to_string(shape) << ": dax and FFTW-MPI differ by " << err << " (relative)\n";
  if (err > 1e-12) throw dax::Error("fft_bench: dax's transform differs from FFTW-MPI's");

  std::vector<double> fftw_plain, fftw_t, dax_plain, dax_t;
  for (int r = 0; r < rounds; ++r) {
    const auto time_fftw = [&](fftw_plan p, std::vector<double>& out) {
      fill();
      out.push_back(dax::bench::slowest_rank_seconds([&] { fftw_execute(p); }));
    };
    const auto time_dax = [&](dax::fft::Output o, std::vector<double>& out) {
      out.push_back(dax::bench::slowest_rank_seconds([&] { (void)dax::fft::fftn(x, {}, dax::fft::Norm::backward, o); }));
    };
    if (r % 2 == 0) {
      time_fftw(plain, fftw_plain);
      time_dax(dax::fft::Output::like_input, dax_plain);
      time_fftw(transposed, fftw_t);
      time_dax(dax::fft::Output::transposed, dax_t);
    } else {
      time_dax(dax::fft::Output::transposed, dax_t);
      time_fftw(transposed, fftw_t);
      time_dax(dax::fft::Output::like_input, dax_plain);
      time_fftw(plain, fftw_plain);
    }
  }
  // Where dax's time goes: the local transforms of each stage and the all-to-all between them.
  {
    const dax::NamedSharding moved(mesh, dax::P(dax::none, "x"));
    const auto xt = dax::reshard(x, moved);
    std::vector<int> rest;
    for (int d = 1; d < rank_count; ++d) rest.push_back(d);
    (void)dax::fft::fftn(x, rest);
    (void)dax::fft::fftn(xt, {0});
    std::vector<double> local_a, local_b, all_to_all;
    for (int r = 0; r < rounds; ++r) {
      local_a.push_back(dax::bench::slowest_rank_seconds([&] { (void)dax::fft::fftn(x, rest); }));
      all_to_all.push_back(dax::bench::slowest_rank_seconds([&] { (void)dax::reshard(x, moved); }));
      local_b.push_back(dax::bench::slowest_rank_seconds([&] { (void)dax::fft::fftn(xt, {0}); }));
    }
    if (rank == 0)
      std::cout << "# " << dax::to_string(shape) << " dax's parts (median s): axes 1.. whole " << dax::bench::median(local_a)
                << ", all-to-all " << dax::bench::median(all_to_all) << ", axis 0 after it " << dax::bench::median(local_b)
                << "\n";
  }
  fftw_destroy_plan(plain);
  fftw_destroy_plan(transposed);
  fftw_free(data);
  using dax::bench::median;
  return {{dax::to_string(shape), "like input", median(fftw_plain), median(dax_plain)},
          {dax::to_string(shape), "transposed", median(fftw_t), median(dax_t)}};
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  fftw_mpi_init();
  int rounds = 5;
  bool small = false, estimate = false;
  std::string json_path = "fft_bench.json";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
    else if (std::strcmp(argv[i], "--small") == 0) small = true;
    else if (std::strcmp(argv[i], "--estimate") == 0) estimate = true;
    else rounds = std::atoi(argv[i]);
  }
  // dax's default (automatic) measures these unreplicated slabs, as FFTW-MPI plans here; --estimate
  // shows FFTW_ESTIMATE's plans (FFTW-MPI measures either way).
  if (estimate) dax::fft::set_planning(dax::fft::Planning::estimate);
  std::vector<Result> all;
  const std::vector<std::vector<ptrdiff_t>> shapes =
      small ? std::vector<std::vector<ptrdiff_t>>{{64, 64, 64}, {512, 512}}
            : std::vector<std::vector<ptrdiff_t>>{{256, 256, 256}, {8192, 8192}};
  for (const auto& dims : shapes)
    for (const auto& r : run_shape(dims, rounds)) all.push_back(r);
  if (rt.rank() == 0) {
    std::cout << std::left << std::setw(20) << "shape" << std::setw(12) << "result" << std::setw(14) << "FFTW-MPI s"
              << std::setw(12) << "dax s" << "FFTW-MPI / dax\n";
    std::ofstream json(json_path);
    json << "{\"benchmark\": \"fft_bench\", \"ranks\": " << rt.size() << ", \"rounds\": " << rounds << ", \"results\": [";
    for (size_t i = 0; i < all.size(); ++i) {
      const auto& r = all[i];
      std::cout << std::setw(20) << r.shape << std::setw(12) << r.layout << std::setw(14) << std::setprecision(4)
                << r.fftw_s << std::setw(12) << r.dax_s << std::setprecision(3) << r.fftw_s / r.dax_s << "x\n";
      json << (i ? ", " : "") << "{\"shape\": \"" << r.shape << "\", \"result\": \"" << r.layout
           << "\", \"fftw_mpi_s\": " << r.fftw_s << ", \"dax_s\": " << r.dax_s << ", \"ratio\": " << r.fftw_s / r.dax_s
           << "}";
    }
    json << "]}\n";
  }
  fftw_mpi_cleanup();
  return 0;
}
