// Ring attention (dax::parallel::ring_attention) over a 'context' axis of every size the job
// allows, causal in the zigzag order and not causal: the output against attention computed on the
// host over the whole sequence, the gradients of q, k and v against dax's unsplit attention
// (causal_softmax on replicated arrays), both in double to 1e-10, with fresh random inputs, for
// both backwards (recomputing, and keeping the blocks met); the bytes each device receives; the zigzag order;
// errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include <dax/backend/memory_stats.hpp>
#include <dax/parallel/ring_attention.hpp>

#include "helpers.hpp"

using dax::DistArray;
using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;
using dax::test::shared_seed;

namespace {

std::vector<double> uniform(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> out(n);
  for (auto& x : out) x = d(rng);
  return out;
}

/// softmax(q k^T scale) v on the host, (b, s, h, e) row-major, natural order.
std::vector<double> host_attention(const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, int64_t b, int64_t s, int64_t h, int64_t e,
                                   bool causal) {
  auto at = [&](int64_t bi, int64_t t, int64_t hi, int64_t ei) { return ((bi * s + t) * h + hi) * e + ei; };
  std::vector<double> out(q.size(), 0.0);
  const double scale = 1.0 / std::sqrt(double(e));
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t t = 0; t < s; ++t) {
        const int64_t last = causal ? t : s - 1;
        std::vector<double> w(size_t(last + 1));
        double top = -1e300, total = 0;
        for (int64_t u = 0; u <= last; ++u) {
          double dot = 0;
          for (int64_t ei = 0; ei < e; ++ei) dot += q[size_t(at(bi, t, hi, ei))] * k[size_t(at(bi, u, hi, ei))];
          w[size_t(u)] = dot * scale;
          top = std::max(top, w[size_t(u)]);
        }
        for (auto& x : w) total += (x = std::exp(x - top));
        for (int64_t u = 0; u <= last; ++u)
          for (int64_t ei = 0; ei < e; ++ei)
            out[size_t(at(bi, t, hi, ei))] += w[size_t(u)] / total * v[size_t(at(bi, u, hi, ei))];
      }
  return out;
}

/// x (b, s, h, e) with its sequence reordered: place p takes position order[p] (or the inverse).
std::vector<double> reorder(const std::vector<double>& x, const std::vector<int64_t>& order, int64_t b, int64_t s,
                            int64_t row, bool inverse) {
  std::vector<double> out(x.size());
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t p = 0; p < s; ++p) {
      const int64_t from = inverse ? p : order[size_t(p)], to = inverse ? order[size_t(p)] : p;
      for (int64_t j = 0; j < row; ++j) out[size_t((bi * s + to) * row + j)] = x[size_t((bi * s + from) * row + j)];
    }
  return out;
}

}  // namespace

TEST_CASE("zigzag_order gives device i chunks i and 2c-1-i", "[ring_attention]") {
  CHECK(dax::parallel::zigzag_order(8, 2) == std::vector<int64_t>{0, 1, 6, 7, 2, 3, 4, 5});
  CHECK(dax::parallel::zigzag_order(6, 1) == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  CHECK_THROWS_WITH(dax::parallel::zigzag_order(10, 2), Catch::Contains("divisible by 2 x 2 devices, got 10"));
}

TEST_CASE("ring attention equals attention over the whole sequence, forward and backward", "[ring_attention]") {
  const int c = dax::test::world_size();
  const Mesh mesh({c}, {"context"});
  std::mt19937 rng(shared_seed());
  const int64_t h = 2, e = 3, chunk = 2;
  // 6, 7: modes 0 and 1 with a batch of one, whose chunks the kernels read in place (views).
  for (int mode = 0; mode < 8; ++mode) {  // 4, 5: k and v passed on blocking, not overlapped
    const bool causal = mode < 2 || mode >= 4, recompute = mode % 2 == 0, overlap = mode < 4 || mode >= 6;
    const int64_t b = mode >= 6 ? 1 : 2;
    DYNAMIC_SECTION((causal ? "causal, zigzag order" : "not causal") << (recompute ? ", recomputing backward" : ", kept blocks' backward")
                    << (overlap ? "" : ", blocking exchange") << ", batch " << b << ", " << c << " devices") {
      const dax::parallel::RingAttention how{.causal = causal, .recompute = recompute, .overlap = overlap};
      const int64_t s = chunk * (causal ? 2 * c : c);
      const Shape shape{b, s, h, e};
      const size_t n = size_t(b * s * h * e);
      const std::vector<double> q = uniform(n, rng), k = uniform(n, rng), v = uniform(n, rng), w = uniform(n, rng);
      std::vector<int64_t> order(static_cast<size_t>(s));
      for (int64_t p = 0; p < s; ++p) order[size_t(p)] = p;
      if (causal) order = dax::parallel::zigzag_order(s, c);
      const NamedSharding split(mesh, P(dax::none, "context")), whole(mesh, P());
      auto put = [&](const std::vector<double>& x, const NamedSharding& where, bool permuted) {
        return dax::device_put(permuted ? reorder(x, order, b, s, h * e, false) : x, shape, where);
      };
      // Forward: against the host, in the natural order.
      const auto qs = put(q, split, true), ks = put(k, split, true), vs = put(v, split, true);
      const auto out = dax::parallel::ring_attention(qs, ks, vs, "context", how);
      CHECK(out.sharding() == split);
      const auto got = reorder(out.to_host(), order, b, s, h * e, true);
      const auto want = host_attention(q, k, v, b, s, h, e, causal);
      for (size_t i = 0; i < n; ++i) REQUIRE(got[i] == Approx(want[i]).margin(1e-10));

      // Backward: sum(out * w) through the ring against dax's attention of the whole sequence.
      const auto ws = put(w, split, true);
      using Qkv = std::vector<DistArray<double>>;
      auto ring_loss = [&](const Qkv& p) {
        return dax::sum(dax::parallel::ring_attention(p[0], p[1], p[2], "context", how) * ws);
      };
      const auto ww = put(w, whole, false);
      auto whole_loss = [&](const Qkv& p) {
        const auto scores = dax::einsum("bqhe,bkhe->bhqk", p[0], p[1]) * (1.0 / std::sqrt(double(e)));
        const auto probs = causal ? dax::causal_softmax(scores) : dax::softmax(scores, -1);
        return dax::sum(dax::einsum("bhqk,bkhe->bqhe", probs, p[2]) * ww);
      };
      dax::comm_stats().reset();
      const auto [ring_value, ring_grads] = dax::value_and_grad(ring_loss)(Qkv{qs, ks, vs});
      const auto ppermuted = dax::comm_stats().of("ppermute");
      const auto [whole_value, whole_grads] =
          dax::value_and_grad(whole_loss)(Qkv{put(q, whole, false), put(k, whole, false), put(v, whole, false)});
      CHECK(ring_value.to_host()[0] == Approx(whole_value.to_host()[0]).margin(1e-10));
      for (size_t j = 0; j < 3; ++j) {
        const auto r = reorder(ring_grads[j].to_host(), order, b, s, h * e, true), u = whole_grads[j].to_host();
        for (size_t i = 0; i < n; ++i) REQUIRE(r[i] == Approx(u[i]).margin(1e-10));
      }
      // In blocks of b * s/c * h * e doubles: k and v each go c-1 steps around the ring forward;
      // the kept blocks' backward sends their gradients' accumulators c-1 steps back, the recomputing one sends k and
      // v c-1 steps again and their gradients' accumulators c steps (the last one home).
      const int64_t block = b * (s / c) * h * e * int64_t(sizeof(double));
      CHECK(ppermuted.bytes == (recompute ? (c > 1 ? 6 * c - 4 : 0) : 4 * (c - 1)) * block);
    }
  }
}

TEST_CASE("ring attention's backward holds its block's arrays, the blocks in flight and one visit's gradients",
          "[ring_attention]") {
  // In blocks of one device's k (s/c rows), above the inputs: the output and its cotangent, the
  // three gradients (accumulated chunk by chunk in place), the next k and v in flight (c > 1) and,
  // from c = 3 on, the k and v received before them, and one visit's gradients of a chunk (1.5);
  // the log-sum-exps and row factors are 1/e of a block. The chunks the kernels read are views (a
  // batch of one): as copies, with the sums made anew, they were 11 blocks at c = 2 and 15.8 at
  // c = 4 (before 2026-12-02).
  const int c = dax::test::world_size();
  const Mesh mesh({c}, {"context"});
  std::mt19937 rng(shared_seed() + 1);
  const int64_t b = 1, h = 1, e = 32, s = 16 * c;
  const Shape shape{b, s, h, e};
  const size_t n = size_t(b * s * h * e);
  const NamedSharding split(mesh, P(dax::none, "context"));
  using Qkv = std::vector<DistArray<double>>;
  const Qkv p{dax::device_put(uniform(n, rng), shape, split), dax::device_put(uniform(n, rng), shape, split),
              dax::device_put(uniform(n, rng), shape, split)};
  const auto ws = dax::device_put(uniform(n, rng), shape, split);
  auto loss = [&](const Qkv& x) { return dax::sum(dax::parallel::ring_attention(x[0], x[1], x[2], "context") * ws); };
  const double block = double(n / size_t(c) * sizeof(double));
  const int64_t before = dax::memory_stats().bytes_in_use;
  dax::reset_peak_memory();
  {
    const auto [value, grads] = dax::value_and_grad(loss)(p);
    CHECK(std::isfinite(value.to_host()[0]));
  }
  const double held = double(dax::memory_stats().peak_bytes_in_use - before) / block;
  INFO(held << " blocks at " << c << " devices");
  CHECK(held >= 6.5);
  CHECK(held <= (c > 2 ? 10.5 : c > 1 ? 8.5 : 6.5) + 4.0 / double(e));
}

TEMPLATE_TEST_CASE("ring attention on 16-bit inputs computes its blocks in float and moves k and v in 16 bits",
                   "[ring_attention]", dax::bfloat16, dax::half) {
  using T = TestType;
  const int c = dax::test::world_size();
  const Mesh mesh({c}, {"context"});
  std::mt19937 rng(shared_seed());
  const int64_t b = 1, h = 2, e = 4, chunk = 8, s = chunk * 2 * c;
  const Shape shape{b, s, h, e};
  const size_t n = size_t(b * s * h * e);
  const auto order = dax::parallel::zigzag_order(s, c);
  const NamedSharding split(mesh, P(dax::none, "context"));
  // The inputs rounded to T once; the reference is exact attention of the rounded values.
  auto rounded = [&] {
    std::vector<double> x = uniform(n, rng);
    for (auto& v : x) v = double(float(T(float(3 * v))));  // scores up to ~18: exp's range matters
    return x;
  };
  const std::vector<double> q = rounded(), k = rounded(), v = rounded();
  auto put = [&](const std::vector<double>& x) {
    const auto z = reorder(x, order, b, s, h * e, false);
    std::vector<T> t(z.size());
    for (size_t i = 0; i < z.size(); ++i) t[i] = T(float(z[i]));
    return dax::device_put(t, shape, split);
  };
  const auto want = host_attention(q, k, v, b, s, h, e, true);
  // Two roundings to T (each block's output, then the combined one): bfloat16 keeps 8 bits, half 11.
  const double tolerance = std::is_same_v<T, dax::bfloat16> ? 8e-3 : 1e-3;
  for (const bool recompute : {false, true}) {
    DYNAMIC_SECTION((recompute ? "recomputing backward" : "kept blocks' backward") << ", " << c << " devices") {
      dax::comm_stats().reset();
      const auto out = dax::parallel::ring_attention(put(q), put(k), put(v), "context",
                                                     {.causal = true, .recompute = recompute});
      const auto moved = dax::comm_stats().of("ppermute");
      const auto host = out.to_host();
      std::vector<double> got(host.size());
      for (size_t i = 0; i < host.size(); ++i) got[i] = double(float(host[i]));
      got = reorder(got, order, b, s, h * e, true);
      for (size_t i = 0; i < n; ++i) REQUIRE(std::abs(got[i] - want[i]) <= tolerance * (1 + std::abs(want[i])));
      // k and v go c-1 steps forward, in T's 2 bytes on either path.
      const int64_t block = b * (s / c) * h * e;
      CHECK(moved.bytes == 2 * (c - 1) * block * 2);
    }
  }
}

TEST_CASE("ring attention's errors name what was expected", "[ring_attention]") {
  const int c = dax::test::world_size();
  const Mesh mesh({c}, {"context"});
  const auto x = dax::zeros<double>({1, 2 * c + 1, 1, 2}, NamedSharding(mesh, P()));
  CHECK_THROWS_WITH(dax::parallel::ring_attention(x, x, x, "context", true),
                    Catch::Contains("must divide into 2 x " + std::to_string(c) + " equal chunks"));
  CHECK_THROWS_WITH(dax::parallel::ring_attention(x, x, x, "seq", false), Catch::Contains("got 'seq'"));
  const auto y = dax::zeros<double>({1, 2 * c, 1, 2}, NamedSharding(mesh, P("context")));
  if (c > 1)
    CHECK_THROWS_WITH(dax::parallel::ring_attention(y, y, y, "context", false),
                      Catch::Contains("dimension 0 is split over 'context'"));
}
