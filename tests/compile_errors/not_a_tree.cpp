// A struct of arrays without DAX_TREE, given to value_and_grad and to an optimizer: each call must
// fail to compile with one error that names DAX_TREE as the fix (tests/compile_errors/check.cmake
// counts them), not a cascade through dax's tree code.
#include <dax/dax.hpp>

struct Params {
  dax::DistArray<float> w;
};  // DAX_TREE(Params, w) is missing

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const dax::Mesh mesh({rt.size()}, {"x"});
  Params p{dax::ones<float>({4}, dax::NamedSharding(mesh, dax::P()))};
  auto loss = [](const Params& q) { return dax::sum(q.w); };
  auto [value, grads] = dax::value_and_grad(loss)(p);
  dax::optim::AdamW opt(p);
  dax::optim::SGD sgd(p, {.lr = 0.1});
}
