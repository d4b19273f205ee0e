// quickstart: put a (10, 7) array on a 2x2 mesh, look at its layout, reshard it to columns split
// over both axes (explain says what moves), and bring it back. Run with `mpirun -np 4` or as one
// process (then the mesh is 1x1).
#include <dax/dax.hpp>

#include <iostream>
#include <numeric>

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const bool four = rt.size() >= 4;
  dax::Mesh mesh({four ? 2 : rt.size(), four ? 2 : 1}, {"data", "model"});

  std::vector<float> host(10 * 7);
  std::iota(host.begin(), host.end(), 0.0f);
  auto x = dax::device_put(host, {10, 7}, dax::NamedSharding(mesh, dax::P("data", "model")));

  const dax::NamedSharding columns(mesh, dax::P(dax::none, dax::axes("data", "model")));
  const std::string plan = dax::explain(x, columns);
  dax::comm_stats().reset();
  auto y = dax::reshard(x, columns);
  const auto moved = dax::comm_stats().total_bytes();

  if (rt.rank() == 0) std::cout << "x: " << x.sharding() << "\n";
  dax::visualize_sharding(x);
  if (rt.rank() == 0) std::cout << plan << "y: " << y.sharding() << "\n";
  dax::visualize_sharding(y);

  const auto back = y.to_host();
  const bool ok = back == host;
  if (rt.rank() == 0) {
    std::cout << "rank 0 received " << moved << " bytes; its piece of y is "
              << dax::to_string(y.local_shape()) << "\n";
    if (ok) std::cout << "verified: reshard (10, 7) P('data', 'model') -> P(None, ('data', 'model')) round trip on "
                      << mesh.size() << " device(s)\n";
  }
  return ok ? 0 : 1;
}
