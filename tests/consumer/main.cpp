// Built against the installed dax package: proves find_package(dax) + dax::dax work.
#include <dax/dax.hpp>

#include <iostream>

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  dax::Mesh mesh({rt.size()}, {"x"});
  auto x = dax::arange<int32_t>({6, 2}, dax::NamedSharding(mesh, dax::P("x")));
  const auto host = dax::reshard(x, dax::NamedSharding(mesh, dax::P(dax::none, "x"))).to_host();
  int32_t expect = 0;
  for (int32_t v : host)
    if (v != expect++) return 1;
  if (rt.rank() == 0) std::cout << "consumer ok: " << x.sharding() << "\n";
  return 0;
}
