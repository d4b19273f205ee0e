// small.cpp including only dax/array.hpp (arrays and ops, no training or files).
#include <dax/array.hpp>

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  dax::Mesh mesh({rt.size()}, {"x"});
  auto a = dax::ones<float>({64, 64}, dax::NamedSharding(mesh, dax::P("x")));
  auto b = dax::matmul(a, a) + a;
  return dax::sum(b).to_host()[0] == 64.0f * 64 * 65 ? 0 : 1;
}
