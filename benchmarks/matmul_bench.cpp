// Sharded matmul throughput: GFLOP/s of 1-d (row-sharded A, replicated B) and 2-d (P('x','y') @
// P('y', None), one reduction) matmuls against the local Eigen GEMM on the same per-rank shape,
// measured in the same run: parallel efficiency = dax time / (per-rank GEMM time) inverted.
// Usage: mpirun -np N matmul_bench [size=1024] [iters=5]
#include <dax/dax.hpp>

#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>

namespace {

template <class F>
double seconds(F&& f, int iters) {
  f();  // warm-up
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    f();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    best = std::min(best, t);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const int64_t s = argc > 1 ? std::atoll(argv[1]) : 1024;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 5;
  const int n = rt.size();
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  struct Row { std::string name; double dax_s, local_s, flops; };
  std::vector<Row> rows;

  {  // 1-d: A (s*n, s) rows split over x, B (s, s) replicated: no communication.
    const dax::Mesh mesh({n}, {"x"});
    const auto a = dax::full<float>({s * n, s}, 0.5f, dax::NamedSharding(mesh, dax::P("x")));
    const auto b = dax::full<float>({s, s}, 0.5f, dax::NamedSharding(mesh, dax::P()));
    const Mat la = Mat::Random(s, s), lb = Mat::Random(s, s);
    Mat lc(s, s);
    const double d = seconds([&] { dax::matmul(a, b); }, iters);
    const double l = seconds([&] { lc.noalias() = la * lb; }, iters);
    rows.push_back({"1-d P('x') @ P()", d, l, 2.0 * s * n * s * s});
  }
  if (n % 2 == 0) {  // 2-d: (x, y) = (n/2, 2); A P('x','y') @ B P('y', None): local GEMM + all-reduce over y.
    const dax::Mesh mesh({n / 2, 2}, {"x", "y"});
    const int64_t m = s * n / 2, k = 2 * s;
    const auto a = dax::full<float>({m, k}, 0.5f, dax::NamedSharding(mesh, dax::P("x", "y")));
    const auto b = dax::full<float>({k, s}, 0.5f, dax::NamedSharding(mesh, dax::P("y", dax::none)));
    const Mat la = Mat::Random(s, s), lb = Mat::Random(s, s);
    Mat lc(s, s);
    const double d = seconds([&] { dax::matmul(a, b); }, iters);
    const double l = seconds([&] { lc.noalias() = la * lb; }, iters);
    rows.push_back({"2-d P('x','y') @ P('y')", d, l, 2.0 * m * k * s});
  }
  if (rt.rank() == 0) {
    std::cout << "# sharded matmul, float32, per-rank GEMM " << s << "^3, " << n << " rank(s), best of " << iters
              << "\n# case                       dax GFLOP/s  local GFLOP/s  efficiency (local time / dax time)\n";
    std::ofstream json("matmul_bench.json");
    json << "{\"benchmark\": \"matmul\", \"ranks\": " << n << ", \"size\": " << s << ", \"rows\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const double dax_gf = r.flops / r.dax_s / 1e9, local_gf = 2.0 * s * s * s / r.local_s / 1e9 * n;
      std::cout << std::left << std::setw(28) << r.name << std::right << std::fixed << std::setprecision(2)
                << std::setw(12) << dax_gf << std::setw(15) << local_gf << std::setw(12) << r.local_s / r.dax_s
                << "\n";
      json << (i ? ", " : "") << "{\"case\": \"" << r.name << "\", \"dax_gflops\": " << dax_gf
           << ", \"local_gflops_all_ranks\": " << local_gf << ", \"efficiency\": " << r.local_s / r.dax_s << "}";
    }
    json << "]}\n";
  }
  return 0;
}
