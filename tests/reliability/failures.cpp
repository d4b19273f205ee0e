// Programs that fail the way a user's program does, run by ctest under mpiexec with default
// settings (no DAX_TIMEOUT_S, no DAX_CHECK_COLLECTIVES): each must end within seconds with dax's
// one-line (or one-report) message, never hang.
//   failures throw        -- every rank multiplies matrices whose contraction dimensions differ
//                            and does not catch the dax::Error
//   failures throw_one    -- only rank 1 throws (an unknown mesh axis); rank 0 waits in a sum
//   failures std          -- rank 1 throws a std::out_of_range
//   failures diverge      -- rank 0 sums, rank 1 skips the sum and reshards (another collective
//                            on the same group)
//   failures diverge_async -- the last rank starts a reshard without waiting, the others block in it
//   failures order        -- ranks bring two arrays to the host in different orders
//   failures leave        -- rank 1 returns from main while rank 0 sums
//   failures leave_group  -- rank 1 returns from main while rank 0 creates a new group
//   failures exit         -- rank 1 calls exit(0) while rank 0 sums
//   failures oom          -- rank 1 runs out of memory (an array of 128 TiB on a mesh of its own,
//                            past any address space) and does not catch it; rank 0 waits in a sum
//   failures ok           -- a correct program: must finish with exit code 0
#include <dax/dax.hpp>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  const int n = rt.size();
  const dax::Mesh mesh({n}, {"x"});
  const auto x = dax::ones<float>({4 * n}, dax::NamedSharding(mesh, dax::P("x")));
  volatile float sink = dax::sum(x).local_data()[0];  // every rank: the group exists and works
  if (mode == "throw") {
    const auto a = dax::ones<float>({4, 3}, dax::NamedSharding(mesh, dax::P()));
    const auto b = dax::ones<float>({5, 2}, dax::NamedSharding(mesh, dax::P()));
    dax::matmul(a, b);
  } else if (mode == "throw_one") {
    if (rt.rank() == 1) dax::NamedSharding(mesh, dax::P("y"));
    sink = sink + dax::sum(x).local_data()[0];
  } else if (mode == "std") {
    if (rt.rank() == 1) throw std::out_of_range("index 7 is past the end");
    sink = sink + dax::sum(x).local_data()[0];
  } else if (mode == "diverge") {
    if (rt.rank() == 0) sink = sink + dax::sum(x).local_data()[0];
    else sink = sink + dax::reshard(x, dax::NamedSharding(mesh, dax::P())).local_data()[0];
  } else if (mode == "diverge_async") {  // MPI cannot match a nonblocking collective with a blocking one
    const dax::NamedSharding whole(mesh, dax::P());
    if (rt.rank() == n - 1) sink = sink + dax::reshard_async(x, whole).wait().local_data()[0];
    else sink = sink + dax::reshard(x, whole).local_data()[0];
  } else if (mode == "order") {
    const auto a = dax::ones<float>({2 * n}, dax::NamedSharding(mesh, dax::P("x")));
    const auto b = dax::ones<float>({3 * n}, dax::NamedSharding(mesh, dax::P("x")));
    if (rt.rank() == 0) {
      sink = sink + a.to_host()[0];
      sink = sink + b.to_host()[0];
    } else {
      sink = sink + b.to_host()[0];
      sink = sink + a.to_host()[0];
    }
  } else if (mode == "leave" || mode == "leave_group" || mode == "exit") {
    if (rt.rank() == 1) {
      std::fprintf(stderr, "rank 1: leaving early\n");
      if (mode == "exit") std::exit(0);
      return 0;
    }
    if (mode == "leave_group") {
      const dax::Mesh grid({1, n}, {"a", "b"});
      sink = sink + dax::sum(dax::ones<float>({n, n}, dax::NamedSharding(grid, dax::P("a", "b")))).local_data()[0];
    } else {
      sink = sink + dax::sum(x * 2.0f).local_data()[0];
    }
  } else if (mode == "oom") {
    if (rt.rank() == 1) {
      const dax::Mesh alone({1}, {"solo"}, {1});
      sink = sink + dax::zeros<float>({int64_t(1) << 45}, dax::NamedSharding(alone, dax::P())).local_data()[0];
    }
    sink = sink + dax::sum(x).local_data()[0];
  } else if (mode != "ok") {
    std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  std::printf("rank %d: finished\n", rt.rank());
  return 0;
}
