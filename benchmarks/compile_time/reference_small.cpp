// small.cpp written with Eigen + MPI directly, the reference of benchmarks/compile_time: the same
// (64, 64) ones split by rows over the ranks, the product with the whole matrix (gathered with
// MPI_Allgatherv), + a, and the sum over every element (MPI_Allreduce).
#include <mpi.h>

#include <Eigen/Dense>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int n = 64, chunk = (n + size - 1) / size;
  const int lo = std::min(rank * chunk, n), hi = std::min(lo + chunk, n);
  const Matrix a = Matrix::Ones(hi - lo, n);
  std::vector<int> counts(size), offsets(size);
  for (int r = 0; r < size; ++r) {
    const int rlo = std::min(r * chunk, n), rhi = std::min(rlo + chunk, n);
    counts[r] = (rhi - rlo) * n;
    offsets[r] = rlo * n;
  }
  Matrix whole(n, n);
  MPI_Allgatherv(a.data(), counts[rank], MPI_FLOAT, whole.data(), counts.data(), offsets.data(), MPI_FLOAT,
                 MPI_COMM_WORLD);
  const Matrix b = a * whole + a;
  float local = b.sum(), total = 0;
  MPI_Allreduce(&local, &total, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return total == 64.0f * 64 * 65 ? 0 : 1;
}
