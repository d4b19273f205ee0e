// Slicing a split dimension (issue 21): the result keeps the input's spec, its values equal a plain
// loop on the global array, and each device receives exactly the kept elements of its new piece it
// did not hold (counted element by element here, and what explain_slice reports), on every mesh
// that fits, with uneven lengths, windows at and across piece boundaries, empty and strided
// windows, partial sums; the gradient through a slice against central differences, the same under
// two shardings, its bytes the reverse exchange's; each window's exchange built once and reused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <random>
#include <string>
#include <vector>

#include "../common/simulate.hpp"
#include "gradient_check.hpp"
#include "helpers.hpp"

using dax::Box;
using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::Pick;

namespace {

struct Window {
  std::vector<int64_t> start, stop, step;  // normalized: 0 <= start <= stop <= n, step >= 1
};

Shape result_shape(const Shape& shape, const Window& w) {
  Shape out(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    out[d] = w.stop[d] > w.start[d] ? (w.stop[d] - w.start[d] + w.step[d] - 1) / w.step[d] : 0;
  return out;
}

/// The input index of the result's element `j` (one index per dimension).
std::vector<int64_t> source_of(const std::vector<int64_t>& j, const Window& w) {
  std::vector<int64_t> i(j.size());
  for (size_t d = 0; d < j.size(); ++d) i[d] = w.start[d] + j[d] * w.step[d];
  return i;
}

int64_t flat_index(const Shape& shape, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

bool inside(const Box& box, const std::vector<int64_t>& idx) {
  for (size_t d = 0; d < box.size(); ++d)
    if (idx[d] < box[d].start || idx[d] >= box[d].stop) return false;
  return true;
}

/// The slice of a global row-major array, by a plain loop over the result's elements.
template <class T>
std::vector<T> reference_slice(const std::vector<T>& global, const Shape& shape, const Window& w) {
  const Shape out = result_shape(shape, w);
  std::vector<T> v;
  dax::test::for_each_index(dax::full_box(out), [&](const std::vector<int64_t>& j) {
    v.push_back(global[flat_index(shape, source_of(j, w))]);
  });
  return v;
}

/// What this device must receive in the slice: the elements of its new piece whose input element
/// it does not hold (owner before != owner after).
int64_t forward_lower_bound(const Shape& shape, const Window& w, const NamedSharding& s, int device) {
  const Box before = s.device_indices(device, shape), after = s.device_indices(device, result_shape(shape, w));
  int64_t n = 0;
  dax::test::for_each_index(after, [&](const std::vector<int64_t>& j) { n += !inside(before, source_of(j, w)); });
  return n;
}

/// What this device must receive in the slice's cotangent: the elements of its input piece inside
/// the window whose result element it does not hold.
int64_t backward_lower_bound(const Shape& shape, const Window& w, const NamedSharding& s, int device) {
  const Shape out = result_shape(shape, w);
  const Box before = s.device_indices(device, out), after = s.device_indices(device, shape);
  int64_t n = 0;
  dax::test::for_each_index(dax::full_box(out), [&](const std::vector<int64_t>& j) {
    n += inside(after, source_of(j, w)) && !inside(before, j);
  });
  return n;
}

/// Windows of a dimension of length n split k ways: whole, one piece, across a boundary, at a
/// boundary, off both ends, empty in the middle and at the end, strided.
std::vector<Window> windows_of(int64_t n, int64_t k) {
  const int64_t c = std::max<int64_t>(1, (n + k - 1) / k);
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, n); };
  std::vector<std::array<int64_t, 3>> raw{{0, n, 1},
                                          {c, 2 * c, 1},
                                          {c - 1, c + 1, 1},
                                          {c, n, 1},
                                          {1, n - 1, 1},
                                          {3, 13, 1},
                                          {n / 2, n / 2, 1},
                                          {n, n, 1},
                                          {0, c - 1, 1},
                                          {2 * c - 1, 3 * c + 1, 1},
                                          {1, n, 2},
                                          {0, n, 3},
                                          {c - 1, n, c}};
  std::vector<Window> out;
  for (const auto& r : raw) {
    const int64_t a = clamp(r[0]), b = std::max(a, clamp(r[1]));
    out.push_back({{a}, {b}, {std::max<int64_t>(1, r[2])}});
  }
  return out;
}

/// Runs one slice of a value given as partial sums (a plain value when `s` is not unreduced) and
/// checks the result's sharding, this device's piece, the gathered value and the bytes.
void check_slice(const Shape& shape, const NamedSharding& s, const Window& w, std::mt19937& rng, bool gather) {
  const auto partials = dax::test::random_partials(shape, s, rng);
  const int rank = dax::test::world_rank();
  const Mesh& mesh = s.mesh();
  std::string text = dax::to_string(shape) + " " + dax::to_string(s) + " window";
  // Appended piece by piece: GCC 12 at -O3 sees a false overflow in `" " + std::to_string(...)`
  // (-Wstringop-overflow) depending on what else shares the unity unit.
  for (size_t d = 0; d < shape.size(); ++d)
    text.append(" ").append(std::to_string(w.start[d])).append(":").append(std::to_string(w.stop[d])).append(":")
        .append(std::to_string(w.step[d]));
  INFO(text);
  std::vector<float> mine;
  if (mesh.contains(rank)) {
    const std::vector<double> own = dax::test::pieces_of_partials(shape, partials, s).at(rank);
    mine.assign(own.begin(), own.end());
  }
  const auto x = dax::from_local(mine, shape, s);
  // explain_slice names the most any device receives (pure: every rank may ask).
  int64_t most = 0;
  for (int device : mesh.devices()) most = std::max(most, forward_lower_bound(shape, w, s, device));
  const std::string explained = dax::explain_slice(x, w.start, w.stop, w.step);
  INFO(explained);
  CHECK(explained.find(most ? std::to_string(most * int64_t(sizeof(float))) + " bytes/device" : "no communication") !=
        std::string::npos);
  dax::comm_stats().reset();
  const auto y = dax::slice(x, w.start, w.stop, w.step);
  const int64_t bytes = dax::comm_stats().total_bytes();
  const Shape out = result_shape(shape, w);
  REQUIRE(y.shape() == out);
  CHECK(y.sharding() == s);
  if (!mesh.contains(rank)) {
    CHECK_FALSE(y.is_addressable());
    CHECK(bytes == 0);
    return;
  }
  // This device's piece: the slice of its own partial sum, laid out by the same spec.
  std::vector<int64_t> key;
  for (int a : s.unreduced_axes()) key.push_back(mesh.coords(rank)[a]);
  const std::vector<double> own_partial = partials.arrays.at(key);
  const auto want_all = reference_slice(std::vector<float>(own_partial.begin(), own_partial.end()), shape, w);
  CHECK(y.local_to_host() == dax::test::slice_of(want_all, out, s.device_indices(rank, out)));
  CHECK(y.local_index() == s.device_indices(rank, out));
  CHECK(bytes == forward_lower_bound(shape, w, s, rank) * int64_t(sizeof(float)));
  CHECK(dax::comm_stats().of("all_gather").calls == 0);
  if (gather) {
    const auto total = partials.total();
    CHECK(y.to_host() == reference_slice(std::vector<float>(total.begin(), total.end()), shape, w));
  }
}

}  // namespace

TEST_CASE("slicing a split dimension keeps the spec and moves only the kept rows", "[ops][slice]") {
  std::mt19937 rng(2101);
  Pick pick(2102);
  for (const Mesh& mesh : dax::test::meshes_that_fit()) {
    for (const NamedSharding& s : dax::test::all_shardings(mesh, 1, false)) {
      for (int64_t n : {13, 16, 5}) {
        const auto windows = windows_of(n, s.num_pieces(0));
        for (size_t i = 0; i < windows.size(); ++i) check_slice({n}, s, windows[i], rng, pick(4) == 0);
      }
    }
  }
}

TEST_CASE("2-D slices on 2-D meshes, either dimension split, partial sums kept", "[ops][slice]") {
  std::mt19937 rng(2103);
  Pick pick(2104);
  for (const Mesh& mesh : dax::test::meshes_that_fit()) {
    const auto shardings = dax::test::all_shardings(mesh, 2, true);
    for (const Shape& shape : {Shape{7, 5}, Shape{16, 4}, Shape{9, 10}}) {
      for (int trial = 0; trial < 6; ++trial) {
        const NamedSharding& s = shardings[pick(shardings.size())];
        const auto rows = windows_of(shape[0], s.num_pieces(0)), cols = windows_of(shape[1], s.num_pieces(1));
        const Window& r = rows[pick(rows.size())];
        const Window& c = cols[pick(cols.size())];
        check_slice(shape, s, {{r.start[0], c.start[0]}, {r.stop[0], c.stop[0]}, {r.step[0], c.step[0]}}, rng,
                    trial % 2 == 0);
      }
    }
  }
  // Every sharding of a 2-D mesh, sliced on both dimensions across piece boundaries.
  if (dax::test::world_size() >= 4) {
    const Mesh mesh({2, 2}, {"x", "y"});
    for (const NamedSharding& s : dax::test::all_shardings(mesh, 2, true))
      for (const Window& w : {Window{{1, 2}, {6, 9}, {1, 1}}, Window{{3, 0}, {4, 10}, {1, 3}},
                              Window{{0, 5}, {9, 5}, {1, 1}}, Window{{4, 4}, {9, 6}, {2, 1}}})
        check_slice({9, 10}, s, w, rng, true);
  }
}

TEST_CASE("rows 3:13 of a (16, 4) float array split 4 ways: the kept rows, not the gathered dimension",
          "[ops][slice]") {
  if (dax::test::world_size() < 4) return;
  const Mesh mesh({4}, {"x"});
  const NamedSharding rows(mesh, P("x"));
  std::vector<float> h(64);
  for (size_t i = 0; i < h.size(); ++i) h[i] = float(i);
  const auto x = dax::device_put(h, {16, 4}, rows);
  dax::comm_stats().reset();
  const auto y = dax::slice(x, {3}, {13});
  const int64_t bytes = dax::comm_stats().total_bytes();
  if (!mesh.contains(dax::test::world_rank())) return;
  CHECK(y.sharding() == rows);
  // New pieces of 10 rows: 0:3, 3:6, 6:9, 9:10, i.e. input rows 3:6, 6:9, 9:12, 12:13. Device 0
  // holds rows 0:4 (receives 4, 5), device 1 rows 4:8 (receives 8), devices 2 and 3 hold theirs.
  // Gathering the dimension first received 12 rows (192 B) on every device.
  const int64_t want[] = {2 * 16, 16, 0, 0};
  CHECK(bytes == want[dax::test::world_rank()]);
  CHECK(dax::comm_stats().of("all_to_all", "('x',)").bytes == want[dax::test::world_rank()]);
  CHECK(y.to_host() == std::vector<float>(h.begin() + 12, h.begin() + 52));
  CHECK(dax::explain_slice(x, {3}, {13}) ==
        "slice (16, 4) P('x') [3:13, 0:4] -> (10, 4) P('x'): all_to_all over ('x',): 32 bytes/device (the most one "
        "device receives: its lower bound)\n");
  CHECK(dax::explain_slice(x, {0}, {16}, {4}) ==
        "slice (16, 4) P('x') [0:13:4, 0:4] -> (4, 4) P('x'): no communication (each device holds its new piece)\n");
}

TEST_CASE("a slice's exchange is built once per window and reused, its cotangent's too", "[ops][slice]") {
  const Mesh mesh({dax::test::world_size()}, {"x"});
  const NamedSharding rows(mesh, P("x"));
  std::vector<float> h(37 * 3);
  for (size_t i = 0; i < h.size(); ++i) h[i] = float(i);
  const auto x = dax::device_put(h, {37, 3}, rows);
  auto& steps = dax::detail::window_steps();
  const size_t before = steps.size();
  dax::comm_stats().reset();
  const auto y = dax::slice(x, {2}, {35});
  const int64_t bytes = dax::comm_stats().total_bytes();
  CHECK(steps.size() == before + 1);
  for (int i = 0; i < 3; ++i) {
    dax::comm_stats().reset();
    const auto again = dax::slice(x, {2}, {35});
    CHECK(dax::comm_stats().total_bytes() == bytes);
    CHECK(again.local_to_host() == y.local_to_host());
  }
  CHECK(steps.size() == before + 1);
  CHECK(y.to_host() == std::vector<float>(h.begin() + 6, h.begin() + 105));
  // The cotangent has a step of its own, also built once; its piece is zeros outside the window
  // every time, though its buffers come back from the allocator as they were left.
  std::vector<float> padded(h.size(), 0.0f);
  std::copy(h.begin() + 6, h.begin() + 105, padded.begin() + 6);
  for (int i = 0; i < 3; ++i) CHECK(dax::detail::pad_into(y, {37, 3}, {2, 0}, rows).to_host() == padded);
  CHECK(steps.size() == before + 2);
  (void)dax::slice(x, {3}, {35});
  CHECK(steps.size() == before + 3);
}

namespace {

using dax::test::Params;

/// sum(f(slice(x)) * w) for fixed weights laid out like the slice.
dax::test::Loss sliced_loss(Window w, unsigned seed) {
  return [w, seed](const Params& p) {
    const DistArray<double> y = dax::slice(p[0], w.start, w.stop);
    std::mt19937 rng(seed);
    const auto weights = dax::device_put(dax::test::uniform(y.size(), rng), y.shape(),
                                         dax::detail::with_unreduced_axes(y.sharding(), y.ndim(), {}));
    return dax::sum(dax::sin(y) * weights) + dax::sum(y * y) * 0.25;
  };
}

}  // namespace

TEST_CASE("the gradient through a slice: finite differences, two shardings, the reverse exchange's bytes",
          "[ops][slice][autodiff]") {
  Pick pick(2105);
  std::mt19937 rng(2106);
  const auto meshes = dax::test::meshes_that_fit();
  const std::vector<std::pair<Shape, Window>> cases{
      {{13}, {{3}, {13}, {1}}},       {{16}, {{5}, {11}, {1}}},          {{7, 5}, {{1, 0}, {5, 2}, {1, 1}}},
      {{9, 6}, {{2, 1}, {9, 6}, {1, 1}}}, {{9, 6}, {{4, 0}, {4, 6}, {1, 1}}}, {{11, 3}, {{0, 1}, {10, 3}, {1, 1}}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    // Named references, not a structured binding: clang before 16 cannot capture bindings in lambdas.
    const auto& shape = cases[i].first;
    const auto& w = cases[i].second;
    for (int trial = 0; trial < 4; ++trial) {
      const Mesh& mesh = meshes[pick(meshes.size())];
      const auto shardings = dax::test::all_shardings(mesh, shape.size(), false);
      const NamedSharding& a = shardings[pick(shardings.size())];
      const NamedSharding& b = shardings[pick(shardings.size())];
      INFO(dax::to_string(shape) << " " << dax::to_string(a) << " and " << dax::to_string(b));
      const auto values = dax::test::uniform(dax::numel(shape), rng);
      const dax::test::Loss loss = sliced_loss(w, 77 + unsigned(i));
      const auto ga = dax::test::check_against_differences(loss, {values}, {shape}, {a}, rng);
      // The same gradient under another sharding; the slice and its cotangent each move their
      // lower bound (no other op here moves elements all-to-all).
      const auto x = dax::device_put(values, shape, b);
      dax::comm_stats().reset();
      const auto gb = dax::grad(loss)(Params{x});
      const int rank = dax::test::world_rank();
      if (!mesh.contains(rank)) continue;
      CHECK(gb[0].sharding() == b);
      const int64_t moved = dax::comm_stats().of("all_to_all").bytes;
      CHECK(moved == (forward_lower_bound(shape, w, b, rank) + backward_lower_bound(shape, w, b, rank)) *
                         int64_t(sizeof(double)));
      CHECK(dax::comm_stats().of("all_gather").calls == 0);
      const auto hb = gb[0].to_host();
      REQUIRE(hb.size() == ga[0].size());
      for (size_t e = 0; e < hb.size(); ++e) CHECK(hb[e] == Approx(ga[0][e]).epsilon(1e-12).margin(1e-12));
      // Outside the window the gradient is exactly zero.
      dax::test::for_each_index(dax::full_box(shape), [&](const std::vector<int64_t>& idx) {
        bool in = true;
        for (size_t d = 0; d < idx.size(); ++d) in = in && idx[d] >= w.start[d] && idx[d] < w.stop[d];
        if (!in) CHECK(hb[flat_index(shape, idx)] == 0.0);
      });
    }
  }
}

TEST_CASE("a slice's cotangent arriving in another layout lands in the input's", "[ops][slice][autodiff]") {
  std::mt19937 rng(2107);
  for (const Mesh& mesh : dax::test::meshes_that_fit()) {
    const Shape shape{11, 4}, small{6, 4};
    const std::vector<int64_t> lo{3, 0};
    const auto shardings = dax::test::all_shardings(mesh, 2, true);
    for (size_t i = 0; i < shardings.size(); i += 3) {
      const NamedSharding& from = shardings[i];                          // the cotangent's layout
      const NamedSharding& to = shardings[(i * 7 + 1) % shardings.size()];  // the slice input's
      INFO(dax::to_string(from) << " into " << dax::to_string(to));
      const auto partials = dax::test::random_partials(small, from, rng);
      const int rank = dax::test::world_rank();
      std::vector<double> mine;
      if (mesh.contains(rank)) mine = dax::test::pieces_of_partials(small, partials, from).at(rank);
      const auto g = dax::from_local(mine, small, from);
      const auto padded = dax::detail::pad_into(g, shape, lo, to);
      if (!mesh.contains(rank)) continue;
      // x's splits; g's partial sums kept except over an axis that splits x.
      for (size_t d = 0; d < 2; ++d) CHECK(padded.sharding().dim_axes(d) == to.dim_axes(d));
      for (int a : padded.sharding().unreduced_axes()) CHECK(from.is_unreduced_over(a));
      const auto total = partials.total();
      std::vector<double> want(dax::numel(shape), 0.0);
      for (int64_t r = 0; r < small[0]; ++r)
        for (int64_t c = 0; c < small[1]; ++c) want[(r + lo[0]) * shape[1] + c] = total[r * small[1] + c];
      CHECK(padded.to_host() == want);
    }
  }
}
