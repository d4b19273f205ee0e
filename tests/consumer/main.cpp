// Built against the installed dax package: proves find_package(dax) + dax::dax work, and that
// dax::dax brings OpenBLAS with one thread per rank (run_consumer.cmake checks the printed line), and
// that a user program compiles without a warning at -O2 -Wall -Wextra (run_consumer.cmake: -Werror).
#include <dax/dax.hpp>

#include <cmath>
#include <iostream>

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  dax::Mesh mesh({rt.size()}, {"x"});
  auto x = dax::arange<int32_t>({6, 2}, dax::NamedSharding(mesh, dax::P("x")));
  const auto host = dax::reshard(x, dax::NamedSharding(mesh, dax::P(dax::none, "x"))).to_host();
  int32_t expect = 0;
  for (int32_t v : host)
    if (v != expect++) return 1;
  // A product that goes through the BLAS: (m x k) @ (k x n) against a loop on the host.
  const int64_t m = 37, k = 29, n = 23;
  auto a = dax::arange<double>({m, k}, dax::NamedSharding(mesh, dax::P("x")));
  auto b = dax::arange<double>({k, n}, dax::NamedSharding(mesh, dax::P()));
  const auto c = dax::matmul(a, b).to_host();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t l = 0; l < k; ++l) ref += double(i * k + l) * double(l * n + j);
      if (std::abs(c[i * n + j] - ref) > 1e-9 * std::abs(ref)) return 2;
    }
  const dax::BlasInfo blas = dax::blas_info();
  if (rt.rank() == 0) {
    std::cout << "consumer ok: " << x.sharding() << "\n";
    std::cout << "blas: " << blas.vendor << " threads=" << blas.threads << " config=" << blas.config << "\n";
  }
  return 0;
}
