// dax against ScaLAPACK (Debian's libscalapack-openmpi) on the same shapes in the same run (issue 20
// part 4): a distributed GEMM (pdgemm) and a redistribution rows -> columns (pdgemr2d /
// psgemr2d), measured against the raw BLAS GEMM share (the ceiling) and MPI_Alltoall (a reference: dax's
// reshard may beat it).
//
//   GEMM: (N, N) @ (N, N), double, every operand split by rows over the n ranks. dax: P('x') for
//   A, B and C (the rule gathers B). ScaLAPACK: an n x 1 process grid, once with block rows
//   (mb = ceil(N/n), the same layout as dax's) and once block-cyclic with 64 x 64 blocks, its
//   usual setting.
//   Redistribution: rows -> columns of a (4096, 4096) double array and a (8192, 1024) float array
//   (the reshard benchmark's shapes). dax: reshard P('x') -> P(None, 'x'). ScaLAPACK: p?gemr2d from
//   an n x 1 grid with block rows to a 1 x n grid with block columns. MPI: MPI_Alltoall of the same
//   bytes.
// Each round times every contender once (slowest rank), the order flipping every round; the
// median over rounds is reported, with ratios against the ceiling taken per round.
//
//   mpirun -np 2 ./scalapack_peer [N=2048] [rounds=5] [--json FILE]
#include <dax/dax.hpp>

#include <Eigen/Dense>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "bench_common.hpp"

extern "C" {
void Cblacs_get(int context, int what, int* value);
void Cblacs_gridinit(int* context, const char* order, int rows, int cols);
void Cblacs_gridinfo(int context, int* rows, int* cols, int* row, int* col);
void Cblacs_gridexit(int context);
int numroc_(const int* n, const int* nb, const int* iproc, const int* isrcproc, const int* nprocs);
void descinit_(int* desc, const int* m, const int* n, const int* mb, const int* nb, const int* irsrc,
               const int* icsrc, const int* context, const int* lld, int* info);
void pdgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const double* alpha,
             const double* a, const int* ia, const int* ja, const int* desca, const double* b, const int* ib,
             const int* jb, const int* descb, const double* beta, double* c, const int* ic, const int* jc,
             const int* descc);
void pdgemr2d_(const int* m, const int* n, const double* a, const int* ia, const int* ja, const int* desca,
               double* b, const int* ib, const int* jb, const int* descb, const int* context);
void psgemr2d_(const int* m, const int* n, const float* a, const int* ia, const int* ja, const int* desca, float* b,
               const int* ib, const int* jb, const int* descb, const int* context);
}

namespace {

/// A BLACS process grid over every rank, and a ScaLAPACK descriptor of an (m, n) matrix on it with
/// (mb, nb) blocks, with this rank's local storage (column-major, as ScaLAPACK keeps it).
struct Grid {
  int context = -1, rows = 0, cols = 0, row = 0, col = 0;
  Grid(int prow, int pcol) {
    Cblacs_get(0, 0, &context);
    Cblacs_gridinit(&context, "Row", prow, pcol);
    Cblacs_gridinfo(context, &rows, &cols, &row, &col);
  }
  ~Grid() { Cblacs_gridexit(context); }
};

template <class T>
struct Local {
  int desc[9];
  std::vector<T> data;
  Local(const Grid& g, int m, int n, int mb, int nb) {
    const int zero = 0;
    const int local_rows = numroc_(&m, &mb, &g.row, &zero, &g.rows);
    const int local_cols = numroc_(&n, &nb, &g.col, &zero, &g.cols);
    const int lld = std::max(1, local_rows);
    int info = 0;
    descinit_(desc, &m, &n, &mb, &nb, &zero, &zero, &g.context, &lld, &info);
    DAX_CHECK(info == 0, "scalapack_peer: descinit_ failed with info ", info);
    data.resize(static_cast<size_t>(local_rows) * static_cast<size_t>(local_cols));
    for (size_t i = 0; i < data.size(); ++i) data[i] = T((i * 7919) % 1000) / T(1000);
  }
};

struct Entry {
  std::string what, who;
  double seconds, ratio;  // ratio: ceiling time / this time (median over rounds)
  double rate;            // GFLOP/s for GEMMs, GB/s of the array for redistributions
};

/// Times each contender once per round, the order flipping every round; returns the median seconds
/// and the median per-round ratio ceiling / contender (the ceiling is contenders[0]).
std::vector<std::pair<double, double>> race(const std::vector<std::function<void()>>& contenders, int rounds) {
  std::vector<std::vector<double>> times(contenders.size()), ratios(contenders.size());
  for (const auto& f : contenders) f();  // warm-up: plans, buffers, grids
  for (int r = 0; r < rounds; ++r) {
    std::vector<double> t(contenders.size());
    for (size_t k = 0; k < contenders.size(); ++k) {
      const size_t i = r % 2 == 0 ? k : contenders.size() - 1 - k;
      t[i] = dax::bench::slowest_rank_seconds(contenders[i]);
    }
    for (size_t i = 0; i < contenders.size(); ++i) {
      times[i].push_back(t[i]);
      ratios[i].push_back(t[0] / t[i]);
    }
  }
  std::vector<std::pair<double, double>> out;
  for (size_t i = 0; i < contenders.size(); ++i)
    out.emplace_back(dax::bench::median(times[i]), dax::bench::median(ratios[i]));
  return out;
}

std::vector<Entry> gemm(int n_size, int rounds) {
  auto& rt = dax::Runtime::current();
  const int n = rt.size();
  const dax::Mesh line({n}, {"x"});
  const dax::NamedSharding rows(line, dax::P("x", dax::none));
  const auto keys = dax::random::split(dax::random::key(3), 2);
  const auto a = dax::random::normal<double>(keys[0], {n_size, n_size}, rows);
  const auto b = dax::random::normal<double>(keys[1], {n_size, n_size}, rows);
  dax::DistArray<double> c = dax::matmul(a, b, rows);

  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int share = (n_size + n - 1) / n;
  const Mat la = Mat::Random(share, n_size), lb = Mat::Random(n_size, n_size);
  Mat lc(share, n_size);

  const Grid grid(n, 1);
  const int one = 1, cyclic = 64;
  const double alpha = 1, beta = 0;
  Local<double> ba(grid, n_size, n_size, share, n_size), bb(grid, n_size, n_size, share, n_size),
      bc(grid, n_size, n_size, share, n_size);
  Local<double> ca(grid, n_size, n_size, cyclic, cyclic), cb(grid, n_size, n_size, cyclic, cyclic),
      cc(grid, n_size, n_size, cyclic, cyclic);
  auto pdgemm = [&](Local<double>& x, Local<double>& y, Local<double>& z) {
    pdgemm_("N", "N", &n_size, &n_size, &n_size, &alpha, x.data.data(), &one, &one, x.desc, y.data.data(), &one,
            &one, y.desc, &beta, z.data.data(), &one, &one, z.desc);
  };
  const auto r = race({[&] { dax::detail::cpu::gemm(la.data(), false, lb.data(), false, lc.data(), share, n_size, n_size); }, [&] { c = dax::matmul(a, b, rows); },
                       [&] { pdgemm(ba, bb, bc); }, [&] { pdgemm(ca, cb, cc); }},
                      rounds);
  const double flops = 2.0 * n_size * double(n_size) * n_size;
  const std::string what = "GEMM (" + std::to_string(n_size) + ")^3 double, rows";
  const char* names[] = {"BLAS share (ceiling)", "dax matmul P('x') all three", "pdgemm block rows",
                         "pdgemm 64x64 block-cyclic"};
  std::vector<Entry> out;
  for (size_t i = 0; i < r.size(); ++i) out.push_back({what, names[i], r[i].first, r[i].second, flops / r[i].first / 1e9});
  return out;
}

template <class T>
std::vector<Entry> redistribute(int m, int n_cols, int rounds) {
  auto& rt = dax::Runtime::current();
  const int n = rt.size();
  const dax::Mesh line({n}, {"x"});
  const dax::NamedSharding rows(line, dax::P("x", dax::none)), cols(line, dax::P(dax::none, "x"));
  const auto x = dax::random::normal<T>(dax::random::key(5), {m, n_cols}, rows);
  dax::DistArray<T> y = dax::reshard(x, cols);

  // MPI_Alltoall of the same bytes: each rank sends (m/n) x (n_cols/n) to every rank.
  const int64_t block = int64_t(m / n) * (n_cols / n);
  std::vector<T> send(static_cast<size_t>(block) * n), recv(send.size());
  for (size_t i = 0; i < send.size(); ++i) send[i] = T(i % 97);
  const MPI_Datatype type = sizeof(T) == 8 ? MPI_DOUBLE : MPI_FLOAT;

  const Grid by_rows(n, 1), by_cols(1, n);
  const int one = 1, mb = (m + n - 1) / n, nb = (n_cols + n - 1) / n;
  Local<T> from(by_rows, m, n_cols, mb, n_cols), to(by_cols, m, n_cols, m, nb);
  auto gemr2d = [&] {
    if constexpr (sizeof(T) == 8)
      pdgemr2d_(&m, &n_cols, from.data.data(), &one, &one, from.desc, to.data.data(), &one, &one, to.desc,
                &by_rows.context);
    else
      psgemr2d_(&m, &n_cols, from.data.data(), &one, &one, from.desc, to.data.data(), &one, &one, to.desc,
                &by_rows.context);
  };
  const auto r = race({[&] { MPI_Alltoall(send.data(), int(block), type, recv.data(), int(block), type, MPI_COMM_WORLD); },
                       [&] { y = dax::reshard(x, cols); }, gemr2d},
                      rounds);
  const double bytes = double(m) * n_cols * sizeof(T);
  const std::string what = "rows -> columns (" + std::to_string(m) + ", " + std::to_string(n_cols) + ") " +
                           (sizeof(T) == 8 ? "double" : "float");
  const char* names[] = {"MPI_Alltoall (reference)", "dax reshard", sizeof(T) == 8 ? "pdgemr2d" : "psgemr2d"};
  std::vector<Entry> out;
  for (size_t i = 0; i < r.size(); ++i) out.push_back({what, names[i], r[i].first, r[i].second, bytes / r[i].first / 1e9});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  std::vector<std::string> args;
  std::string json_path = "scalapack_peer.json";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
    else args.emplace_back(argv[i]);
  }
  const int n_size = args.size() > 0 ? std::atoi(args[0].c_str()) : 2048;
  const int rounds = args.size() > 1 ? std::atoi(args[1].c_str()) : 5;
  std::vector<Entry> all = gemm(n_size, rounds);
  for (const Entry& e : redistribute<double>(4096, 4096, rounds)) all.push_back(e);
  for (const Entry& e : redistribute<float>(8192, 1024, rounds)) all.push_back(e);
  if (rt.rank() != 0) return 0;
  std::cout << "# dax against ScaLAPACK, " << rt.size() << " rank(s), " << dax::blas_info().vendor
            << " one thread per rank; median of " << rounds << " rounds; ratio = ceiling time / time, per round\n"
            << std::left << std::setw(40) << "# case" << std::setw(30) << "contender" << std::right << std::setw(11)
            << "ms" << std::setw(10) << "rate" << std::setw(9) << "ratio" << "\n";
  std::ofstream json(json_path);
  json << "{\"benchmark\": \"scalapack_peer\", \"ranks\": " << rt.size() << ", \"rounds\": " << rounds
       << ", \"rows\": [";
  for (size_t i = 0; i < all.size(); ++i) {
    const Entry& e = all[i];
    std::cout << std::left << std::setw(40) << e.what << std::setw(30) << e.who << std::right << std::fixed
              << std::setprecision(2) << std::setw(11) << e.seconds * 1e3 << std::setprecision(1) << std::setw(10)
              << e.rate << std::setprecision(3) << std::setw(9) << e.ratio << "\n";
    json << (i ? ", " : "") << "{\"case\": \"" << e.what << "\", \"contender\": \"" << e.who
         << "\", \"seconds\": " << e.seconds << ", \"rate\": " << e.rate << ", \"ratio\": " << e.ratio << "}";
  }
  json << "]}\n";
  std::cout << "# rate: GFLOP/s for GEMMs, GB/s of the whole array for redistributions; JSON in " << json_path << "\n";
  return 0;
}
