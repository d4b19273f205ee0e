// sharding_strategies: three hand-picked ways to compute C = A @ B on a 1-d mesh 'x', timed, and
// the way dax's matmul rule picks by itself. A and B start split by rows, P('x', None), and every
// strategy ends with C split by rows:
//   replicated:  gather A and B; every device computes all of C, then keeps its rows
//   row-sharded: gather B; each device multiplies its rows of A by B
//   col-sharded: gather A, split B by columns (all-to-all); each device computes its columns of C,
//                and an all-to-all turns them into rows
//   automatic:   dax::matmul(A, B, rows): the rule costs every split and moves the fewest bytes
// Times are the median of a few repeats between barriers. The example checks that all strategies
// give the same C, and checks C against loops on the host at the smallest size.
// Run with `mpirun -np N` (any N) or as one process.
#include <dax/dax.hpp>
#include <mpi.h>

#include <algorithm>
#include <functional>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using Array = dax::DistArray<float>;

// Median wall time of `repeats` runs of f (after one warm-up run), between barriers; the last result.
double median_seconds(const std::function<Array()>& f, int repeats, Array& result) {
  result = f();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    result = f();
    MPI_Barrier(MPI_COMM_WORLD);
    times.push_back(MPI_Wtime() - t0);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The line of explain_matmul marked with '*': the candidate the rule chose.
std::string chosen_line(const std::string& explain) {
  std::istringstream lines(explain);
  std::string line;
  while (std::getline(lines, line))
    if (line.rfind("* ", 0) == 0) return line.substr(2);
  return "?";
}

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  dax::Mesh mesh({rt.size()}, {"x"});
  const dax::NamedSharding rows(mesh, dax::P("x", dax::none)), cols(mesh, dax::P(dax::none, "x"));
  const dax::NamedSharding replicated(mesh, dax::P());

  const std::vector<std::pair<std::string, std::function<Array(const Array&, const Array&)>>> strategies{
      {"replicated", [&](const Array& a, const Array& b) {
         // (The output sharding must be given: by default the rule would split this product by rows,
         // which costs nothing to move and is a quarter of the work on 4 devices.)
         const Array full = dax::matmul(dax::reshard(a, replicated), dax::reshard(b, replicated), replicated);
         return dax::reshard(full, rows);
       }},
      {"row-sharded", [&](const Array& a, const Array& b) { return dax::matmul(a, dax::reshard(b, replicated)); }},
      {"col-sharded", [&](const Array& a, const Array& b) {
         return dax::reshard(dax::matmul(dax::reshard(a, replicated), dax::reshard(b, cols)), rows);
       }},
      {"automatic", [&](const Array& a, const Array& b) { return dax::matmul(a, b, rows); }},
  };

  if (rt.rank() == 0) {
    std::cout << "C = A @ B, A and B split by rows on " << mesh << "; milliseconds, median of 3\n"
              << "     n";
    for (const auto& s : strategies) std::cout << std::setw(13) << s.first;
    std::cout << "   fastest\n";
  }
  bool ok = true;
  std::vector<std::string> choices;
  for (const int64_t n : {256, 512, 1024}) {
    // Small integers: every sum is exact in float, so the strategies must agree bit for bit.
    std::mt19937 gen(static_cast<unsigned>(n));
    std::uniform_int_distribution<int> small(-2, 2);
    std::vector<float> a_host(n * n), b_host(n * n);
    for (auto* v : {&a_host, &b_host})
      for (float& e : *v) e = static_cast<float>(small(gen));
    const Array a = dax::device_put(a_host, {n, n}, rows), b = dax::device_put(b_host, {n, n}, rows);

    std::vector<double> ms;
    std::vector<Array> results;
    for (const auto& strategy : strategies) {
      Array c = a;
      ms.push_back(1e3 * median_seconds([&] { return strategy.second(a, b); }, 3, c));
      results.push_back(c);
    }
    // Every result is split by rows the same way, so each device compares its own pieces. (Layouts
    // are compared by their pieces: on a 1-device mesh the matmul rule writes P() for P('x').)
    for (const Array& c : results) {
      const auto mine = c.local_to_host(), first = results[0].local_to_host();
      ok = ok && c.sharding().devices_indices_map(c.shape()) == rows.devices_indices_map(c.shape()) &&
           std::equal(mine.begin(), mine.end(), first.begin(), first.end());
    }
    if (n == 256) {  // this device's rows of C against loops on the host
      const dax::Slice r = results[0].local_index()[0];
      const auto piece = results[0].local_to_host();
      for (int64_t i = r.start; i < r.stop; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float s = 0;
          for (int64_t k = 0; k < n; ++k) s += a_host[i * n + k] * b_host[k * n + j];
          ok = ok && piece[(i - r.start) * n + j] == s;
        }
    }
    choices.push_back(chosen_line(dax::explain_matmul(a, b, rows)));
    if (rt.rank() == 0) {
      std::cout << std::setw(6) << n << std::fixed << std::setprecision(2);
      for (double t : ms) std::cout << std::setw(13) << t;
      std::cout << "   " << strategies[std::min_element(ms.begin(), ms.end()) - ms.begin()].first << "\n";
    }
  }
  if (rt.rank() == 0) {
    std::cout << "the automatic rule's choice (dax::explain_matmul, '->' gives each mesh axis's role):\n";
    for (size_t i = 0; i < choices.size(); ++i) std::cout << "  n=" << (256 << i) << ": " << choices[i] << "\n";
    // 'x->M' splits A's rows over 'x': the row-sharded strategy, the same steps.
    if (choices[0].rfind("x->M ", 0) == 0) std::cout << "  (x->M is the row-sharded strategy)\n";
    if (choices[0].rfind("| ", 0) == 0) std::cout << "  (one device: no mesh axis to split)\n";
  }

  int mine = ok, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (!all) {
    if (rt.rank() == 0) std::cerr << "sharding_strategies: FAILED (the strategies' results differ)\n";
    return 1;
  }
  if (rt.rank() == 0)
    std::cout << "verified: 4 strategies give the same C at n = 256, 512, 1024 on " << mesh.size()
              << " device(s), equal to host loops at n = 256\n";
  return 0;
}
