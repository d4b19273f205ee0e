// Host overhead per eager op: add, matmul and sum on 8-element arrays on a 1-device mesh, minus
// the same local computation written by hand (Eigen / a loop), measured in the same run.
// DTensor spends 16-90 us per op; the goal here is <= 2 us.
#include <dax/dax.hpp>

#include "bench_common.hpp"

#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const int iters = argc > 1 ? std::atoi(argv[1]) : 200000;
  const dax::Mesh mesh({1}, {"x"});
  const dax::NamedSharding rep(mesh, dax::P());
  const auto a = dax::arange<float>({8}, rep), b = dax::ones<float>({8}, rep);
  const auto m = dax::arange<float>({2, 4}, rep), n = dax::ones<float>({4, 2}, rep);
  const Eigen::VectorXf ea = Eigen::VectorXf::LinSpaced(8, 0, 7), eb = Eigen::VectorXf::Ones(8);
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Mat em = Mat::Random(2, 4), en = Mat::Random(4, 2);
  volatile float sink = 0;

  struct Row { const char* op; double dax_us, local_us; };
  std::vector<Row> rows;
  rows.push_back({"add", dax::bench::per_call_us([&] { auto c = a + b; sink = sink + c.local_data()[0]; }, iters),
                  dax::bench::per_call_us([&] { Eigen::VectorXf c = ea + eb; sink = sink + c[0]; }, iters)});
  rows.push_back({"matmul", dax::bench::per_call_us([&] { auto c = dax::matmul(m, n); sink = sink + c.local_data()[0]; }, iters),
                  dax::bench::per_call_us([&] { Mat c = em * en; sink = sink + c(0, 0); }, iters)});
  rows.push_back({"sum", dax::bench::per_call_us([&] { auto c = dax::sum(a); sink = sink + c.local_data()[0]; }, iters),
                  dax::bench::per_call_us([&] { float c = ea.sum(); sink = sink + c; }, iters)});

  std::cout << "# dispatch overhead, 8-element arrays, 1-device mesh, " << iters << " calls each\n"
            << "# op        dax(us)  local(us)  overhead(us)\n";
  std::ofstream json("dispatch_bench.json");
  json << "{\"benchmark\": \"dispatch\", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::cout << std::left << std::setw(10) << r.op << std::right << std::fixed << std::setprecision(3)
              << std::setw(9) << r.dax_us << std::setw(11) << r.local_us << std::setw(14) << r.dax_us - r.local_us
              << "\n";
    json << (i ? ", " : "") << "{\"op\": \"" << r.op << "\", \"dax_us\": " << r.dax_us << ", \"local_us\": "
         << r.local_us << ", \"overhead_us\": " << r.dax_us - r.local_us << "}";
  }
  json << "]}\n";
  return 0;
}
