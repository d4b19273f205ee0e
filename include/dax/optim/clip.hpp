// Gradient clipping by the global norm (optax.clip_by_global_norm; torch's clip_grad_norm_ without
// its epsilon): the square root of the sum of squares of every element of every leaf, computed in
// double; leaves on one mesh cost one all-reduce of one number together.
#pragma once

#include <cmath>
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

/// This device's share of the sum of squares of `x`, as a scalar unreduced over every mesh axis:
/// each distinct piece counted once (on the device with replica id 0), so the sum over the mesh is
/// the whole array's.
template <class T>
DistArray<double> sum_of_squares_share(const DistArray<T>& x) {
  const NamedSharding& xs = x.sharding();
  const DistArray<T> r = xs.is_unreduced() ? reshard(x, with_unreduced_axes(xs, x.shape().size(), {})) : x;
  const Mesh& mesh = xs.mesh();
  std::vector<int> all(static_cast<size_t>(mesh.num_axes()));
  std::iota(all.begin(), all.end(), 0);
  const NamedSharding share = make_sharding(mesh, {}, all);
  if (!r.is_addressable()) return DistArray<double>({}, share, nullptr);
  const bool counted = r.sharding().replica_id(Runtime::current().rank()) == 0;
  auto buffer = dev::allocate(sizeof(double));
  double* out = static_cast<double*>(buffer->data());
  const int64_t n = counted ? r.local_size() : 0;
  if (dev::on_meta()) return DistArray<double>({}, share, std::move(buffer));  // no data to square
  if (!dev::on_gpu()) {
    double sum = 0;
    const fn::SquareAs<double> square;
    for (int64_t i = 0; i < n; ++i) sum += square(r.local_data()[static_cast<size_t>(i)]);
    *out = sum;
  } else {  // squares into one temporary, folded by the reduction kernel
    dev::fill(out, 1, 0.0);
    if (n > 0) {
      const auto squares = dev::allocate(n * sizeof(double));
      dev::broadcast_map(static_cast<double*>(squares->data()), Shape{n}, {std::vector<int64_t>{1}},
                         fn::SquareAs<double>{}, r.local_data().data());
      dev::reduce_dims(static_cast<const double*>(squares->data()), Shape{n}, {true}, out, fn::Add{});
    }
  }
  return DistArray<double>({}, share, std::move(buffer));
}

}  // namespace detail

namespace optim {

/// The global L2 norm of every leaf of `tree` together, in double, on every rank. One all-reduce
/// of 8 bytes per mesh the leaves live on. With leaves on several meshes, a rank sums the leaves
/// of the meshes it belongs to (leaves it holds no piece of are not visible to it). Collective.
template <Tree T>
double global_norm(const T& tree) {
  std::vector<DistArray<double>> shares;  // one per mesh, in first-seen order
  tree_for_each(
      [&](const auto& leaf) {
        DistArray<double> s = detail::sum_of_squares_share(leaf);
        for (auto& have : shares)
          if (have.sharding().mesh() == s.sharding().mesh()) {
            have = have + s;  // partial sums add exactly, no communication
            return;
          }
        shares.push_back(std::move(s));
      },
      tree);
  double total = 0;
  for (const auto& s : shares) {
    const DistArray<double> whole = reshard(s, NamedSharding(s.sharding().mesh(), P()));
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
