// spmd_guide: the code blocks of guide 002, a digest of JAX's pages on SPMD, jax.Array,
// NamedSharding, jit with sharded inputs, pjit, and a first look at shard_map, ported to dax one
// function per block (the shard_map blocks are in spmd_shard_map.cpp).
//
// Run: mpirun -np 8 --oversubscribe examples/from_jax/from_jax_spmd_guide   (or -np 1, or as one
// process). At 8 ranks the guide's meshes are whole: each block prints the shardings and pictures
// the guide talks about and checks them (local piece shapes, specs, which devices hold which
// piece, the bytes each device receives, from dax::comm_stats, against the collective's formula,
// and dax::memory_stats for what a device holds). At fewer ranks each block runs on a one-device
// mesh and checks only its numbers. Numbers are compared with plain host loops over inputs drawn
// with a fixed seed: exactly where the inputs are small integers, within a stated tolerance
// otherwise.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <random>
#include <span>
#include <sstream>
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

/// This device's piece is the block of `whole` (the global row-major values) its index names.
void expect_piece(const Array& x, const Host& whole, const std::string& what) {
  const auto shard = x.addressable_shards().at(0);
  const dax::Shape& shape = x.shape();
  const int64_t cols = shape.size() == 2 ? shape[1] : 1;
  const dax::Slice rows = shard.index[0];
  const dax::Slice cs = shape.size() == 2 ? shard.index[1] : dax::Slice{0, 1};
  const Host got = shard.data.to_vector();
  from_jax::expect_eq(int64_t(got.size()), rows.size() * cs.size(), what + ": piece size");
  size_t at = 0;
  for (int64_t r = rows.start; r < rows.stop; ++r)
    for (int64_t c = cs.start; c < cs.stop; ++c)
      from_jax::expect_eq(
          got[at++], whole[size_t(r * cols + c)],
          what + ": element (" + std::to_string(r) + ", " + std::to_string(c) + ") of this device's piece");
}

/// At the full mesh: the array is laid out as `spec` and this device's piece has `shape`.
void expect_layout(const Array& x, const dax::Mesh& mesh, const P& spec, const dax::Shape& piece,
                   const std::string& what) {
  from_jax::expect_eq(dax::to_string(x.sharding().spec()), dax::to_string(spec), what + ": spec");
  from_jax::expect(x.sharding() == dax::NamedSharding(mesh, spec), what + " laid out as " + dax::to_string(spec));
  from_jax::expect_eq(dax::to_string(x.local_shape()), dax::to_string(piece), what + ": this device's piece shape");
}

/// Prints what this device received since the last reset (rank 0's counts), one line per kind.
void say_moved(const std::string& what) {
  from_jax::say(what, " moved ", dax::comm_stats().total_bytes(), " bytes into device 0",
                dax::comm_stats().entries().empty() ? "" : ":");
  for (const auto& [key, count] : dax::comm_stats().entries())
    from_jax::say("  ", key.first, " over ", key.second, ": ", count.calls, " call(s), ", count.bytes, " bytes");
}

void expect_no_communication(const std::string& what) {
  from_jax::expect_eq(dax::comm_stats().total_bytes(), int64_t(0), what + ": bytes received");
}

// 1 L46: arange(32) as (8, 4) on a (4, 2) mesh ('a', 'b'), split both ways; sin runs per piece.
void basic_example() {
  from_jax::block(guide, "block 1: make_mesh((4, 2), ('a', 'b')), device_put arange(32) as P('a', 'b'), sin");
  auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"a", "b"});
  Host host(32);
  for (int i = 0; i < 32; ++i) host[i] = float(i);
  const auto sharded_x = put(host, {8, 4}, mesh, P("a", "b"));
  dax::comm_stats().reset();
  const auto y = dax::sin(sharded_x);
  from_jax::say("sharded_x: ", sharded_x.sharding(), "; y = sin(sharded_x): ", y.sharding());
  dax::visualize_sharding(y);
  if (full) {
    expect_layout(sharded_x, mesh, P("a", "b"), {2, 2}, "sharded_x");
    expect_layout(y, mesh, P("a", "b"), {2, 2}, "y (computation follows the data)");
    expect_no_communication("sin");
    expect_piece(sharded_x, host, "sharded_x");
  }
  Host want(32);
  for (int i = 0; i < 32; ++i) want[i] = std::sin(float(i));
  expect_values(y, want, 1e-6, "sin(sharded_x)");
}

// 2 L89: a 1-d mesh over every device, named 'x', and the sharding that splits along it.
void named_sharding_pair() {
  from_jax::block(guide, "block 2: Mesh(jax.devices(), ('x',)), PartitionSpec('x'), NamedSharding");
  auto [mesh, full] = from_jax::guide_mesh({8}, {"x"});
  const P spec("x");
  const dax::NamedSharding sharding(mesh, spec);
  from_jax::say(sharding);
  from_jax::expect(sharding.mesh() == mesh && sharding.spec() == spec, "the sharding to keep its mesh and spec");
  // What the pair means for a (16, 4) array: rows split over 'x', columns whole.
  const int64_t n = mesh.axis_size("x");
  from_jax::expect_eq(dax::to_string(sharding.shard_shape({16, 4})), dax::to_string(dax::Shape{16 / n, 4}),
                      "shard_shape((16, 4))");
  if (full) {
    from_jax::expect_eq(dax::to_string(sharding), std::string("NamedSharding(mesh=Mesh('x': 8), spec=P('x'))"),
                        "the sharding's text");
    const auto map = sharding.devices_indices_map({16, 4});
    for (int d = 0; d < 8; ++d)
      from_jax::expect(map.at(d)[0].start == 2 * d && map.at(d)[0].stop == 2 * d + 2 && map.at(d)[1].size() == 4,
                       "device " + std::to_string(d) + " to hold rows [" + std::to_string(2 * d) + ", " +
                           std::to_string(2 * d + 2) + ") and every column");
  }
}

// 3 L108: the (4, 2) mesh ('data', 'model').
void two_d_mesh() {
  from_jax::block(guide, "block 3: make_mesh((4, 2), ('data', 'model'))");
  auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  from_jax::say(mesh);
  if (!full) return;  // a one-device mesh has no placement to check
  from_jax::expect_eq(dax::to_string(mesh), std::string("Mesh('data': 4, 'model': 2)"), "the mesh's text");
  // Row-major over the job's ranks: a 'data' row is two consecutive devices.
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j)
      from_jax::expect_eq(mesh.device_at({i, j}), 2 * i + j,
                          "device at (" + std::to_string(i) + ", " + std::to_string(j) + ")");
}

// 4 L119: three specs, each applied to an (8, 8) array on a (4, 2) mesh ('x', 'y').
void spec_examples() {
  from_jax::block(guide, "block 4: P('x', 'y'), P('x', None), P(('x', 'y'),)");
  auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"x", "y"});
  struct Case {
    P spec;
    const char* text;
    dax::Shape piece;  // at the full mesh
    int holders;       // devices holding each piece
  };
  const Case cases[] = {{P("x", "y"), "P('x', 'y')", {2, 4}, 1},
                        {P("x", dax::none), "P('x', None)", {2, 8}, 2},
                        {P(dax::axes("x", "y")), "P(('x', 'y'))", {1, 8}, 1}};
  const Host host = small_ints(64, 4);
  for (const auto& c : cases) {
    from_jax::expect_eq(dax::to_string(c.spec), std::string(c.text), "the spec's text");
    const auto x = put(host, {8, 8}, mesh, c.spec);
    from_jax::say(c.spec, ":");
    dax::visualize_sharding(x);
    expect_values(x, host, 0, std::string(c.text) + " round trip");
    if (!full) continue;
    expect_layout(x, mesh, c.spec, c.piece, c.text);
    expect_piece(x, host, c.text);
    const auto map = x.sharding().devices_indices_map(x.shape());
    int same = 0;
    for (const auto& [device, index] : map) same += index == map.at(0);
    from_jax::expect_eq(same, c.holders, std::string(c.text) + ": devices holding device 0's piece");
  }
  if (full) {  // the tuple entry: device d holds row d (x major, y minor)
    const dax::NamedSharding both(mesh, P(dax::axes("x", "y")));
    for (const auto& [device, index] : both.devices_indices_map({8, 8}))
      from_jax::expect_eq(index[0].start, int64_t(device),
                          "P(('x', 'y')): first row of device " + std::to_string(device));
  }
}

// 5 L130: jit of a dot, the batch split over 'batch' and the weight's columns over 'model'.
void jit_with_sharded_inputs() {
  from_jax::block(guide, "block 5: parallel_fn(x, w) = dot(x, w), x P('batch', None), w P(None, 'model')");
  auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"batch", "model"});
  const int64_t b = 16, f = 32, o = 8;
  const Host xh = small_ints(b * f, 5), wh = small_ints(f * o, 6);
  const auto x_sharded = put(xh, {b, f}, mesh, P("batch", dax::none));
  const auto w_sharded = put(wh, {f, o}, mesh, P(dax::none, "model"));
  auto parallel_fn = [](const Array& x, const Array& w) { return dax::matmul(x, w); };
  dax::comm_stats().reset();
  const auto result = parallel_fn(x_sharded, w_sharded);
  from_jax::say("result: ", result.sharding());
  dax::visualize_sharding(result);
  const Host want = host_matmul(xh, wh, b, f, o);
  if (full) {  // rows by 'batch' times columns by 'model': every device has what it needs
    expect_layout(result, mesh, P("batch", "model"), {4, 4}, "result");
    expect_no_communication("dot");
    expect_piece(result, want, "result");
  }
  expect_values(result, want, 0, "dot(x, w)");
}

// 6 L147: a sharding constraint inside a function, then x @ x.T.
void sharding_constraint() {
  from_jax::block(guide, "block 6: constrained_fn(x) = with_sharding_constraint(x, P('x', None)) @ x.T");
  auto [mesh, full] = from_jax::guide_mesh({8}, {"x"});
  const int64_t m = 16, k = 8;
  const Host xh = small_ints(m * k, 7);
  // The input arrives split by columns, so the constraint has something to move.
  const auto x_in = put(xh, {m, k}, mesh, P(dax::none, "x"));
  auto constrained_fn = [&mesh](const Array& x0) {
    const auto x = dax::with_sharding_constraint(x0, dax::NamedSharding(mesh, P("x", dax::none)));
    return std::pair{x, dax::matmul(x, x.T())};
  };
  dax::comm_stats().reset();
  const auto [x, gram] = constrained_fn(x_in);
  const auto moved = dax::comm_stats();
  say_moved("the constraint and the product");
  from_jax::say("x after the constraint: ", x.sharding(), "; x @ x.T: ", gram.sharding());
  if (full) {
    expect_layout(x, mesh, P("x", dax::none), {2, 8}, "constrained x");
    // Columns to rows is one all-to-all: each device keeps 2 of its new piece's 16 values and
    // receives the other 14. The product keeps x's rows, P('x', None), and gathers all of x.T:
    // the other devices' 7 pieces of 8 x 2.
    expect_layout(gram, mesh, P("x", dax::none), {2, 16}, "x @ x.T");
    const auto a2a = moved.of("all_to_all", "('x',)");
    from_jax::expect_eq(a2a.calls, int64_t(1), "all-to-alls for the constraint");
    from_jax::expect_eq(a2a.bytes, int64_t(14 * 4), "bytes of the constraint's all-to-all");
    const auto gather = moved.of("all_gather", "('x',)");
    from_jax::expect_eq(gather.calls, int64_t(1), "all-gathers for the product");
    from_jax::expect_eq(gather.bytes, int64_t(7 * 2 * 8 * 4), "bytes the product gathers");
    from_jax::expect_eq(moved.total_bytes(), a2a.bytes + gather.bytes, "bytes in all");
  }
  Host xt(size_t(k * m));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j) xt[j * m + i] = xh[i * k + j];
  expect_values(gram, host_matmul(xh, xt, m, k, m), 0, "x @ x.T");
}

// 8 L196: pjit(fn, in_shardings, out_shardings) and jit(fn, in_shardings, out_shardings) are one
// thing; in dax it is a wrapper that reshards the arguments and the result.
template <class F>
auto with_shardings(F fn, std::vector<dax::NamedSharding> in, dax::NamedSharding out) {
  return [fn, in, out](const Array& a, const Array& b) {
    return dax::reshard(fn(dax::reshard(a, in.at(0)), dax::reshard(b, in.at(1))), out);
  };
}

void pjit_and_jit() {
  from_jax::block(guide, "block 8: pjit / jit(fn, in_shardings=..., out_shardings=...)");
  auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"batch", "model"});
  const int64_t b = 16, f = 32, o = 8;
  const Host xh = small_ints(b * f, 8), wh = small_ints(f * o, 9);
  const dax::NamedSharding replicated(mesh, P());
  const auto x = put(xh, {b, f}, mesh, P()), w = put(wh, {f, o}, mesh, P());
  auto fn = [](const Array& a, const Array& c) { return dax::matmul(a, c); };
  const auto f_jit = with_shardings(
      fn, {dax::NamedSharding(mesh, P("batch", dax::none)), dax::NamedSharding(mesh, P(dax::none, "model"))},
      dax::NamedSharding(mesh, P("batch", dax::none)));
  dax::comm_stats().reset();
  const auto y = f_jit(x, w);
  from_jax::say("out: ", y.sharding());
  if (full) {
    // Replicated inputs are sliced in place; the product comes out P('batch', 'model') and the
    // out sharding gathers its columns over 'model': one piece of 4x4 from the other device.
    expect_layout(y, mesh, P("batch", dax::none), {4, 8}, "out");
    from_jax::expect_eq(dax::comm_stats().of("all_gather", "('model',)").bytes, int64_t(4 * 4 * 4),
                        "bytes the out sharding gathers over 'model'");
    from_jax::expect_eq(dax::comm_stats().total_bytes(), int64_t(4 * 4 * 4), "bytes in all");
  }
  expect_values(y, host_matmul(xh, wh, b, f, o), 0, "fn(x, w)");
}

// 9 L214: a data-parallel loss: batch split over 'data', parameters replicated.
struct Linear {
  Array w, b;
};

void data_parallel_loss() {
  from_jax::block(guide, "block 9: data_parallel_loss(params, batch), batch P('data', None), params P(None)");
  auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  const int64_t n = 32, f = 16, o = 4;
  const Host inputs = small_ints(n * f, 10), targets = small_ints(n * o, 11);
  const Host wh = small_ints(f * o, 12), bh = small_ints(o, 13);
  std::map<std::string, Array> batch{{"inputs", put(inputs, {n, f}, mesh, P())},
                                     {"targets", put(targets, {n, o}, mesh, P())}};
  Linear params{put(wh, {f, o}, mesh, P()), put(bh, {o}, mesh, P())};
  batch = dax::tree_map(
      [&](const Array& a) { return dax::device_put(a, dax::NamedSharding(mesh, P("data", dax::none))); }, batch);
  params.w = dax::device_put(params.w, dax::NamedSharding(mesh, P(dax::none)));
  params.b = dax::device_put(params.b, dax::NamedSharding(mesh, P(dax::none)));
  auto apply = [](const Linear& p, const Array& x) { return dax::matmul(x, p.w) + p.b; };
  auto loss_fn = [&](const Linear& p, const std::map<std::string, Array>& bt) {
    const auto err = apply(p, bt.at("inputs")) - bt.at("targets");
    return dax::mean(err * err);
  };
  dax::comm_stats().reset();
  const auto loss = loss_fn(params, batch);
  say_moved("the loss");
  const auto predictions = apply(params, batch.at("inputs"));
  from_jax::say("predictions: ", predictions.sharding());
  if (full) {
    expect_layout(batch.at("inputs"), mesh, P("data", dax::none), {8, 16}, "inputs");
    // The rows are split over 'data'; the matmul splits each device's rows further over the idle
    // 'model' axis (a local slice: 4 rows each), so every device computes an eighth of the
    // predictions. Each device then holds a partial sum of squares
    // and one all-reduce of that one float over both axes ends the mean: 2(n-1)/n elements,
    // rounded down to whole elements as the planner counts them, so 1 float.
    expect_layout(predictions, mesh, P(dax::axes("data", "model"), dax::none), {4, 4}, "predictions");
    const auto all_reduce = dax::comm_stats().of("all_reduce", "('data', 'model')");
    from_jax::expect_eq(all_reduce.calls, int64_t(1), "all-reduces over ('data', 'model')");
    from_jax::expect_eq(dax::comm_stats().total_calls(), int64_t(1), "collectives in all");
    from_jax::expect_eq(all_reduce.bytes, int64_t(2 * 7 * 1 / 8 * 4), "bytes of one float all-reduced over 8 devices");
  }
  const Host pred = host_matmul(inputs, wh, n, f, o);
  double sse = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < o; ++j) {
      const double e = pred[i * o + j] + bh[j] - targets[i * o + j];
      sse += e * e;
    }
  from_jax::say("loss = ", loss.to_host().at(0));
  expect_values(loss, {float(sse / double(n * o))}, 1e-4, "the mean squared error");
}

// 10 L233: a linear layer whose weight is split by output columns over 'model'.
void model_parallel_linear() {
  from_jax::block(guide, "block 10: model_parallel_linear(x, w), w P(None, 'model')");
  auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  const int64_t b = 16, f = 32, o = 64;
  const Host xh = small_ints(b * f, 14), wh = small_ints(f * o, 15);
  const auto x = put(xh, {b, f}, mesh, P());
  dax::comm_stats().reset();
  const auto w = put(wh, {f, o}, mesh, P(dax::none, "model"));
  const auto y = dax::matmul(x, w);
  from_jax::say("w: ", w.sharding(), "; x @ w: ", y.sharding());
  dax::visualize_sharding(y);
  const Host want = host_matmul(xh, wh, b, f, o);
  if (full) {
    // Each device holds half of w's columns. x is replicated, so the product also splits its rows
    // over the otherwise idle 'data' axis (a local slice of x): every device computes one eighth.
    expect_layout(w, mesh, P(dax::none, "model"), {32, 32}, "w");
    expect_layout(y, mesh, P("data", "model"), {4, 32}, "x @ w");
    expect_no_communication("device_put and dot");
    expect_piece(y, want, "x @ w");
  }
  expect_values(y, want, 0, "x @ w");
}

// 11 L247: a (x, y)-split by a y-split matrix: the contraction runs over 'y'.
void parallel_matmul_2d() {
  from_jax::block(guide, "block 11: parallel_matmul_2d(a, b), a P('x', 'y'), b P('y', None)");
  auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"x", "y"});
  const int64_t m = 16, k = 32, n = 8;
  const Host ah = small_ints(m * k, 16), bh = small_ints(k * n, 17);
  const auto a_sharded = put(ah, {m, k}, mesh, P("x", "y"));
  const auto b_sharded = put(bh, {k, n}, mesh, P("y", dax::none));
  if (full) {  // the rule's header and its cheapest candidates (the chosen one starred)
    std::istringstream lines(dax::explain_matmul(a_sharded, b_sharded));
    std::string line;
    for (int i = 0; i < 4 && std::getline(lines, line); ++i) from_jax::say(line);
  }
  dax::comm_stats().reset();
  const auto c = dax::matmul(a_sharded, b_sharded);
  from_jax::say("a @ b: ", c.sharding());
  if (full) {
    // Each device multiplies its (4, 16) block of a by the matching (16, 8) rows of b: a partial
    // sum of its 4 output rows. One all-reduce over 'y' adds the two halves: 2(n-1)/n of the
    // (4, 8) block with n = 2.
    expect_layout(c, mesh, P("x", dax::none), {4, 8}, "a @ b");
    const auto ar = dax::comm_stats().of("all_reduce", "('y',)");
    from_jax::expect_eq(ar.calls, int64_t(1), "all-reduces over 'y'");
    from_jax::expect_eq(ar.bytes, int64_t(2 * 1 * 4 * 8 * 4 / 2), "bytes of the all-reduce");
    from_jax::expect_eq(dax::comm_stats().total_bytes(), ar.bytes, "bytes in all");
  }
  expect_values(c, host_matmul(ah, bh, m, k, n), 0, "a @ b");
}

// 12 L265: the config flag is Python only; what it buys, random bits that do not depend on how
// the result is split, is how dax's generator always works. Draw at three shardings and compare.
void sharded_random() {
  from_jax::block(guide, "block 12: parallel_random(key, shape) = random.normal(key, shape)");
  auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"x", "y"});
  const dax::Shape shape{64, 64};
  auto parallel_random = [&](dax::random::Key key, const P& spec) {
    return dax::random::normal<float>(key, shape, dax::NamedSharding(mesh, spec));
  };
  dax::comm_stats().reset();
  const auto split = parallel_random(dax::random::key(0), P("x", "y"));
  const auto rows = parallel_random(dax::random::key(0), P(dax::axes("x", "y"), dax::none));
  const auto whole = parallel_random(dax::random::key(0), P());
  const auto other = parallel_random(dax::random::key(1), P("x", "y"));
  expect_no_communication("drawing");  // each device draws only its own elements
  const Host reference = whole.to_host();
  // The first draws of key(0), the same at every rank count (bits from Philox, not JAX's Threefry).
  from_jax::say("first draws: ", std::setprecision(9), reference[0], " ", reference[1], " ", reference[2], " ",
                reference[3]);
  const float first[] = {-0.0904730558f, -0.923833549f, 0.125425085f, -1.39289856f};
  for (int i = 0; i < 4; ++i)
    from_jax::expect_near(reference[i], first[i], 1e-6, "draw " + std::to_string(i) + " of key(0)");
  expect_values(split, reference, 0, "normal at P('x', 'y') against the replicated draw");
  expect_values(rows, reference, 0, "normal at P(('x', 'y'), None) against the replicated draw");
  if (full) {
    expect_piece(split, reference, "P('x', 'y')");
    expect_piece(rows, reference, "P(('x', 'y'), None)");
  }
  const Host o = other.to_host();
  int equal = 0;
  double sum = 0, squares = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    equal += o[i] == reference[i];
    sum += reference[i];
    squares += double(reference[i]) * reference[i];
  }
  const double count = double(reference.size()), mean = sum / count;
  from_jax::expect(equal < 4, "key(1) to draw other numbers than key(0)");
  // 4096 standard normals: the mean's standard error is 1/64, the variance's about 0.022.
  from_jax::expect_near(mean, 0.0, 5.0 / 64, "mean of the draw");
  from_jax::expect_near(squares / count - mean * mean, 1.0, 0.11, "variance of the draw");
}

// 13 L277: data and model parallelism on one mesh built from a reshaped device list.
void data_and_model() {
  from_jax::block(guide, "block 13: Mesh(devices.reshape(dp_size, mp_size), ('data', 'model'))");
  const int64_t dp_size = 4, mp_size = 2;
  auto [fallback, full] = from_jax::guide_mesh({dp_size, mp_size}, {"data", "model"});
  const dax::Mesh mesh =
      full ? dax::Mesh({dp_size, mp_size}, {"data", "model"}, dax::create_device_mesh({dp_size, mp_size})) : fallback;
  if (full)
    from_jax::expect(mesh == dax::make_mesh({4, 2}, {"data", "model"}),
                     "the reshaped devices to give make_mesh's mesh");
  const int64_t b = 32, f = 16, o = 8;
  const Host xh = small_ints(b * f, 18), wh = small_ints(f * o, 19);
  dax::reset_peak_memory();
  const int64_t before = dax::memory_stats().bytes_in_use;
  const auto x = put(xh, {b, f}, mesh, P("data", dax::none));
  const auto w = put(wh, {f, o}, mesh, P(dax::none, "model"));
  const int64_t held = dax::memory_stats().bytes_in_use - before;
  dax::comm_stats().reset();
  const auto y = dax::matmul(x, w);
  from_jax::say("x: ", x.sharding(), "\nw: ", w.sharding(), "\nx @ w: ", y.sharding());
  const Host want = host_matmul(xh, wh, b, f, o);
  if (full) {
    // A quarter of the batch and half of the weight on each device, and nothing moves for x @ w.
    expect_layout(x, mesh, P("data", dax::none), {8, 16}, "x");
    expect_layout(w, mesh, P(dax::none, "model"), {16, 4}, "w");
    from_jax::expect_eq(held, int64_t((b * f / dp_size + f * o / mp_size) * 4), "bytes this device holds of x and w");
    expect_layout(y, mesh, P("data", "model"), {8, 4}, "x @ w");
    expect_no_communication("x @ w");
  }
  expect_values(y, want, 0, "x @ w");
}

// 15 L314: a Flax Dense layer of 1024 features whose kernel is partitioned ('data', 'model').
struct Dense {
  Array kernel, bias;
};

Dense init_dense(const dax::Mesh& mesh, int64_t in_features, int64_t features, dax::random::Key key) {
  // lecun_normal: stddev 1/sqrt(fan_in) (Flax truncates at two deviations; dax draws plain normals).
  const float stddev = 1.0f / std::sqrt(float(in_features));
  return {dax::random::normal<float>(key, {in_features, features}, dax::NamedSharding(mesh, P("data", "model")), 0.0f,
                                     stddev),
          dax::zeros<float>({features}, dax::NamedSharding(mesh, P()))};
}

void flax_partitioned_dense() {
  from_jax::block(guide,
                  "block 15: ParallelModel: nn.Dense(1024, kernel_init=with_partitioning(..., ('data', 'model')))");
  auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  const int64_t batch = 8, in_features = 64, features = 1024;
  const int64_t before = dax::memory_stats().bytes_in_use;
  const Dense params = init_dense(mesh, in_features, features, dax::random::key(15));
  const int64_t kernel_bytes = dax::memory_stats().bytes_in_use - before - features * 4;  // less the bias
  const Host xh = small_ints(batch * in_features, 20);
  const auto x = put(xh, {batch, in_features}, mesh, P());
  dax::comm_stats().reset();
  const auto y = dax::matmul(x, params.kernel) + params.bias;
  say_moved("the layer");
  from_jax::say("kernel: ", params.kernel.sharding(), "; bias: ", params.bias.sharding(), "; y: ", y.sharding());
  dax::visualize_sharding(params.kernel);
  if (full) {
    // A (16, 512) block of the kernel per device, one eighth of it.
    expect_layout(params.kernel, mesh, P("data", "model"), {16, 512}, "kernel");
    from_jax::expect_eq(kernel_bytes, int64_t(16 * 512 * 4), "bytes of kernel on this device");
    // x is replicated, so the rule regroups the kernel instead: one all-to-all over 'data' turns
    // each device's (16, 512) block into all 64 rows of 128 columns (it keeps a quarter and
    // receives 3/4 of 64 x 128 floats), and each device computes its 128 output columns with no
    // reduction. (Splitting the contraction instead ties at the same bytes: an all-reduce of the
    // (8, 512) partial sums over 'data'; with one collective each, the earlier candidate wins.)
    expect_layout(y, mesh, P(dax::none, dax::axes("model", "data")), {8, 128}, "y");
    const auto a2a = dax::comm_stats().of("all_to_all", "('data',)");
    from_jax::expect_eq(a2a.calls, int64_t(1), "all-to-alls over 'data'");
    from_jax::expect_eq(a2a.bytes, int64_t(3 * 64 * 128 * 4 / 4), "bytes of the all-to-all");
    from_jax::expect_eq(dax::comm_stats().total_bytes(), a2a.bytes, "bytes in all");
  }
  const Host kernel = params.kernel.to_host();
  double squares = 0;
  for (float v : kernel) squares += double(v) * v;
  // 65536 draws: the sample variance is within 2% of 1/64 with room to spare.
  from_jax::expect_near(squares / double(kernel.size()) * in_features, 1.0, 0.03, "kernel variance times fan_in");
  expect_values(y, host_matmul(xh, kernel, batch, in_features, features), 1e-4, "the Dense layer's output");
}

// 16 L338: looking at an array's sharding: the picture and the sharding itself.
void inspect_sharding() {
  from_jax::block(guide, "block 16: visualize_array_sharding(array), inspect_array_sharding(array)");
  auto [mesh, full] = from_jax::guide_mesh({4, 2}, {"data", "model"});
  const Host host = small_ints(64, 21);
  const auto array = put(host, {8, 8}, mesh, P("data", "model"));
  dax::visualize_sharding(array);
  from_jax::say("sharding: ", array.sharding());  // no tracing: the sharding is there to read
  expect_values(array, host, 0, "the array");
  if (!full) return;
  from_jax::expect_eq(dax::sharding_picture(array.shape(), array.sharding()),
                      std::string("┌───────┬───────┐\n"
                                  "│       │       │\n"
                                  "│ CPU 0 │ CPU 1 │\n"
                                  "│       │       │\n"
                                  "├───────┼───────┤\n"
                                  "│       │       │\n"
                                  "│ CPU 2 │ CPU 3 │\n"
                                  "│       │       │\n"
                                  "├───────┼───────┤\n"
                                  "│       │       │\n"
                                  "│ CPU 4 │ CPU 5 │\n"
                                  "│       │       │\n"
                                  "├───────┼───────┤\n"
                                  "│       │       │\n"
                                  "│ CPU 6 │ CPU 7 │\n"
                                  "│       │       │\n"
                                  "└───────┴───────┘\n"),
                      "the picture");
  expect_layout(array, mesh, P("data", "model"), {2, 4}, "array");
  expect_piece(array, host, "array");
}

// 17 L349: the memory a device needs for its piece.
void shard_size() {
  from_jax::block(guide, "block 17: shard_size = total_size // num_devices");
  auto [mesh, full] = from_jax::guide_mesh({8}, {"x"});
  const int64_t num_devices = mesh.size();
  for (const dax::Shape& shape : {dax::Shape{1024, 256}, dax::Shape{1001}}) {
    const int64_t total_size = dax::numel(shape);
    const int64_t shard_size = total_size / num_devices;
    const int64_t before = dax::memory_stats().bytes_in_use;
    const auto x = dax::zeros<float>(shape, dax::NamedSharding(mesh, P("x")));
    const int64_t held = dax::memory_stats().bytes_in_use - before;
    from_jax::say("shape ", dax::to_string(shape), ": each device needs ", shard_size, " elements");
    from_jax::expect_eq(held, int64_t(x.local_data().size() * 4), "bytes this device holds: its piece");
    if (!full) continue;
    const int64_t largest = (shape[0] + 7) / 8 * total_size / shape[0];
    if (total_size % num_devices == 0) {
      from_jax::expect_eq(int64_t(x.local_data().size()), shard_size, "elements on this device");
    } else {
      // 1001 = 7 x 126 + 119: dax splits unevenly by ceil-sized chunks, so the formula undercounts
      // the largest piece (126 > 125); budget for ceil(total / num_devices).
      const int64_t mine = dax::Runtime::current().rank() < 7 ? 126 : 119;
      from_jax::expect_eq(int64_t(x.local_data().size()), mine, "elements on this device");
      from_jax::expect_eq(largest, int64_t(126), "the largest piece");
      from_jax::expect(largest > shard_size, "total_size // num_devices to undercount an uneven split");
    }
  }
}

// 18 L356: the same test on 1-d meshes of 1, 2, 4 and 8 devices.
void different_mesh_shapes() {
  from_jax::block(guide, "block 18: for devices in [1, 2, 4, 8]: Mesh(jax.devices()[:devices], ('x',))");
  const int rank = dax::Runtime::current().rank();
  const int64_t n = 64;
  double want = 0;
  for (int64_t i = 0; i < n; ++i) want += double(i) * i;
  for (int64_t devices : {1, 2, 4, 8}) {
    auto [mesh, full] = from_jax::guide_mesh({devices}, {"x"});
    dax::comm_stats().reset();
    const auto x = dax::arange<float>(n, dax::NamedSharding(mesh, P("x")));
    const auto total = dax::sum(x * x);  // ranks outside the mesh take part in nothing
    if (!mesh.contains(rank)) continue;
    if (full) {
      from_jax::expect_eq(int64_t(x.local_data().size()), n / devices, "elements per device");
      const auto all_reduce = dax::comm_stats().of("all_reduce", "('x',)");
      from_jax::expect_eq(all_reduce.calls, int64_t(devices > 1), "all-reduces of the partial sums");
      // 2(n-1)/n of one float, counted in whole elements as the reshard planner counts them.
      from_jax::expect_eq(all_reduce.bytes, int64_t(2 * (devices - 1) * 1 / devices * 4), "bytes of the all-reduce");
    }
    const float got = total.to_host().at(0);
    from_jax::say("mesh of ", devices, (full ? "" : " (run on one device)"), ": sum(x * x) = ", got);
    from_jax::expect_eq(double(got), want, "sum(x * x) on " + std::to_string(devices) + " devices");
  }
}

// 19 L365: which mesh axis stays inside a host. Take 2 hosts of 4 devices, ranks placed by slot
// (ranks 0-3 on host 0, 4-7 on host 1), as mpirun does by default.
void topology_aware_mesh() {
  from_jax::block(guide, "block 19: make_mesh((local_devices, hosts), ('local', 'global'))");
  const int64_t local_devices = 4, hosts = 2;
  auto host_of = [&](int device) { return device / int(local_devices); };
  // Whether every group along `axis` sits on one host.
  auto within_hosts = [&](const dax::Mesh& mesh, const std::string& axis) {
    const int a = mesh.axis_index(axis);
    for (int device : mesh.devices()) {
      auto c = mesh.coords(device);
      for (int64_t i = 0; i < mesh.axis_size(a); ++i) {
        c[a] = i;
        if (host_of(mesh.device_at(c)) != host_of(device)) return false;
      }
    }
    return true;
  };
  auto [as_written, full] = from_jax::guide_mesh({local_devices, hosts}, {"local", "global"});
  auto [host_major, full2] = from_jax::guide_mesh({hosts, local_devices}, {"global", "local"});
  from_jax::say("as written: ", as_written, "; host-major: ", host_major);
  // Summing over 'local' counts the devices of a group, whatever the order.
  auto count_local = [](const dax::Mesh& mesh) {
    return dax::shard_map([](const Array& one) { return dax::psum(one, "local"); }, mesh, {P()},
                          P())(dax::ones<float>({1}, dax::NamedSharding(mesh, P())));
  };
  dax::comm_stats().reset();
  const auto counted = count_local(host_major);
  const int64_t local_bytes = dax::comm_stats().of("all_reduce", "('local',)").bytes;
  expect_values(counted, {float(host_major.axis_size("local"))}, 0, "psum of ones over 'local'");
  expect_values(count_local(as_written), {float(as_written.axis_size("local"))}, 0, "psum of ones over 'local'");
  if (!full) return;
  // Rank order is row-major, so the last axis is the one whose groups are consecutive ranks. As
  // written, 'local' is the first axis and its groups {0, 2, 4, 6}, {1, 3, 5, 7} span both hosts;
  // 'global' pairs neighbours on one host. Hosts first keeps each 'local' group on its host.
  from_jax::expect(!within_hosts(as_written, "local"), "(local, hosts) to put 'local' groups across hosts");
  from_jax::expect(within_hosts(as_written, "global"), "(local, hosts) to keep 'global' pairs on one host");
  from_jax::expect(within_hosts(host_major, "local"), "(hosts, local) to keep each 'local' group on one host");
  from_jax::expect(!within_hosts(host_major, "global"), "(hosts, local) to put 'global' pairs across hosts");
  // All-reduces count 2(k-1)/k of the elements, in whole elements (docs/performance.md): 2 * 3 / 4 -> 1 float.
  from_jax::expect_eq(local_bytes, int64_t(2 * 3 * 1 / 4 * 4), "bytes of the psum over 'local' (4 devices, one float)");
}

// 20 L373: the picture of a sharded array.
void visualize() {
  from_jax::block(guide, "block 20: visualize_array_sharding(sharded_array)");
  auto [mesh, full] = from_jax::guide_mesh({8}, {"x"});
  const Host host = small_ints(32, 22);
  const auto sharded_array = put(host, {32}, mesh, P("x"));
  dax::visualize_sharding(sharded_array);
  expect_values(sharded_array, host, 0, "the array");
  if (!full) return;
  std::string picture = "┌", middle = "│", bottom = "└";
  for (int d = 0; d < 8; ++d) {
    const std::string rule = "───────";  // " CPU d " is 7 wide
    picture += rule + (d < 7 ? "┬" : "┐\n");
    middle += " CPU " + std::to_string(d) + " │";
    bottom += rule + (d < 7 ? "┴" : "┘\n");
  }
  picture += middle + "\n" + bottom;
  from_jax::expect_eq(dax::sharding_picture(sharded_array.shape(), sharded_array.sharding()), picture, "the picture");
  expect_piece(sharded_array, host, "sharded_array");
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  basic_example();            // 1
  named_sharding_pair();      // 2
  two_d_mesh();               // 3
  spec_examples();            // 4
  jit_with_sharded_inputs();  // 5
  sharding_constraint();      // 6
  // 7 (shard_map manual_matmul) is in spmd_shard_map.cpp
  pjit_and_jit();           // 8
  data_parallel_loss();     // 9
  model_parallel_linear();  // 10
  parallel_matmul_2d();     // 11
  sharded_random();         // 12
  data_and_model();         // 13
  // 14 (shard_map overlapping a gather with local work) is in spmd_shard_map.cpp
  flax_partitioned_dense();  // 15
  inspect_sharding();        // 16
  shard_size();              // 17
  different_mesh_shapes();   // 18
  topology_aware_mesh();     // 19
  visualize();               // 20
  return from_jax::finish("spmd_guide", 18);
}
