// dax::linalg against calling ScaLAPACK directly on data already in its block-cyclic layout
// (issue 45), same shapes, same run: Cholesky (p?potrf) and solve (p?gesv, one right-hand side) of
// an N x N double matrix. dax's time includes everything it does: the matrix (rows split over the
// ranks, P('x')) dealt into the block-cyclic layout, the factorization, and the result back in the
// input's layout. ScaLAPACK's is the routine alone on its 1 x n grid with 64 x 64 blocks (the same
// grid and blocks dax builds), a fresh copy of the matrix each time (the copy not timed). Each round
// times both once (slowest rank), the order flipping every round; medians over rounds, and the
// ratio ScaLAPACK time / dax time (goal >= 0.9).
//
//   mpirun -np 2 ./linalg_bench [N=8192] [rounds=3] [--json FILE]
//
// --batched: a batch of small matrices instead, split over the ranks (P('x')): dax's batched
// cholesky and solve (LAPACK on each rank's own matrices, linalg/batched.hpp) against the same
// LAPACK calls in a loop over the rank's matrices, each copied first as dax copies it (into the
// result). Ratio LAPACK time / dax time.
//
//   mpirun -np 2 ./linalg_bench --batched [count=4096] [size=32] [rounds=5] [--json FILE]
#include <dax/dax.hpp>
#include <dax/linalg.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace {

/// A symmetric, diagonally dominant (so positive definite) matrix, from its indices alone.
double entry(int64_t i, int64_t j, int64_t n) { return 1.0 / double(1 + std::abs(i - j)) + (i == j ? double(n) : 0.0); }

struct Result {
  std::string op;
  double peer_s, dax_s;  // the raw library's time (ScaLAPACK's, or LAPACK's for a batch) and dax's
};

/// The table on stdout and the JSON file: `head` opens the object, "results" close it.
void report(const std::vector<Result>& all, const std::string& peer, const std::string& head, const std::string& path) {
  std::string key = peer;
  for (char& c : key) c = char(std::tolower(c));
  std::cout << std::left << std::setw(12) << "op" << std::setw(14) << peer + " s" << std::setw(12) << "dax s" << peer
            << " / dax\n";
  std::ofstream json(path);
  json << head << ", \"results\": [";
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& r = all[i];
    std::cout << std::setw(12) << r.op << std::setw(14) << std::setprecision(4) << r.peer_s << std::setw(12) << r.dax_s
              << std::setprecision(3) << r.peer_s / r.dax_s << "x\n";
    json << (i ? ", " : "") << "{\"op\": \"" << r.op << "\", \"" << key << "_s\": " << r.peer_s
         << ", \"dax_s\": " << r.dax_s << ", \"ratio\": " << r.peer_s / r.dax_s << "}";
  }
  json << "]}\n";
}

/// The --batched run: `count` SPD matrices of size s x s split over the ranks.
int batched(int64_t count, int64_t s, int rounds, const std::string& json_path) {
  const int ranks = dax::Runtime::current().size(), rank = dax::Runtime::current().rank();
  const dax::Mesh mesh(dax::Shape{ranks}, {"x"});
  const dax::NamedSharding split(mesh, dax::P("x"));
  const auto a = dax::make_array_from_callback<double>({count, s, s}, split, [&](const dax::Box& box) {
    std::vector<double> v;
    for (int64_t m = box[0].start; m < box[0].stop; ++m)
      for (int64_t i = 0; i < s; ++i)
        for (int64_t j = 0; j < s; ++j) v.push_back(entry(i, j, s) + 0.001 * double(m % 7));
    return v;
  });
  const auto b = dax::ones<double>({count, s}, split);
  // LAPACK alone on this rank's matrices, as dax calls it (row-major data read as A^T).
  const auto mine = a.local_to_host();
  const int64_t local = a.local_shape()[0], ss = s * s;
  const int n = int(s), one = 1;
  std::vector<double> factor(size_t(local * ss)), rhs(size_t(local * s));
  std::vector<int> pivots(static_cast<size_t>(s));
  int info = 0;
  const auto lapack_cholesky = [&] {
    std::copy(mine.begin(), mine.end(), factor.begin());
    for (int64_t m = 0; m < local; ++m) ::dpotrf_("U", &n, factor.data() + m * ss, &n, &info);
  };
  const auto lapack_solve = [&] {
    std::copy(mine.begin(), mine.end(), factor.begin());
    std::fill(rhs.begin(), rhs.end(), 1.0);
    for (int64_t m = 0; m < local; ++m) {
      ::dgetrf_(&n, &n, factor.data() + m * ss, &n, pivots.data(), &info);
      ::dgetrs_("T", &n, &one, factor.data() + m * ss, &n, pivots.data(), rhs.data() + m * s, &n, &info);
    }
  };
  // Once each before timing, and the answers agree.
  lapack_solve();
  const auto x = dax::linalg::solve(a, b).local_to_host();
  double err = 0;
  for (size_t i = 0; i < x.size(); ++i) err = std::max(err, std::abs(x[i] - rhs[i]));
  err = dax::bench::max_over_ranks(err);
  if (rank == 0) std::cout << "# " << count << " matrices of " << s << " x " << s << ", " << ranks
                           << " ranks: dax's and LAPACK's solutions differ by " << err << "\n";
  if (err > 1e-12) throw dax::Error("linalg_bench: dax's batched solution differs from LAPACK's");
  (void)dax::linalg::cholesky(a);
  lapack_cholesky();
  std::vector<double> l_chol, d_chol, l_solve, d_solve;
  for (int r = 0; r < rounds; ++r) {
    const auto lapack = [&] {
      l_chol.push_back(dax::bench::slowest_rank_seconds(lapack_cholesky));
      l_solve.push_back(dax::bench::slowest_rank_seconds(lapack_solve));
    };
    const auto ours = [&] {
      d_chol.push_back(dax::bench::slowest_rank_seconds([&] { (void)dax::linalg::cholesky(a); }));
      d_solve.push_back(dax::bench::slowest_rank_seconds([&] { (void)dax::linalg::solve(a, b); }));
    };
    if (r % 2 == 0) {
      lapack();
      ours();
    } else {
      ours();
      lapack();
    }
  }
  using dax::bench::median;
  const std::vector<Result> all{{"cholesky", median(l_chol), median(d_chol)}, {"solve", median(l_solve), median(d_solve)}};
  if (rank == 0)
    report(all, "LAPACK", "{\"benchmark\": \"linalg_bench --batched\", \"count\": " + std::to_string(count) +
                              ", \"size\": " + std::to_string(s) + ", \"ranks\": " + std::to_string(ranks) +
                              ", \"rounds\": " + std::to_string(rounds),
           json_path);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  int64_t n = 8192;
  int rounds = 3;
  std::string json_path = "linalg_bench.json";
  bool batch = false;
  std::vector<int64_t> numbers;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
    else if (std::strcmp(argv[i], "--batched") == 0) batch = true;
    else numbers.push_back(std::atoll(argv[i]));
  }
  if (batch)
    return batched(numbers.size() > 0 ? numbers[0] : 4096, numbers.size() > 1 ? numbers[1] : 32,
                   numbers.size() > 2 ? int(numbers[2]) : 5, json_path);
  if (numbers.size() > 0) n = numbers[0];
  if (numbers.size() > 1) rounds = int(numbers[1]);
  const int ranks = rt.size(), rank = rt.rank();
  const dax::Mesh mesh(dax::Shape{ranks}, {"x"});
  const dax::NamedSharding rows(mesh, dax::P("x"));
  const auto a = dax::make_array_from_callback<double>({n, n}, rows, [&](const dax::Box& box) {
    std::vector<double> v;
    for (int64_t i = box[0].start; i < box[0].stop; ++i)
      for (int64_t j = box[1].start; j < box[1].stop; ++j) v.push_back(entry(i, j, n));
    return v;
  });
  const auto b = dax::ones<double>({n}, rows);

  // ScaLAPACK on its own: the grid and block-cyclic pieces dax builds, filled in place.
  const auto& grid = dax::detail::blacs_grid(mesh);
  const int64_t nb = dax::detail::block_size(n, grid.shape);
  const int64_t lr = dax::detail::block_count(n, nb, grid.row, grid.shape.rows);
  const int64_t lc = dax::detail::block_count(n, nb, grid.col, grid.shape.cols);
  const int64_t lcb = dax::detail::block_count(1, nb, grid.col, grid.shape.cols);
  const int ld = int(std::max<int64_t>(1, lr)), ni = int(n), nbi = int(nb), zero = 0, one = 1;
  std::vector<double> pristine(ld * std::max<int64_t>(lc, 1)), work(pristine.size()), rhs(ld * std::max<int64_t>(lcb, 1));
  for (int64_t c = 0; c < lc; ++c) {
    const int64_t j = (c / nb * grid.shape.cols + grid.col) * nb + c % nb;
    for (int64_t r = 0; r < lr; ++r) {
      const int64_t i = (r / nb * grid.shape.rows + grid.row) * nb + r % nb;
      pristine[r + c * ld] = entry(i, j, n);
    }
  }
  int desc_a[9], desc_b[9], info = 0;
  ::descinit_(desc_a, &ni, &ni, &nbi, &nbi, &zero, &zero, &grid.context, &ld, &info);
  ::descinit_(desc_b, &ni, &one, &nbi, &nbi, &zero, &zero, &grid.context, &ld, &info);
  std::vector<int> pivots(lr + nb);
  const auto scalapack_cholesky = [&] { ::pdpotrf_("L", &ni, work.data(), &one, &one, desc_a, &info); };
  const auto scalapack_solve = [&] {
    ::pdgesv_(&ni, &one, work.data(), &one, &one, desc_a, pivots.data(), rhs.data(), &one, &one, desc_b, &info);
  };
  const auto fresh = [&] {
    work = pristine;
    std::fill(rhs.begin(), rhs.end(), 1.0);
  };
  // Once each before timing (dax's caches and ScaLAPACK's first-call costs), and the answers agree.
  fresh();
  scalapack_solve();
  const auto x = dax::linalg::solve(a, b);
  double err = 0;
  {
    const auto xs = x.to_host();
    for (int64_t r = 0; r < lr && lcb > 0; ++r) {
      const int64_t i = (r / nb * grid.shape.rows + grid.row) * nb + r % nb;
      err = std::max(err, std::abs(xs[i] - rhs[r]));
    }
  }
  err = dax::bench::max_over_ranks(err);
  if (rank == 0) std::cout << "# N " << n << ", " << ranks << " ranks, grid " << grid.shape.rows << " x " << grid.shape.cols
                           << ", blocks " << nb << ": dax's and ScaLAPACK's solutions differ by " << err << "\n";
  if (err > 1e-12) throw dax::Error("linalg_bench: dax's solution differs from ScaLAPACK's");
  (void)dax::linalg::cholesky(a);
  fresh();
  scalapack_cholesky();

  // dax's deal into the block-cyclic layout and back alone (what it adds to ScaLAPACK's time).
  {
    std::vector<double> deal;
    for (int r = 0; r < rounds; ++r)
      deal.push_back(dax::bench::slowest_rank_seconds([&] {
        auto piece = dax::detail::to_cyclic(a, grid, grid.normal(), true, grid.context_t, nb, "bench");
        (void)dax::detail::from_cyclic(piece, grid, mesh, rows);
      }));
    if (rank == 0) std::cout << "# dax's deal in and back out of the block-cyclic layout: " << dax::bench::median(deal) << " s\n";
  }
  std::vector<double> s_chol, d_chol, s_solve, d_solve;
  for (int r = 0; r < rounds; ++r) {
    const auto time_scalapack = [&](auto& f, std::vector<double>& out) {
      fresh();
      out.push_back(dax::bench::slowest_rank_seconds(f));
    };
    const auto time_dax_chol = [&] { d_chol.push_back(dax::bench::slowest_rank_seconds([&] { (void)dax::linalg::cholesky(a); })); };
    const auto time_dax_solve = [&] { d_solve.push_back(dax::bench::slowest_rank_seconds([&] { (void)dax::linalg::solve(a, b); })); };
    if (r % 2 == 0) {
      time_scalapack(scalapack_cholesky, s_chol);
      time_dax_chol();
      time_scalapack(scalapack_solve, s_solve);
      time_dax_solve();
    } else {
      time_dax_solve();
      time_scalapack(scalapack_solve, s_solve);
      time_dax_chol();
      time_scalapack(scalapack_cholesky, s_chol);
    }
  }
  using dax::bench::median;
  const std::vector<Result> all{{"cholesky", median(s_chol), median(d_chol)}, {"solve", median(s_solve), median(d_solve)}};
  if (rank == 0)
    report(all, "ScaLAPACK", "{\"benchmark\": \"linalg_bench\", \"n\": " + std::to_string(n) + ", \"ranks\": " +
                                 std::to_string(ranks) + ", \"rounds\": " + std::to_string(rounds),
           json_path);
  return 0;
}
