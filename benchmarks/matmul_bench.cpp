// Sharded matmul against the BLAS ceiling, every layout (issue 20 part 2).
//
// A (N, N) @ B (N, N) for each way of laying the operands out over a 1-d mesh 'x' of all ranks
// (and a 2-d mesh (n/2, 2) when n >= 4 is even): rows, columns, split-K with the result
// replicated or split, one operand to gather, and the 2-d product. The ceiling is the raw BLAS
// GEMM doing the same arithmetic with nothing else: every rank at once multiplies its share
// (N/n, N) @ (N, N) with one BLAS thread, the way dax runs (through Eigen's product, which is one
// dgemm/sgemm call with beta = 0). Each round times the ceiling and the dax matmul back to
// back (the order flipping every round) on the slowest rank; the ratio ceiling time / dax time is
// taken per round and its median reported (goal >= 0.9 at 2 ranks, N = 2048, double).
//
// bfloat16 runs the same cases against float32's ceiling: dax converts tiles of the operands to
// float for the product (docs/performance.md), so the ratio is what 16-bit storage costs here.
//
//   mpirun -np 2 ./matmul_bench [N=2048] [rounds=5] [double|float|bfloat16] [--json FILE]
#include <dax/dax.hpp>

#include <Eigen/Dense>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "bench_common.hpp"

namespace {

struct Case {
  std::string name;
  dax::Mesh mesh;
  dax::PartitionSpec a, b;
  std::optional<dax::PartitionSpec> out;  // the rule picks when empty
};

struct Row {
  std::string name, result;
  double dax_gflops, ceiling_gflops, ratio_median, ratio_min, ratio_max;
  int64_t bytes;
};

template <class T>
std::vector<Row> run(int64_t n_size, int rounds) {
  auto& rt = dax::Runtime::current();
  const int n = rt.size();
  const dax::Mesh line({n}, {"x"});
  using P = dax::PartitionSpec;
  const auto none = dax::none;
  std::vector<Case> cases = {
      {"rows: P('x') @ P()", line, P("x", none), P(), std::nullopt},
      {"columns: P() @ P(None,'x')", line, P(), P(none, "x"), std::nullopt},
      {"split-K -> P('x') (reduce-scatter)", line, P(none, "x"), P("x", none), P("x", none)},
      {"split-K -> P() (all-reduce)", line, P(none, "x"), P("x", none), P()},
      {"gather: P('x') @ P('x')", line, P("x", none), P("x", none), std::nullopt},
      {"gather: P(None,'x') @ P(None,'x')", line, P(none, "x"), P(none, "x"), std::nullopt},
  };
  if (n >= 4 && n % 2 == 0) {
    const dax::Mesh grid({n / 2, 2}, {"x", "y"});
    cases.push_back({"2-d: P('x','y') @ P('y')", grid, P("x", "y"), P("y", none), std::nullopt});
    cases.push_back({"2-d: P('x') @ P(None,'y')", grid, P("x", none), P(none, "y"), std::nullopt});
  }

  // The ceiling's operands: this rank's share of the arithmetic, (N/n, N) @ (N, N); for a 16-bit
  // type, in float32 (the figure: bfloat16 against float32 on the same machine).
  using C = std::conditional_t<dax::detail::is_float16_v<T>, float, T>;
  using Mat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t share = (n_size + n - 1) / n;
  const Mat la = Mat::Random(share, n_size), lb = Mat::Random(n_size, n_size);
  Mat lc(share, n_size);
  // The raw call dax's local product makes (sgemm/dgemm, beta = 0), not Eigen's product, which
  // clears the output before a beta = 1 GEMM.
  auto ceiling = [&] { dax::detail::cpu::gemm(la.data(), false, lb.data(), false, lc.data(), share, n_size, n_size); };

  const double flops = 2.0 * double(n_size) * double(n_size) * double(n_size);
  const auto keys = dax::random::split(dax::random::key(1), 2);
  std::vector<Row> rows;
  for (const Case& c : cases) {
    const auto a = dax::random::normal<T>(keys[0], {n_size, n_size}, dax::NamedSharding(c.mesh, c.a));
    const auto b = dax::random::normal<T>(keys[1], {n_size, n_size}, dax::NamedSharding(c.mesh, c.b));
    std::optional<dax::NamedSharding> out;
    if (c.out) out = dax::NamedSharding(c.mesh, *c.out);
    dax::DistArray<T> result = dax::matmul(a, b, out);  // warm-up: rule, plans and buffers cached
    ceiling();
    dax::comm_stats().reset();
    result = dax::matmul(a, b, out);
    const int64_t bytes = dax::comm_stats().total_bytes();
    std::vector<double> ratios, dax_s, ceil_s;
    for (int r = 0; r < rounds; ++r) {
      double d = 0, l = 0;
      auto time_dax = [&] { d = dax::bench::slowest_rank_seconds([&] { result = dax::matmul(a, b, out); }); };
      auto time_ceiling = [&] { l = dax::bench::slowest_rank_seconds(ceiling); };
      if (r % 2 == 0) time_ceiling(), time_dax();
      else time_dax(), time_ceiling();
      ratios.push_back(l / d);
      dax_s.push_back(d);
      ceil_s.push_back(l);
    }
    std::ostringstream chosen;
    chosen << result.sharding().spec();
    rows.push_back({c.name, chosen.str(), flops / dax::bench::median(dax_s) / 1e9,
                    flops / dax::bench::median(ceil_s) / 1e9, dax::bench::median(ratios),
                    *std::min_element(ratios.begin(), ratios.end()), *std::max_element(ratios.begin(), ratios.end()),
                    bytes});
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  std::vector<std::string> args;
  std::string json_path = "matmul_bench.json";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
    else args.emplace_back(argv[i]);
  }
  const int64_t n_size = args.size() > 0 ? std::atoll(args[0].c_str()) : 2048;
  const int rounds = args.size() > 1 ? std::atoi(args[1].c_str()) : 5;
  const std::string type = args.size() > 2 ? args[2] : "double";
  DAX_CHECK(type == "double" || type == "float" || type == "bfloat16",
            "matmul_bench: element type must be double, float or bfloat16, got ", type);
  const std::vector<Row> rows = type == "double"  ? run<double>(n_size, rounds)
                                : type == "float" ? run<float>(n_size, rounds)
                                                  : run<dax::bfloat16>(n_size, rounds);

  if (rt.rank() != 0) return 0;
  const dax::BlasInfo blas = dax::blas_info();
  std::cout << "# sharded matmul (" << n_size << ")^3, " << type << ", " << rt.size() << " rank(s), " << blas.vendor
            << " with " << blas.threads << " thread(s) per rank; median of " << rounds << " rounds\n"
            << "# ceiling: every rank's BLAS GEMM on its share (N/n, N) @ (N, N) at once; ratio = ceiling time / "
               "dax time, per round\n";
  std::cout << std::left << std::setw(38) << "# layout" << std::setw(18) << "result" << std::right << std::setw(10)
            << "dax GF/s" << std::setw(12) << "ceil GF/s" << std::setw(9) << "ratio" << std::setw(16) << "(min-max)"
            << std::setw(14) << "bytes/rank" << "\n";
  std::ofstream json(json_path);
  json << "{\"benchmark\": \"matmul\", \"ranks\": " << rt.size() << ", \"size\": " << n_size << ", \"type\": \""
       << type << "\", \"blas\": \"" << blas.vendor << "\", \"blas_threads\": " << blas.threads
       << ", \"rounds\": " << rounds << ", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::ostringstream range;
    range << std::fixed << std::setprecision(3) << "(" << r.ratio_min << "-" << r.ratio_max << ")";
    std::cout << std::left << std::setw(38) << r.name << std::setw(18) << r.result << std::right << std::fixed
              << std::setprecision(1) << std::setw(10) << r.dax_gflops << std::setw(12) << r.ceiling_gflops
              << std::setprecision(3) << std::setw(9) << r.ratio_median << std::setw(16) << range.str()
              << std::setw(14) << r.bytes << "\n";
    json << (i ? ", " : "") << "{\"case\": \"" << r.name << "\", \"result\": \"" << r.result
         << "\", \"dax_gflops\": " << r.dax_gflops << ", \"ceiling_gflops\": " << r.ceiling_gflops
         << ", \"ratio_median\": " << r.ratio_median << ", \"ratio_min\": " << r.ratio_min
         << ", \"ratio_max\": " << r.ratio_max << ", \"bytes_per_rank\": " << r.bytes << "}";
  }
  json << "]}\n";
  return 0;
}
