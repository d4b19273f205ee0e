// The quickstart-sized program of benchmarks/compile_time: ones, matmul, +, sum on a 1-d mesh.
#include <dax/dax.hpp>

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  dax::Mesh mesh({rt.size()}, {"x"});
  auto a = dax::ones<float>({64, 64}, dax::NamedSharding(mesh, dax::P("x")));
  auto b = dax::matmul(a, a) + a;
  return dax::sum(b).to_host()[0] == 64.0f * 64 * 65 ? 0 : 1;
}
