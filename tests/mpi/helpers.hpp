// Shared pieces of the multi-rank tests: random meshes that fit the world, random shardings, and
// the same random data on every rank (one seed), so each rank can compute what it expects.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include <dax/dax.hpp>
#include "../common/error_of.hpp"
#include "../common/meshes.hpp"

namespace dax::test {

inline int world_size() { return Runtime::current().size(); }
inline int world_rank() { return Runtime::current().rank(); }

/// The meshes of all_meshes() that fit in the world.
inline std::vector<Mesh> meshes_that_fit() {
  std::vector<Mesh> out;
  for (const Mesh& m : all_meshes()) {
    int largest = 0;
    for (int d : m.devices()) largest = std::max(largest, d);
    if (largest < world_size()) out.push_back(m);
  }
  return out;
}

/// A seed drawn on rank 0 and shared: fresh inputs each run, the same on every rank.
inline unsigned shared_seed() {
  const Mesh world({world_size()}, {"ranks"});
  const unsigned mine = world_rank() == 0 ? std::random_device{}() : 0u;
  const auto all = from_local<int64_t>({int64_t(mine)}, {world.size()}, NamedSharding(world, P("ranks"))).to_host();
  return static_cast<unsigned>(all[0]);
}

/// Random choices from a fixed seed: every rank makes the same ones, so all run the same case.
struct Pick {
  std::mt19937 rng;
  explicit Pick(unsigned seed = 4242) : rng(seed) {}
  size_t operator()(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }
};

inline const Mesh& random_mesh(Pick& pick) {
  static const auto meshes = meshes_that_fit();
  return meshes[pick(meshes.size())];
}

inline NamedSharding random_sharding(Pick& pick, const Mesh& mesh, size_t ndim, bool unreduced = false) {
  const auto all = all_shardings(mesh, ndim, unreduced);
  return all[pick(all.size())];
}

template <class T>
std::vector<T> random_values(int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> dist(-100, 100);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

/// n complex numbers with parts uniform in [-1, 1), from `seed` (C: std::complex<float | double>).
template <class C>
std::vector<C> random_complex(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<typename C::value_type> u(-1, 1);
  std::vector<C> v(static_cast<size_t>(n));
  for (auto& z : v) z = C(u(rng), u(rng));
  return v;
}

/// n floats uniform in [-1, 1), from `seed`: fresh inputs for tests that compare with a tolerance.
inline std::vector<float> uniform_values(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

/// The flat index into an operand of `shape` broadcast to `out`, for the output's flat index `flat`
/// (NumPy's rules: leading dimensions added, dimensions of 1 stretched).
inline int64_t source_index(const Shape& shape, const Shape& out, int64_t flat) {
  int64_t src = 0, stride = 1;
  for (size_t i = out.size(); i-- > 0;) {
    const int64_t idx = flat % out[i];
    flat /= out[i];
    const int64_t j = int64_t(i) - int64_t(out.size() - shape.size());
    if (j < 0) continue;
    src += (shape[j] == 1 ? 0 : idx) * stride;
    stride *= shape[j];
  }
  return src;
}

/// (batch..., r, c) row-major -> (batch..., c, r).
template <class T>
std::vector<T> swap_last_two(const std::vector<T>& x, const Shape& shape) {
  const size_t n = shape.size();
  const int64_t r = shape[n - 2], c = shape[n - 1], batch = dax::numel(shape) / std::max<int64_t>(r * c, 1);
  std::vector<T> out(x.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) out[b * r * c + j * r + i] = x[b * r * c + i * c + j];
  return out;
}

/// (m, k) @ (k, n), plain loops: the reference the matmul tests compare with.
template <class T>
std::vector<T> matmul_reference(const std::vector<T>& a, const std::vector<T>& b, int64_t m, int64_t k, int64_t n) {
  std::vector<T> c(m * n, T(0));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

/// The elements of `global` (row-major over `shape`) inside `box`.
template <class T>
std::vector<T> slice_of(const std::vector<T>& global, const Shape& shape, const Box& box) {
  std::vector<T> out;
  out.reserve(numel(box));
  if (numel(box) == 0) return out;
  std::vector<int64_t> idx(box.size());
  for (size_t i = 0; i < box.size(); ++i) idx[i] = box[i].start;
  while (true) {
    int64_t flat = 0;
    for (size_t i = 0; i < box.size(); ++i) flat = flat * shape[i] + idx[i];
    out.push_back(global[flat]);
    size_t i = box.size();
    while (i > 0 && ++idx[i - 1] == box[i - 1].stop) {
      idx[i - 1] = box[i - 1].start;
      --i;
    }
    if (i == 0) break;
  }
  return out;
}

/// The global data on the mesh's ranks; nothing elsewhere (to_host is collective over the mesh).
template <class T>
auto host(const dax::DistArray<T>& x) {
  return x.is_addressable() ? x.to_host() : decltype(x.to_host()){};
}

}  // namespace dax::test
