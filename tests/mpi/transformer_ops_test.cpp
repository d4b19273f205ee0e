// The ops a transformer needs beyond the basic ones: comparisons with scalars, take (embedding
// lookup, vocab-parallel when the table's rows are split), one_hot (depth split with no
// communication), einsum (mapped onto the batched matmul), and the erf-form gelu and silu. Values
// against host loops on random uneven shapes and random shardings at every rank count; gradients
// against central finite differences in double; the bytes the sharded cases move.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "../common/ulp.hpp"
#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::host;
using dax::test::Pick;
using dax::test::random_mesh;
using dax::test::random_sharding;

namespace {

using Params = std::vector<DistArray<double>>;
using Loss = std::function<DistArray<double>(const Params&)>;

std::vector<double> uniform(int64_t n, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

template <class I>
std::vector<I> random_ids(int64_t n, int64_t lo, int64_t hi, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> dist(lo, hi - 1);
  std::vector<I> v(n);
  for (auto& x : v) x = static_cast<I>(dist(rng));
  return v;
}

Shape random_shape(std::mt19937& rng, size_t rank, int64_t lo = 1, int64_t hi = 7) {
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  Shape s(rank);
  for (auto& d : s) d = dist(rng);
  return s;
}

Params put_all(const std::vector<std::vector<double>>& values, const std::vector<Shape>& shapes,
               const std::vector<NamedSharding>& shardings) {
  Params p;
  for (size_t i = 0; i < values.size(); ++i) p.push_back(dax::device_put(values[i], shapes[i], shardings[i]));
  return p;
}

double scalar(const DistArray<double>& x) { return x.is_addressable() ? x.to_host()[0] : 0.0; }

/// sum(f(params) * w), w fixed by `seed` and laid out like f's result.
Loss contracted(std::function<DistArray<double>(const Params&)> f, unsigned seed) {
  return [f, seed](const Params& p) {
    const DistArray<double> y = f(p);
    std::mt19937 rng(seed);
    const auto w = dax::device_put(uniform(y.size(), rng), y.shape(),
                                   dax::detail::with_unreduced_axes(y.sharding(), y.ndim(), {}));
    return dax::sum(y * w);
  };
}

/// The gradient of `loss` against central differences along three random directions; each
/// gradient must come back in its parameter's sharding.
void check_gradient(const Loss& loss, const std::vector<std::vector<double>>& values, const std::vector<Shape>& shapes,
                    const std::vector<NamedSharding>& shardings, std::mt19937& rng) {
  const Params params = put_all(values, shapes, shardings);
  auto [value, grads] = dax::value_and_grad(loss)(params);
  const bool member = params[0].is_addressable();
  std::vector<std::vector<double>> g;
  for (size_t i = 0; i < grads.size(); ++i) {
    CHECK(grads[i].sharding() == params[i].sharding());
    g.push_back(member ? grads[i].to_host() : std::vector<double>(values[i].size(), 0.0));
  }
  const double eps = 1e-6;
  for (int direction = 0; direction < 3; ++direction) {
    std::vector<std::vector<double>> plus, minus;
    double analytic = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const auto v = uniform(values[i].size(), rng);
      plus.push_back(values[i]);
      minus.push_back(values[i]);
      for (size_t k = 0; k < values[i].size(); ++k) {
        plus[i][k] += eps * v[k];
        minus[i][k] -= eps * v[k];
        analytic += g[i][k] * v[k];
      }
    }
    const double numeric =
        (scalar(loss(put_all(plus, shapes, shardings))) - scalar(loss(put_all(minus, shapes, shardings)))) / (2 * eps);
    if (member) CHECK(analytic == Approx(numeric).epsilon(1e-6).margin(1e-7));
  }
}

std::string comm_text() {
  std::string out;
  for (const auto& [key, c] : dax::comm_stats().entries())
    out += key.first + " " + key.second + ": " + std::to_string(c.calls) + " calls, " + std::to_string(c.bytes) + " B; ";
  return out;
}

/// jnp.take on the host: table's dimension `axis` replaced by ids' shape.
template <class T, class I>
std::vector<T> take_reference(const std::vector<T>& table, const Shape& ts, const std::vector<I>& ids, int axis) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= ts[d];
  for (size_t d = axis + 1; d < ts.size(); ++d) inner *= ts[d];
  const int64_t rows = ts[axis];
  std::vector<T> out;
  for (int64_t o = 0; o < outer; ++o)
    for (I id : ids)
      for (int64_t i = 0; i < inner; ++i)
        out.push_back(id >= 0 && id < rows ? table[(o * rows + id) * inner + i] : T(0));
  return out;
}

/// einsum on the host: a loop over every assignment of the labels.
std::vector<double> einsum_reference(const std::string& spec, const std::vector<double>& a, const Shape& as,
                                     const std::vector<double>& b, const Shape& bs, Shape& out_shape) {
  const size_t comma = spec.find(','), arrow = spec.find("->");
  const std::string la = spec.substr(0, comma), lb = spec.substr(comma + 1, arrow - comma - 1),
                    lo = spec.substr(arrow + 2);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < la.size(); ++i) size[la[i]] = as[i];
  for (size_t i = 0; i < lb.size(); ++i) size[lb[i]] = bs[i];
  std::string labels;
  for (const auto& [c, n] : size) labels += c;
  out_shape.clear();
  for (char c : lo) out_shape.push_back(size[c]);
  std::vector<double> out(dax::numel(out_shape), 0.0);
  std::map<char, int64_t> at;
  auto flat = [&](const std::string& l) {
    int64_t f = 0;
    for (char c : l) f = f * size[c] + at[c];
    return f;
  };
  std::function<void(size_t)> loop = [&](size_t k) {
    if (k == labels.size()) {
      out[flat(lo)] += a[flat(la)] * b[flat(lb)];
      return;
    }
    for (at[labels[k]] = 0; at[labels[k]] < size[labels[k]]; ++at[labels[k]]) loop(k + 1);
  };
  loop(0);
  return out;
}

}  // namespace

TEST_CASE("comparisons with scalars, both operand orders, on random shardings", "[ops][transformer]") {
  Pick pick(31);
  std::mt19937 rng(31);
  for (int trial = 0; trial < 6; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape shape = random_shape(rng, 1 + trial % 3);
    const NamedSharding s = random_sharding(pick, mesh, shape.size());
    INFO(dax::to_string(shape) << " " << dax::to_string(s));
    const auto fv = dax::test::random_values<float>(dax::numel(shape), rng);
    const auto iv = dax::test::random_values<int32_t>(dax::numel(shape), rng);
    const auto x = dax::device_put(fv, shape, s);
    const auto n = dax::device_put(iv, shape, s);
    const float c = static_cast<float>(fv[trial % fv.size()]);  // a value the array holds: == is tested on ties
    auto check = [&](const DistArray<bool>& got, auto want) {
      CHECK(got.shape() == shape);
      CHECK(got.sharding() == s);  // elementwise with a scalar keeps the layout: no communication
      const auto h = host(got);
      if (!x.is_addressable()) return;
      for (size_t i = 0; i < h.size(); ++i) CHECK(h[i] == want(i));
    };
    dax::comm_stats().reset();
    check(x > c, [&](size_t i) { return fv[i] > c; });
    check(x < c, [&](size_t i) { return fv[i] < c; });
    check(x >= c, [&](size_t i) { return fv[i] >= c; });
    check(x <= c, [&](size_t i) { return fv[i] <= c; });
    check(x == c, [&](size_t i) { return fv[i] == c; });
    check(x != c, [&](size_t i) { return fv[i] != c; });
    check(c > x, [&](size_t i) { return c > fv[i]; });
    check(c < x, [&](size_t i) { return c < fv[i]; });
    check(c >= x, [&](size_t i) { return c >= fv[i]; });
    check(c <= x, [&](size_t i) { return c <= fv[i]; });
    check(c == x, [&](size_t i) { return c == fv[i]; });
    check(c != x, [&](size_t i) { return c != fv[i]; });
    check(n > 0, [&](size_t i) { return iv[i] > 0; });
    check(3 <= n, [&](size_t i) { return 3 <= iv[i]; });
    check(dax::greater_equal(n, 7), [&](size_t i) { return iv[i] >= 7; });
    check(dax::less(2.5, x), [&](size_t i) { return 2.5f < fv[i]; });
  }
  // Inside a gradient a comparison is a constant mask: where(x > 0, x, 0.1 x) is leaky relu.
  const Mesh mesh({dax::test::world_size()}, {"x"});
  const std::vector<double> v{-1.5, 0.25, 2.0, -0.5, 3.0, -2.0, 0.75};
  const auto x = dax::device_put(v, {7}, NamedSharding(mesh, P("x")));
  const auto g = host(dax::grad([](const DistArray<double>& a) { return dax::sum(dax::where(a > 0.0, a, a * 0.1)); })(x));
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == (v[i] > 0 ? 1.0 : 0.1));
}

TEST_CASE("gelu_erf and silu: values within the ULP table, gradients by finite differences", "[ops][transformer]") {
  Pick pick(5);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 4; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape shape = random_shape(rng, 2, 3, 9);
    const NamedSharding s = random_sharding(pick, mesh, 2);
    INFO(dax::to_string(shape) << " " << dax::to_string(s));
    for (bool as_double : {false, true}) {
      const auto v = uniform(dax::numel(shape), rng, -9.0, 9.0);
      auto run = [&]<class T>(T) {
        const std::vector<T> in(v.begin(), v.end());
        const auto x = dax::device_put(in, shape, s);
        const auto ge = host(dax::gelu_erf(x)), gf = host(dax::gelu(x, false)), gt = host(dax::gelu(x, true)),
                   si = host(dax::silu(x));
        if (!x.is_addressable()) return;
        std::vector<T> want_ge, want_si, want_gt;
        for (T t : in) {
          want_ge.push_back(T(0.5) * t * (T(1) + std::erf(t / std::sqrt(T(2)))));
          want_si.push_back(t / (T(1) + std::exp(-t)));
        }
        CHECK(dax::test::ulp_mismatch(ge, want_ge, "gelu_erf", 1, in) == "");
        CHECK(dax::test::ulp_mismatch(si, want_si, "silu") == "");
        CHECK(gf == ge);
        CHECK(gt == host(dax::gelu(x)));
      };
      if (as_double) run(double{});
      else run(float{});
    }
    for (auto f : {+[](const DistArray<double>& x) { return dax::gelu_erf(x); },
                   +[](const DistArray<double>& x) { return dax::silu(x); }}) {
      check_gradient(contracted([f](const Params& p) { return f(p[0] * 4.0); }, 17 + trial),
                     {uniform(dax::numel(shape), rng)}, {shape}, {s}, rng);
    }
  }
}

TEST_CASE("take: values against the host on random shardings, axes and id shapes", "[ops][transformer]") {
  Pick pick(11);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 24; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape ts = random_shape(rng, 1 + trial % 3, 1, 9);
    const int axis = static_cast<int>(pick(ts.size()));
    const Shape is = random_shape(rng, trial % 3, 1, 6);
    const NamedSharding tsh = random_sharding(pick, mesh, ts.size()), ish = random_sharding(pick, mesh, is.size());
    INFO("table " << dax::to_string(ts) << " " << dax::to_string(tsh) << " axis " << axis << ", ids "
                  << dax::to_string(is) << " " << dax::to_string(ish));
    const auto tv = dax::test::random_values<float>(dax::numel(ts), rng);
    // Mostly valid ids, some outside the table (they read zeros).
    const auto iv = random_ids<int32_t>(dax::numel(is), trial % 4 == 0 ? -2 : 0, ts[axis] + (trial % 4 == 0 ? 2 : 0), rng);
    const auto table = dax::device_put(tv, ts, tsh);
    const auto ids = dax::device_put(iv, is, ish);
    const auto got = dax::take(table, ids, axis);
    Shape want_shape(ts.begin(), ts.begin() + axis);
    want_shape.insert(want_shape.end(), is.begin(), is.end());
    want_shape.insert(want_shape.end(), ts.begin() + axis + 1, ts.end());
    CHECK(got.shape() == want_shape);
    CHECK_FALSE(got.sharding().is_unreduced());
    // The table's other dimensions keep their splits.
    for (int d = 0; d < static_cast<int>(ts.size()); ++d)
      if (d != axis) CHECK(got.sharding().dim_axes(d < axis ? d : d - 1 + is.size()) == tsh.dim_axes(d));
    const auto h = host(got);
    if (table.is_addressable()) CHECK(h == take_reference(tv, ts, iv, axis));
    // int64 ids and a negative axis give the same.
    const auto ids64 = dax::device_put(std::vector<int64_t>(iv.begin(), iv.end()), is, ish);
    CHECK(host(dax::take(table, ids64, axis - static_cast<int>(ts.size()))) == h);
  }
}

TEST_CASE("take: gradients (scatter-add) by finite differences", "[ops][transformer][autodiff]") {
  Pick pick(12);
  std::mt19937 rng(12);
  for (int trial = 0; trial < 10; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape ts = random_shape(rng, 1 + trial % 3, 2, 7);
    const int axis = static_cast<int>(pick(ts.size()));
    const Shape is = random_shape(rng, 1 + trial % 2, 2, 6);
    const NamedSharding tsh = random_sharding(pick, mesh, ts.size()), ish = random_sharding(pick, mesh, is.size());
    INFO("table " << dax::to_string(ts) << " " << dax::to_string(tsh) << " axis " << axis << ", ids "
                  << dax::to_string(is) << " " << dax::to_string(ish));
    const auto ids = dax::device_put(random_ids<int32_t>(dax::numel(is), 0, ts[axis], rng), is, ish);  // repeats
    check_gradient(contracted([&](const Params& p) { return dax::take(p[0], ids, axis); }, 40 + trial),
                   {uniform(dax::numel(ts), rng)}, {ts}, {tsh}, rng);
  }
}

TEST_CASE("take with the vocabulary split: a masked local lookup and one all-reduce, never a gather",
          "[ops][transformer][comm]") {
  const int n = dax::test::world_size();
  if (n < 2 || n % 2 != 0) return;
  const int m = 2, d = n / 2;  // (data, model) mesh
  const Mesh mesh({d, m}, {"data", "model"});
  std::mt19937 rng(13);
  const int64_t vocab = 11, width = 6, batch = 2 * d, seq = 5;  // an uneven vocabulary split
  const auto tv = uniform(vocab * width, rng);
  const auto table = dax::device_put(tv, {vocab, width}, NamedSharding(mesh, P("model")));
  const auto iv = random_ids<int32_t>(batch * seq, 0, vocab, rng);
  const auto ids = dax::device_put(iv, {batch, seq}, NamedSharding(mesh, P("data")));
  dax::comm_stats().reset();
  const auto e = dax::take(table, ids);
  INFO(comm_text());
  CHECK(e.sharding() == NamedSharding(mesh, P("data")));
  // One all-reduce over the model axis of this device's (batch / d, seq, width) rows; the ring
  // counts 2(m-1)/m of it.
  const int64_t local = batch / d * seq * width;
  CHECK(dax::comm_stats().total_calls() == 1);
  CHECK(dax::comm_stats().of("all_reduce").calls == 1);
  CHECK(dax::comm_stats().total_bytes() == 2 * (m - 1) * local / m * int64_t(sizeof(double)));
  CHECK(host(e) == take_reference(tv, {vocab, width}, iv, 0));
  // Backward: the scatter-add is local; the table's gradient is reduced once over the data axis
  // (the ids are split there), in the table's sharding: its pieces have ceil(11 / 2) rows at most.
  const auto w = dax::device_put(uniform(batch * seq * width, rng), {batch, seq, width}, e.sharding());
  dax::comm_stats().reset();
  const auto g = dax::grad([&](const DistArray<double>& t) { return dax::sum(dax::take(t, ids) * w); })(table);
  INFO(comm_text());
  CHECK(g.sharding() == table.sharding());
  const int64_t rows = (vocab + m - 1) / m;
  const int64_t piece = dax::test::world_rank() % m == 0 ? rows : vocab - rows;  // this device's rows
  // Forward: the lookup's all-reduce over the model axis and the loss's over the data axis (the
  // product is split over data only); backward: nothing until the gradient's one all-reduce over
  // the data axis (the ids are split there).
  auto all_reduce = [](int64_t k, int64_t elements) { return 2 * (k - 1) * elements / k * int64_t(sizeof(double)); };
  CHECK(dax::comm_stats().of("all_reduce").calls == (d > 1 ? 3 : 1));
  const int64_t expected = all_reduce(m, local) + all_reduce(d, 1) + all_reduce(d, piece * width);
  CHECK(dax::comm_stats().total_bytes() == expected);
  // The gradient against a host scatter-add.
  const auto wv = host(w), gh = host(g);
  std::vector<double> want(vocab * width, 0.0);
  for (int64_t j = 0; j < batch * seq; ++j)
    for (int64_t k = 0; k < width; ++k) want[iv[j] * width + k] += wv[j * width + k];
  REQUIRE(gh.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(gh[i] == Approx(want[i]).epsilon(1e-12));
}

TEST_CASE("one_hot: values, the depth split with no communication", "[ops][transformer]") {
  Pick pick(21);
  std::mt19937 rng(21);
  for (int trial = 0; trial < 12; ++trial) {
    const Mesh& mesh = random_mesh(pick);
    const Shape is = random_shape(rng, trial % 3, 1, 6);
    const int64_t depth = 1 + static_cast<int64_t>(pick(9));
    const NamedSharding ish = random_sharding(pick, mesh, is.size());
    // The depth split over one random mesh axis, or none.
    const size_t choice = pick(mesh.axis_names().size() + 1);
    const dax::PartitionSpec::Entry split =
        choice == 0 ? dax::PartitionSpec::Entry(dax::none) : dax::PartitionSpec::Entry(mesh.axis_names()[choice - 1]);
    INFO("ids " << dax::to_string(is) << " " << dax::to_string(ish) << " depth " << depth << " split "
                << split.text());
    const auto iv = random_ids<int64_t>(dax::numel(is), -1, depth + 1, rng);
    const auto ids = dax::device_put(iv, is, ish);
    dax::comm_stats().reset();
    const auto got = dax::one_hot<float>(ids, depth, split);
    bool ids_moved = false;
    for (size_t dim = 0; dim < is.size(); ++dim)
      for (int a : ish.dim_axes(dim))
        if (choice != 0 && a == static_cast<int>(choice - 1)) ids_moved = true;
    if (!ids_moved) CHECK(dax::comm_stats().total_bytes() == 0);  // each device builds its own columns
    Shape want_shape = is;
    want_shape.push_back(depth);
    CHECK(got.shape() == want_shape);
    CHECK(got.sharding().dim_axes(is.size()) == NamedSharding(mesh, P(split)).dim_axes(0));
    const auto h = host(got);
    if (!ids.is_addressable()) continue;
    REQUIRE(h.size() == iv.size() * depth);
    for (size_t j = 0; j < iv.size(); ++j)
      for (int64_t c = 0; c < depth; ++c) CHECK(h[j * depth + c] == (iv[j] == c ? 1.0f : 0.0f));
    CHECK(host(dax::one_hot<int32_t>(ids, depth)) == std::vector<int32_t>(h.begin(), h.end()));
  }
}

TEST_CASE("einsum: the transformer's contractions against a host loop, and their gradients", "[ops][transformer]") {
  struct Spec {
    std::string spec;
    Shape a, b;
  };
  const std::vector<Spec> specs{
      {"bhqd,bhkd->bhqk", {2, 3, 5, 4}, {2, 3, 6, 4}},  // attention scores
      {"bhqk,bhkd->bhqd", {2, 3, 5, 6}, {2, 3, 6, 4}},  // attention output
      {"bsd,df->bsf", {3, 5, 4}, {4, 7}},               // projections
      {"bsf,fd->bsd", {3, 5, 7}, {7, 4}},
      {"bhqd,bhkd->bhkq", {2, 3, 5, 4}, {2, 3, 6, 4}},  // a transposed output
      {"bsd,df->fbs", {3, 5, 4}, {4, 7}},
      {"bqhd,bkhd->bhqk", {2, 5, 3, 4}, {2, 6, 3, 4}},  // heads after the sequence
      {"ij,jk->ik", {5, 4}, {4, 3}},
      {"ij,kj->ki", {5, 4}, {3, 4}},
      {"i,i->", {7}, {7}},
      {"i,j->ij", {5}, {3}},
      {"bij,bj->bi", {3, 4, 5}, {3, 5}},
      {"abc,cd->", {2, 3, 4}, {4, 5}},
      {"ab,cb->a", {4, 3}, {5, 3}},  // c summed away alone
      {"abcd,cde->abe", {2, 3, 4, 2}, {4, 2, 3}},  // two contracted labels
  };
  Pick pick(9);
  std::mt19937 rng(9);
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& [spec, as, bs] = specs[i];
    for (int trial = 0; trial < 2; ++trial) {
      const Mesh& mesh = random_mesh(pick);
      const NamedSharding sa = random_sharding(pick, mesh, as.size()), sb = random_sharding(pick, mesh, bs.size());
      INFO(spec << " " << dax::to_string(sa) << " " << dax::to_string(sb));
      const auto av = uniform(dax::numel(as), rng), bv = uniform(dax::numel(bs), rng);
      Shape want_shape;
      const auto want = einsum_reference(spec, av, as, bv, bs, want_shape);
      const auto got = dax::einsum(spec, dax::device_put(av, as, sa), dax::device_put(bv, bs, sb));
      CHECK(got.shape() == want_shape);
      const auto h = host(got);
      if (got.is_addressable()) {
        REQUIRE(h.size() == want.size());
        for (size_t k = 0; k < want.size(); ++k) CHECK(h[k] == Approx(want[k]).epsilon(1e-12).margin(1e-12));
      }
      // float too (the BLAS path for float).
      const auto gf = host(dax::einsum(spec, dax::device_put(std::vector<float>(av.begin(), av.end()), as, sa),
                                       dax::device_put(std::vector<float>(bv.begin(), bv.end()), bs, sb)));
      for (size_t k = 0; k < gf.size(); ++k) CHECK(gf[k] == Approx(want[k]).epsilon(1e-4).margin(1e-5));
      check_gradient(contracted([s = spec](const Params& p) { return dax::einsum(s, p[0], p[1]); }, 70 + i),
                     {av, bv}, {as, bs}, {sa, sb}, rng);
    }
  }
}

TEST_CASE("einsum keeps split batch and head dimensions local", "[ops][transformer][comm]") {
  const int n = dax::test::world_size();
  if (n < 2 || n % 2 != 0) return;
  const Mesh mesh({n / 2, 2}, {"data", "model"});
  std::mt19937 rng(3);
  const int64_t b = n, h = 4, q = 5, k = 7, d = 3;
  const NamedSharding s(mesh, P("data", "model"));
  const auto qv = uniform(b * h * q * d, rng), kv = uniform(b * h * k * d, rng);
  const auto qa = dax::device_put(qv, {b, h, q, d}, s), ka = dax::device_put(kv, {b, h, k, d}, s);
  dax::comm_stats().reset();
  const auto scores = dax::einsum("bhqd,bhkd->bhqk", qa, ka);
  const auto out = dax::einsum("bhqk,bhkd->bhqd", scores, ka);
  CHECK(dax::comm_stats().total_bytes() == 0);
  // The layout is kept (a mesh axis of one device may drop out of the spec: it splits nothing).
  for (size_t dim : {0, 1}) {
    if (mesh.axis_size(static_cast<int>(dim)) == 1) continue;
    CHECK(scores.sharding().dim_axes(dim) == s.dim_axes(dim));
    CHECK(out.sharding().dim_axes(dim) == s.dim_axes(dim));
  }
  // The backward moves nothing either but the loss's scalar all-reduce.
  dax::comm_stats().reset();
  const auto g = dax::grad([&](const Params& p) {
    return dax::sum(dax::einsum("bhqk,bhkd->bhqd", dax::einsum("bhqd,bhkd->bhqk", p[0], p[1]), p[1]));
  })(Params{qa, ka});
  INFO(comm_text());
  CHECK(dax::comm_stats().total_calls() == 1);
  CHECK(g[0].sharding() == s);
}

TEST_CASE("einsum refuses what it does not support, naming the spec, on every rank", "[ops][transformer]") {
  const Mesh mesh({dax::test::world_size()}, {"x"});
  const auto a = dax::zeros<float>({3, 4}, NamedSharding(mesh, P("x")));
  const auto b = dax::zeros<float>({4, 5}, NamedSharding(mesh, P()));
  using dax::test::error_of;
  CHECK_THAT(error_of([&] { dax::einsum("...j,jk->...k", a, b); }), Catch::Contains("'...j,jk->...k'"));
  CHECK_THAT(error_of([&] { dax::einsum("ii,ik->k", a, b); }), Catch::Contains("appears twice"));
  CHECK_THAT(error_of([&] { dax::einsum("ij,jk,kl->il", a, b); }), Catch::Contains("exactly two operands"));
  CHECK_THAT(error_of([&] { dax::einsum("ij,jk->iz", a, b); }), Catch::Contains("'z' is in neither operand"));
  CHECK_THAT(error_of([&] { dax::einsum("ijk,jk->ik", a, b); }), Catch::Contains("names 3 and 2 dimensions"));
  CHECK_THAT(error_of([&] { dax::einsum("ij,ik->jk", a, b); }), Catch::Contains("label 'i' has size 3"));
  const auto ids = dax::zeros<int32_t>({2}, NamedSharding(mesh, P()));
  CHECK_THAT(error_of([&] { dax::take(a, ids, 2); }), Catch::Contains("take: axis 2 is out of range for rank 2"));
  CHECK_THAT(error_of([&] { dax::one_hot<float>(ids, -1); }), Catch::Contains("depth must be >= 0, got -1"));
}
