// Making DistArrays: from global host data (device_put), from a callback per piece, from each
// rank's own piece (from_local, also how an unreduced array is built), and constant / range fills.
// For an unreduced sharding, the functions given the global value put it on the devices at
// coordinate 0 of the unreduced axes and zeros on the others, so the partial sums add up to it.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include <dax/array/dist_array.hpp>
#include <dax/array/profile_hook.hpp>
#include <dax/backend/device_ops.hpp>

namespace dax {
namespace detail {

/// Element `flat` of arange: the index itself.
template <class T>
struct Arange {
  DAX_HOST_DEVICE T operator()(uint64_t flat) const { return static_cast<T>(flat); }
};

/// Allocates this rank's piece and fills it with `fill(T* data, const Box& index)`, `data` in the
/// backend's memory; ranks outside the mesh get an array without a piece.
template <class T, class Fill>
DistArray<T> make_local(const Shape& shape, const NamedSharding& sharding, Fill&& fill) {
  sharding.check_rank(shape);
  for (int64_t d : shape) DAX_CHECK(d >= 0, "dax: negative dimension in shape ", to_string(shape));
  Runtime& rt = Runtime::current();
  rt.check_mesh(sharding.mesh());
  if (!sharding.mesh().contains(rt.rank())) return DistArray<T>(shape, sharding, nullptr);
  const ProfiledOp profiled("create", shape, dtype_v<T>, sharding);
  const Box index = sharding.device_indices(rt.rank(), shape);
  auto buffer = dev::allocate(numel(index) * sizeof(T));
  T* data = static_cast<T*>(buffer->data());
  if (at_origin_of(sharding.mesh().coords(rt.rank()), sharding.unreduced_axes())) fill(data, index);
  else dev::fill(data, numel(index), T(0));
  return DistArray<T>(shape, sharding, std::move(buffer));
}

}  // namespace detail

/// An array from global row-major host data (the same on every rank).
template <class T>
DistArray<T> device_put(std::span<const T> host, const Shape& shape, const NamedSharding& sharding) {
  DAX_CHECK(static_cast<int64_t>(host.size()) == numel(shape), "device_put: shape ", to_string(shape),
            " needs ", numel(shape), " elements of host data, got ", host.size());
  return detail::make_local<T>(shape, sharding, [&](T* data, const Box& index) {
    detail::dev::write_from_host(data, numel(index), [&](T* piece) {
      detail::cpu::copy_region(host.data(), full_box(shape), piece, index, index);
    });
  });
}

template <class T>
DistArray<T> device_put(const std::vector<T>& host, const Shape& shape, const NamedSharding& sharding) {
  return device_put(std::span<const T>(host), shape, sharding);
}

/// An array whose pieces come from `piece(index)`: the row-major data of the global array's region
/// `index` (one [start, stop) per dimension). Called once per rank, for its own piece.
/// Collective over the mesh: a callback returning the wrong size on any rank makes every rank throw.
template <class T, class Callback>
DistArray<T> make_array_from_callback(const Shape& shape, const NamedSharding& sharding, Callback&& piece) {
  sharding.check_rank(shape);
  Runtime& rt = Runtime::current();
  rt.check_mesh(sharding.mesh());
  if (!sharding.mesh().contains(rt.rank())) return DistArray<T>(shape, sharding, nullptr);
  const Box index = sharding.device_indices(rt.rank(), shape);
  const std::vector<T> values = piece(std::vector<Slice>(index));
  const auto sizes = rt.mesh_group(sharding.mesh()).all_gather_host(
      {rt.rank(), static_cast<int64_t>(values.size()), numel(index)});
  for (size_t i = 0; i < sizes.size(); i += 3)
    DAX_CHECK(sizes[i + 1] == sizes[i + 2], "make_array_from_callback: the piece ",
              to_string(sharding.device_indices(static_cast<int>(sizes[i]), shape)), " (rank ", sizes[i], ") has ",
              sizes[i + 2], " elements but the callback returned ", sizes[i + 1]);
  return detail::make_local<T>(shape, sharding, [&](T* data, const Box&) {
    detail::dev::write_from_host(data, numel(index), [&](T* piece) { std::copy(values.begin(), values.end(), piece); });
  });
}

/// An array from each rank's own piece: `local` is this rank's row-major data of the region the
/// sharding gives it (for an unreduced sharding, its partial sum). Collective over the mesh: a rank
/// passing the wrong number of elements makes every rank throw.
template <class T>
DistArray<T> from_local(std::span<const T> local, const Shape& shape, const NamedSharding& sharding) {
  sharding.check_rank(shape);
  Runtime& rt = Runtime::current();
  rt.check_mesh(sharding.mesh());
  if (!sharding.mesh().contains(rt.rank())) return DistArray<T>(shape, sharding, nullptr);
  const Box index = sharding.device_indices(rt.rank(), shape);
  const auto sizes = rt.mesh_group(sharding.mesh()).all_gather_host(
      {rt.rank(), static_cast<int64_t>(local.size()), numel(index)});
  for (size_t i = 0; i < sizes.size(); i += 3) {
    const int device = static_cast<int>(sizes[i]);
    DAX_CHECK(sizes[i + 1] == sizes[i + 2], "from_local: rank ", device, " passed ", sizes[i + 1],
              " elements for its piece ", to_string(sharding.device_indices(device, shape)), " of ",
              to_string(shape), " under ", to_string(sharding), ", which needs ", sizes[i + 2]);
  }
  auto buffer = detail::dev::allocate(numel(index) * sizeof(T));
  detail::dev::from_host(buffer->data(), local.data(), local.size_bytes());
  return DistArray<T>(shape, sharding, std::move(buffer));
}

template <class T>
DistArray<T> from_local(const std::vector<T>& local, const Shape& shape, const NamedSharding& sharding) {
  return from_local(std::span<const T>(local), shape, sharding);
}

template <class T>
DistArray<T> full(const Shape& shape, T value, const NamedSharding& sharding) {
  return detail::make_local<T>(shape, sharding, [&](T* data, const Box& index) {
    detail::dev::fill(data, numel(index), value);
  });
}

template <class T>
DistArray<T> zeros(const Shape& shape, const NamedSharding& sharding) {
  return full<T>(shape, T(0), sharding);
}

template <class T>
DistArray<T> ones(const Shape& shape, const NamedSharding& sharding) {
  return full<T>(shape, T(1), sharding);
}

/// 0, 1, 2, ... in row-major order over `shape` (a 1-d range when shape has one dimension).
template <class T>
DistArray<T> arange(const Shape& shape, const NamedSharding& sharding) {
  return detail::make_local<T>(shape, sharding, [&](T* data, const Box& index) {
    detail::dev::generate(data, shape, index, detail::Arange<T>{});
  });
}

/// 0, 1, ..., n-1 as a 1-d array.
template <class T>
DistArray<T> arange(int64_t n, const NamedSharding& sharding) {
  return arange<T>(Shape{n}, sharding);
}

}  // namespace dax
