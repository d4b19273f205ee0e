// The whole library compiled by nvcc, and a first look at the GPU: skips (exit 77) without one.
// With one, the runtime must pick the CUDA backend and a reshard must come back right.
#include <cstdio>

#include <dax/dax.hpp>

#include "skip_without_gpu.hpp"

int main(int argc, char** argv) {
  const int gpus = dax::test::gpus_or_skip("the CUDA tests");
  dax::Runtime rt(argc, argv);
  if (rt.backend() != dax::Backend::cuda) {
    std::printf("expected the CUDA backend with %d GPU(s) visible, got %s\n", gpus, dax::to_string(rt.backend()).c_str());
    return 1;
  }
  dax::Mesh mesh({rt.size()}, {"x"});
  const auto x = dax::arange<float>({8, 4}, dax::NamedSharding(mesh, dax::P("x")));
  const auto host = dax::reshard(x, dax::NamedSharding(mesh, dax::P())).to_host();
  for (int i = 0; i < 32; ++i)
    if (host[i] != float(i)) return 1;
  std::printf("%d GPU(s) visible; dax ran on the CUDA backend\n", gpus);
  return 0;
}
