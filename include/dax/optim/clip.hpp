// Gradient clipping by the global norm (optax.clip_by_global_norm; torch's clip_grad_norm_ without
// its epsilon): the square root of the sum of squares of every element of every leaf, computed in
// double; leaves on one mesh cost one all-reduce of one number together.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include <dax/array/dist_array.hpp>
#include <dax/array/reshard.hpp>
#include <dax/autodiff/tree.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/ops/elementwise.hpp>
#include <dax/ops/functors.hpp>
#include <dax/optim/functors.hpp>
#include <dax/sharding/build.hpp>

namespace dax {
namespace detail {

/// On the GPU a leaf's squares are summed a chunk of this many elements at a time, each chunk
/// into its own slot: the temporary of squares (double) stays 32 MiB however large the leaf.
inline constexpr int64_t kSquaresChunk = int64_t(1) << 22;

/// The slots of global_norm's buffer a local piece of n elements takes: one a chunk on the GPU,
/// one on the CPU (its loop reads the elements where they are).
inline int64_t square_slots(int64_t n) {
  return dev::on_gpu() ? std::max<int64_t>(1, (n + kSquaresChunk - 1) / kSquaresChunk) : 1;
}

/// x with its partial sums reduced (collective over x's mesh; x itself when it has none).
template <class T>
DistArray<T> summed_values(const DistArray<T>& x) {
  const NamedSharding& xs = x.sharding();
  return xs.is_unreduced() ? reshard(x, with_unreduced_axes(xs, x.shape().size(), {})) : x;
}

/// This device's share of the sum of squares of x (reduced, addressable) into its
/// square_slots(x.local_size()) slots: each distinct piece counted once (on the device with
/// replica id 0; zeros elsewhere), so the sum over the mesh is the whole array's.
template <class T>
void sum_of_squares_into(const DistArray<T>& x, double* slots) {
  const int64_t n = x.local_size(), k = square_slots(n);
  if (dev::on_meta()) return;  // no data to square
  if (x.sharding().replica_id(Runtime::current().rank()) != 0) return dev::fill(slots, k, 0.0);
  const fn::SquareAs<double> square;
  if (!dev::on_gpu()) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += square(x.local_data()[static_cast<size_t>(i)]);
    *slots = sum;
    return;
  }
  dev::fill(slots, k, 0.0);  // the reduction adds to what is there
  if (n == 0) return;
  const auto squares = dev::allocate(static_cast<size_t>(std::min(n, kSquaresChunk)) * sizeof(double));
  for (int64_t c = 0; c < k; ++c) {
    const int64_t first = c * kSquaresChunk, length = std::min(kSquaresChunk, n - first);
    dev::broadcast_map(static_cast<double*>(squares->data()), Shape{length}, {std::vector<int64_t>{1}}, square,
                       x.local_data().data() + first);
    dev::reduce_dims(static_cast<const double*>(squares->data()), Shape{length}, {true}, slots + c, fn::Add{});
  }
}

}  // namespace detail

namespace optim {

/// The global L2 norm of every leaf of `tree` together, in double, on every rank. Per mesh the
/// leaves live on: each leaf's share of the sum of squares written into one slot buffer, one sum
/// of the slots, and one all-reduce of 8 bytes (before: one scalar add a leaf, 160 kernels of a
/// GPT-2 step on the GPU). With leaves on several meshes, a rank sums the leaves of the meshes it
/// belongs to (leaves it holds no piece of are not visible to it). Collective.
template <Tree T>
double global_norm(const T& tree) {
  struct Slots {
    Mesh mesh;
    int64_t count = 0, next = 0;
    std::shared_ptr<detail::Buffer> buffer;
  };
  std::vector<Slots> meshes;  // in first-seen order
  auto slots_of = [&](const Mesh& mesh) -> Slots& {
    for (Slots& s : meshes)
      if (s.mesh == mesh) return s;
    return meshes.emplace_back(Slots{mesh, 0, 0, nullptr});
  };
  tree_for_each(
      [&](const auto& leaf) {
        Slots& s = slots_of(leaf.sharding().mesh());
        if (leaf.is_addressable()) s.count += detail::square_slots(leaf.local_size());
      },
      tree);
  for (Slots& s : meshes)
    if (s.count > 0) s.buffer = detail::dev::allocate(static_cast<size_t>(s.count) * sizeof(double));
  tree_for_each(
      [&](const auto& leaf) {
        const auto values = detail::summed_values(leaf);
        Slots& s = slots_of(leaf.sharding().mesh());
        if (!values.is_addressable()) return;
        detail::sum_of_squares_into(values, static_cast<double*>(s.buffer->data()) + s.next);
        s.next += detail::square_slots(values.local_size());
      },
      tree);
  double total = 0;
  for (const Slots& s : meshes) {
    std::vector<int> all(static_cast<size_t>(s.mesh.num_axes()));
    std::iota(all.begin(), all.end(), 0);
    const NamedSharding share = detail::make_sharding(s.mesh, {}, all);  // a scalar unreduced over every axis
    std::shared_ptr<detail::Buffer> sum;
    if (s.buffer) {
      sum = detail::dev::allocate(sizeof(double));
      detail::dev::fill(static_cast<double*>(sum->data()), 1, 0.0);  // the reduction adds to what is there
      detail::dev::reduce_dims(static_cast<const double*>(s.buffer->data()), Shape{s.count}, {true},
                               static_cast<double*>(sum->data()), detail::fn::Add{});
    }
    const DistArray<double> whole = reshard(DistArray<double>({}, share, std::move(sum)), NamedSharding(s.mesh, P()));
    if (whole.is_addressable()) total += whole.local_to_host()[0];
  }
  return std::sqrt(total);
}

/// `grads` scaled by max_norm / norm when their global norm `norm` is at least max_norm (else
/// unchanged, no copies), where `norm` is global_norm(grads), computed once by the caller who
/// also logs it. Each leaf keeps its sharding.
template <Tree T>
T clip_by_global_norm(const T& grads, double max_norm, double norm) {
  DAX_CHECK(max_norm > 0, "clip_by_global_norm: max_norm must be > 0, got ", max_norm);
  if (norm < max_norm) return grads;
  const double scale = max_norm / norm;
  return tree_map(
      [scale](const auto& g) {
        using E = typename std::remove_cvref_t<decltype(g)>::value_type;
        return g * static_cast<E>(scale);
      },
      grads);
}

/// `grads` clipped to global norm `max_norm` (optax.clip_by_global_norm). To log the norm too,
/// call global_norm and the three-argument form.
template <Tree T>
T clip_by_global_norm(const T& grads, double max_norm) {
  return clip_by_global_norm(grads, max_norm, global_norm(grads));
}

}  // namespace optim
}  // namespace dax
