// resharding: move one (30, 20) array through four layouts on a 2-d mesh ('x', 'y'):
//   rows split over both axes -> columns split over both -> 2-d blocks -> replicated.
// Before each move it prints dax::explain (the plan: steps, mesh axes, bytes per device). It then
// prints the pieces, and the bytes comm_stats counted against the lower bound: the most that any
// device lacks of its new piece. After each move every device checks its piece against the host
// data. With 4 devices the rows split 4 ways are uneven (8, 8, 8, 6), which dax allows.
// Run with `mpirun -np N` (any N: the mesh is (N/2, 2) for even N, else (N, 1)) or as one process.
#include <dax/dax.hpp>
#include <mpi.h>

#include <algorithm>
#include <iostream>
#include <random>
#include <string>
#include <vector>

// The fewest bytes some device must receive: the part of its target piece that its source piece
// does not cover, the largest over devices.
int64_t lower_bound(const dax::Shape& shape, const dax::NamedSharding& from, const dax::NamedSharding& to) {
  const auto have = from.devices_indices_map(shape);
  int64_t most = 0;
  for (const auto& [device, want] : to.devices_indices_map(shape))
    most = std::max(most, dax::numel(want) - dax::numel(dax::intersect(want, have.at(device))));
  return most * int64_t(sizeof(float));
}

// Whether this device's piece of `a` holds the host data of its region.
bool piece_matches(const dax::DistArray<float>& a, const std::vector<float>& host) {
  const auto piece = a.addressable_shards().at(0);
  const dax::Slice rows = piece.index[0], cols = piece.index[1];
  const std::vector<float> values = piece.data.to_vector();  // on the host, wherever the piece lives
  int64_t k = 0;
  for (int64_t i = rows.start; i < rows.stop; ++i)
    for (int64_t j = cols.start; j < cols.stop; ++j)
      if (values[k++] != host[i * a.shape()[1] + j]) return false;
  return true;
}

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const int n = rt.size(), ys = n % 2 == 0 ? 2 : 1;
  dax::Mesh mesh({n / ys, ys}, {"x", "y"});
  const dax::Shape shape{30, 20};

  std::mt19937 gen(5);
  std::uniform_int_distribution<int> values(-99, 99);
  std::vector<float> host(30 * 20);
  for (float& v : host) v = static_cast<float>(values(gen));

  const std::vector<std::pair<std::string, dax::PartitionSpec>> layouts{
      {"rows", dax::P(dax::axes("x", "y"), dax::none)},
      {"columns", dax::P(dax::none, dax::axes("x", "y"))},
      {"2-d blocks", dax::P("x", "y")},
      {"replicated", dax::P()},
  };
  auto a = dax::device_put(host, shape, dax::NamedSharding(mesh, layouts[0].second));
  bool ok = piece_matches(a, host);
  if (rt.rank() == 0) std::cout << "(30, 20) float32 on " << mesh << ", " << layouts[0].first << ":\n";
  dax::visualize_sharding(a);

  for (size_t i = 1; i < layouts.size(); ++i) {
    const dax::NamedSharding target(mesh, layouts[i].second);
    const int64_t bound = lower_bound(shape, a.sharding(), target);
    if (rt.rank() == 0) std::cout << "\n-> " << layouts[i].first << "\n" << dax::explain(a, target);

    dax::comm_stats().reset();
    a = dax::reshard(a, target);
    // comm_stats counts what this rank received; explain's bytes/device are the most any device
    // receives, so take the largest over ranks.
    int64_t received = dax::comm_stats().total_bytes(), most = 0;
    MPI_Allreduce(&received, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);

    dax::visualize_sharding(a);
    if (rt.rank() == 0)
      std::cout << "moved: " << most << " bytes/device at most (rank 0: " << received << "), lower bound " << bound
                << "\n";
    ok = ok && most == bound && piece_matches(a, host);
  }

  // Every rank's verdict, so that rank 0 reports for all.
  int mine = ok, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (!all || a.to_host() != host) {
    if (rt.rank() == 0)
      std::cerr << "resharding: FAILED (a piece differs from the host data, or a move was above the lower bound)\n";
    return 1;
  }
  if (rt.rank() == 0)
    std::cout << "verified: rows -> columns -> 2-d -> replicated on " << mesh
              << ", every piece equal to the host data, every move at its lower bound\n";
  return 0;
}
