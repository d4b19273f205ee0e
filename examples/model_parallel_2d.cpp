// model_parallel_2d: a matmul on a 2-d mesh ('data', 'model'). The input (128, 4096) is split by
// rows over 'data', the weight (4096, 2048) by columns over 'model', and the product comes out
// split both ways, P('data', 'model'), with no communication: each device multiplies its rows of
// the input by its columns of the weight. On 8 ranks the mesh is (4, 2) and each device's piece of
// the output is (32, 1024). Fewer ranks get a mesh that fits: (n/2, 2) for even n, (n, 1) for odd.
// Every device checks its own piece against Eigen on the host inputs.
// Run with `mpirun -np N` (any N) or as one process.
#include <dax/dax.hpp>
#include <mpi.h>

#include <Eigen/Dense>

#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const int64_t rows = 128, depth = 4096, cols = 2048;
  const int n = rt.size();
  const int model = n % 2 == 0 ? 2 : 1;
  dax::Mesh mesh({n / model, model}, {"data", "model"});
  if (rt.rank() == 0) {
    std::cout << "mesh " << mesh;
    if (n != 8) std::cout << " (the (4, 2) mesh needs 8 ranks; " << n << " launched)";
    std::cout << "\n";
  }

  // Small integers in [-2, 2]: every product and partial sum is an integer below 2^24, exact in
  // float in any summation order, so dax and Eigen must agree exactly.
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> small(-2, 2);
  Matrix x_host(rows, depth), w_host(depth, cols);
  for (auto* m : {&x_host, &w_host})
    for (Eigen::Index i = 0; i < m->size(); ++i) m->data()[i] = static_cast<float>(small(gen));

  const dax::NamedSharding x_sharding(mesh, dax::P("data", dax::none));
  const dax::NamedSharding w_sharding(mesh, dax::P(dax::none, "model"));
  const auto x = dax::device_put(std::span<const float>(x_host.data(), x_host.size()), {rows, depth}, x_sharding);
  const auto w = dax::device_put(std::span<const float>(w_host.data(), w_host.size()), {depth, cols}, w_sharding);

  // The matmul rule's candidates, cheapest first (the chosen one starred); the first few suffice.
  if (rt.rank() == 0) {
    std::istringstream lines(dax::explain_matmul(x, w));
    std::string line;
    for (int i = 0; i < 4 && std::getline(lines, line); ++i) std::cout << line << "\n";
    std::cout << "  ...\n";
  }
  dax::comm_stats().reset();
  const auto y = dax::matmul(x, w);
  const int64_t moved = dax::comm_stats().total_bytes();

  if (rt.rank() == 0) std::cout << "x " << x.sharding() << "\n";
  dax::visualize_sharding(x);
  if (rt.rank() == 0) std::cout << "w " << w.sharding() << "\n";
  dax::visualize_sharding(w);
  if (rt.rank() == 0) std::cout << "y = x @ w " << y.sharding() << "\n";
  dax::visualize_sharding(y);

  // Each device checks its own piece: its rows of x times its columns of w, by Eigen.
  const dax::Shard<float> piece = y.addressable_shards().at(0);
  const dax::Slice r = piece.index[0], c = piece.index[1];
  const Matrix expected = x_host.middleRows(r.start, r.size()) * w_host.middleCols(c.start, c.size());
  const std::vector<float> values = piece.data.to_vector();  // a copy on the host (the piece may be on a GPU)
  const Eigen::Map<const Matrix> got(values.data(), r.size(), c.size());
  const bool piece_ok = got == expected;
  // The layout P('data', 'model') asks for (on a mesh with an axis of 1 the printed spec may leave
  // that axis out; the pieces are the same).
  const dax::NamedSharding both(mesh, dax::P("data", "model"));
  const bool layout_ok = y.sharding().devices_indices_map(y.shape()) == both.devices_indices_map(y.shape());

  // Rank 0 prints one line per device: its piece of y, the bytes it received, whether it matched.
  const int64_t mine[] = {r.size(), c.size(), r.start, c.start, moved, piece_ok};
  std::vector<int64_t> all(6 * n);
  MPI_Gather(mine, 6, MPI_INT64_T, all.data(), 6, MPI_INT64_T, 0, MPI_COMM_WORLD);
  bool ok = true;
  for (int d = 0; d < n; ++d) {
    const int64_t* e = &all[6 * d];
    if (rt.rank() == 0)
      std::cout << "device " << d << ": piece of y (" << e[0] << ", " << e[1] << ") at [" << e[2] << ", " << e[3]
                << "], received " << e[4] << " bytes, " << (e[5] ? "matches" : "DIFFERS FROM") << " Eigen\n";
    ok = ok && e[4] == 0 && e[5];
  }
  if (rt.rank() != 0) return 0;
  if (!ok || !layout_ok) {
    std::cerr << "model_parallel_2d: FAILED (a piece differs from Eigen, the matmul communicated, or y is not "
                 "laid out as P('data', 'model'))\n";
    return 1;
  }
  std::cout << "verified: (128, 4096) P('data', None) @ (4096, 2048) P(None, 'model') -> P('data', 'model') "
               "on " << mesh << " equals Eigen, with no communication\n";
  return 0;
}
