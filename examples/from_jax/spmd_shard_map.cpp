// spmd_shard_map: the two shard_map blocks of guide 002 (the digest of JAX's pages on SPMD,
// jax.Array, NamedSharding, jit and shard_map) in dax; its other blocks are in spmd_guide.cpp.
// Block 7 is a matmul written per device with one psum, followed by the collectives the guide
// lists beside it (all_gather, psum_scatter, all_to_all); block 14 gathers an array while each
// device works on its own block, and combines the two.
//
// Run: mpirun -np 8 --oversubscribe examples/from_jax/from_jax_spmd_shard_map   (or -np 1, or as
// one process). At 8 ranks the meshes are whole: the programs check each block's local shape, the
// output's sharding, and the bytes every collective brings to each device (dax::comm_stats)
// against its formula. At fewer ranks the blocks run on a one-device mesh and check only their
// numbers, which are compared with host loops over inputs drawn with a fixed seed.
#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "guide.hpp"

namespace {

using dax::P;
using Array = dax::DistArray<float>;
using from_jax::expect_values;
using from_jax::host_matmul;
using from_jax::put;
using from_jax::Host;
using from_jax::small_ints;
const char* const guide = "002";

/// One collective of `kind` over `axes` since the last reset, receiving `bytes`, and nothing else.
void expect_only(const std::string& kind, const std::string& axes, int64_t bytes, const std::string& what) {
  const auto count = dax::comm_stats().of(kind, axes);
  from_jax::say(what, ": ", kind, " over ", axes, ", ", count.calls, " call, ", count.bytes, " bytes");
  from_jax::expect_eq(count.calls, int64_t(1), what + ": calls of " + kind + " over " + axes);
  from_jax::expect_eq(count.bytes, bytes, what + ": bytes received");
  from_jax::expect_eq(dax::comm_stats().total_bytes(), bytes, what + ": bytes received in all");
}

// 7 L165: C = A @ B with A split (i, j) and B split (j, k): each device multiplies its blocks,
// then a psum over 'j' adds the partial products.
void manual_matmul() {
  from_jax::block(guide, "block 7: manual_matmul(a_block, b_block), in P('i', 'j'), P('j', 'k'), out P('i', 'k')");
  auto [mesh, full] = from_jax::guide_mesh({2, 2, 2}, {"i", "j", "k"});
  const int64_t m = 8, kk = 16, n = 8;
  const Host ah = small_ints(m * kk, 30), bh = small_ints(kk * n, 31);
  const auto a = put(ah, {m, kk}, mesh, P("i", "j"));
  const auto b = put(bh, {kk, n}, mesh, P("j", "k"));
  dax::Shape seen_a, seen_b;
  const auto f = dax::shard_map(
      [&](const Array& a_block, const Array& b_block) {
        seen_a = a_block.shape(), seen_b = b_block.shape();
        const auto c_partial = dax::matmul(a_block, b_block);  // local: no communication
        return dax::psum(c_partial, "j");
      },
      mesh, {P("i", "j"), P("j", "k")}, P("i", "k"));
  dax::comm_stats().reset();
  const auto c = f(a, b);
  from_jax::say("c: ", c.sharding());
  if (full) {
    from_jax::expect_eq(dax::to_string(seen_a), std::string("(4, 8)"), "a_block's shape");
    from_jax::expect_eq(dax::to_string(seen_b), std::string("(8, 4)"), "b_block's shape");
    from_jax::expect(c.sharding() == dax::NamedSharding(mesh, P("i", "k")), "c laid out as P('i', 'k')");
    // The inputs already have the in-specs' layouts; the psum all-reduces one (4, 4) block over a
    // group of 2: 2(n-1)/n of 64 bytes.
    expect_only("all_reduce", "('j',)", 2 * 1 * 64 / 2, "psum over 'j'");
  }
  expect_values(c, host_matmul(ah, bh, m, kk, n), 0, "manual_matmul");

  // The other collectives the guide names, on an (8, 8) array split P('i', 'j'): (4, 4) blocks.
  const Host xh = small_ints(64, 32);
  const auto x = put(xh, {8, 8}, mesh, P("i", "j"));
  const std::vector<P> in{P("i", "j")};
  // all_gather along columns over 'j': each device gets its whole row band back.
  dax::comm_stats().reset();
  const auto gathered = dax::shard_map([](const Array& blk) { return dax::all_gather(blk, "j", 1, true); }, mesh, in,
                                       P("i", dax::none))(x);
  if (full) expect_only("all_gather", "('j',)", (2 - 1) * 64, "all_gather over 'j'");
  expect_values(gathered, xh, 0, "all_gather");
  // psum_scatter: the sum of the two column blocks, each device keeping half of its rows.
  dax::comm_stats().reset();
  const auto scattered = dax::shard_map([](const Array& blk) { return dax::psum_scatter(blk, "j", 0, true); }, mesh, in,
                                        P(dax::axes("i", "j"), dax::none))(x);
  if (full) expect_only("reduce_scatter", "('j',)", 64 / 2, "psum_scatter over 'j'");
  // Column c of the result adds x's column c of every 'j' block (two at the full mesh).
  const int nj = int(mesh.axis_size("j")), width = 8 / nj;
  Host folded(size_t(8 * width), 0.0f);
  for (int r = 0; r < 8; ++r)
    for (int col = 0; col < width; ++col)
      for (int part = 0; part < nj; ++part) folded[r * width + col] += xh[r * 8 + part * width + col];
  expect_values(scattered, folded, 0, "psum_scatter");
  // all_to_all: split rows, concatenate columns. A P('i', 'j') block becomes a P(('i', 'j'), None)
  // block of the same array: the layout changes, the values do not.
  dax::comm_stats().reset();
  const auto swapped = dax::shard_map([](const Array& blk) { return dax::all_to_all(blk, "j", 0, 1, true); }, mesh, in,
                                      P(dax::axes("i", "j"), dax::none))(x);
  if (full) expect_only("all_to_all", "('j',)", 64 / 2, "all_to_all over 'j'");
  expect_values(swapped, xh, 0, "all_to_all");
}

// 14 L289: gather every device's block while working on the local one, then combine them. dax's
// collectives return when done (there is no all_gather_async), so the two run one after another.
void overlapped_gather() {
  from_jax::block(guide, "block 14: optimized_fn(x): all_gather(x, 'x') beside expensive_local_op(x), then combine");
  auto [mesh, full] = from_jax::guide_mesh({8}, {"x"});
  const int64_t rows = 64, cols = 16;
  const Host xh = small_ints(rows * cols, 33);
  const auto x = put(xh, {rows, cols}, mesh, P("x"));
  auto expensive_local_op = [](const Array& blk) { return dax::tanh(blk); };
  auto combine = [](const Array& local, const Array& everything) { return dax::matmul(local, everything.T()); };
  const auto optimized_fn = dax::shard_map(
      [&](const Array& blk) {
        const auto gathered = dax::all_gather(blk, "x", 0, true);  // (64, 16) on every device
        const auto local_result = expensive_local_op(blk);         // (8, 16), this device's rows
        return combine(local_result, gathered);                    // (8, 64)
      },
      mesh, {P("x")}, P("x", dax::none));
  dax::comm_stats().reset();
  const auto y = optimized_fn(x);
  from_jax::say("y: ", y.sharding(), ", shape ", dax::to_string(y.shape()));
  if (full) {
    from_jax::expect(y.sharding() == dax::NamedSharding(mesh, P("x", dax::none)), "y laid out as P('x', None)");
    from_jax::expect_eq(dax::to_string(y.local_shape()), std::string("(8, 64)"), "y's block");
    // Each device receives the other seven (8, 16) blocks.
    expect_only("all_gather", "('x',)", 7 * 8 * 16 * 4, "all_gather over 'x'");
  }
  Host t(xh.size()), xt(xh.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      t[r * cols + c] = std::tanh(xh[r * cols + c]), xt[c * rows + r] = xh[r * cols + c];
  expect_values(y, host_matmul(t, xt, rows, cols, rows), 1e-4, "tanh(x) @ x.T");
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  manual_matmul();      // 7
  overlapped_gather();  // 14
  return from_jax::finish("spmd_shard_map", 2);
}
