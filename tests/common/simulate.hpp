// Runs reshard plans on simulated devices in one process: every device's buffer is a vector, every
// step moves data exactly as its per-device exchanges say (element by element), and the result is
// compared with the pieces computed straight from the global partial sums.
#pragma once

#include <map>
#include <random>
#include <vector>

#include <dax/reshard/exchange.hpp>
#include <dax/reshard/make_unreduced.hpp>
#include <dax/reshard/step.hpp>

namespace dax::test {

using Buffers = std::map<int, std::vector<double>>;

template <class F>
void for_each_index(const Box& box, F&& f) {
  if (numel(box) == 0) return;
  std::vector<int64_t> idx(box.size());
  for (size_t i = 0; i < box.size(); ++i) idx[i] = box[i].start;
  while (true) {
    f(idx);
    size_t i = box.size();
    while (i > 0 && ++idx[i - 1] == box[i - 1].stop) {
      idx[i - 1] = box[i - 1].start;
      --i;
    }
    if (i == 0) return;
  }
}

inline int64_t offset(const Box& block, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t i = 0; i < block.size(); ++i) off = off * block[i].size() + (idx[i] - block[i].start);
  return off;
}

/// A value given as partial sums: one global array per combination of coordinates on the
/// unreduced axes (a single array when there are none). Integer-valued, so sums are exact.
struct Partials {
  std::vector<int> axes;  // mesh axes the value is unreduced over
  std::map<std::vector<int64_t>, std::vector<double>> arrays;

  std::vector<double> total() const {
    std::vector<double> sum(arrays.begin()->second.size(), 0.0);
    for (const auto& [key, a] : arrays)
      for (size_t i = 0; i < a.size(); ++i) sum[i] += a[i];
    return sum;
  }
};

inline Partials random_partials(const Shape& shape, const NamedSharding& s, std::mt19937& rng) {
  Partials p;
  p.axes = s.unreduced_axes();
  std::uniform_int_distribution<int> dist(-50, 50);
  std::vector<int64_t> key(p.axes.size(), 0);
  while (true) {
    auto& a = p.arrays[key];
    a.resize(numel(shape));
    for (auto& v : a) v = dist(rng);
    size_t i = key.size();
    while (i > 0 && ++key[i - 1] == s.mesh().axis_size(p.axes[i - 1])) key[--i] = 0;
    if (i == 0) break;
  }
  return p;
}

/// What each device holds of `global` (a plain value) under sharding `s`: its piece; where `s` is
/// unreduced, the value on devices at coordinate 0 of those axes and zeros on the others.
inline Buffers pieces_of_value(const Shape& shape, const std::vector<double>& global, const NamedSharding& s) {
  Buffers out;
  for (int d : s.mesh().devices()) {
    const auto c = s.mesh().coords(d);
    const Box box = s.box_at(c, shape);
    auto& buf = out[d];
    buf.assign(numel(box), 0.0);
    bool first = true;
    for (int a : s.unreduced_axes()) first = first && c[a] == 0;
    if (!first) continue;
    for_each_index(box, [&](const std::vector<int64_t>& idx) { buf[offset(box, idx)] = global[offset(full_box(shape), idx)]; });
  }
  return out;
}

/// What each device holds of a value given as partials, under a sharding unreduced over exactly
/// the partials' axes.
inline Buffers pieces_of_partials(const Shape& shape, const Partials& p, const NamedSharding& s) {
  Buffers out;
  for (int d : s.mesh().devices()) {
    const auto c = s.mesh().coords(d);
    std::vector<int64_t> key;
    for (int a : p.axes) key.push_back(c[a]);
    const Box box = s.box_at(c, shape);
    const auto& global = p.arrays.at(key);
    auto& buf = out[d];
    buf.assign(numel(box), 0.0);
    for_each_index(box, [&](const std::vector<int64_t>& idx) { buf[offset(box, idx)] = global[offset(full_box(shape), idx)]; });
  }
  return out;
}

/// The expected buffers after resharding a value held as `p` to `dst`: partials kept over the
/// axes both share, summed over the others, and zero off coordinate 0 of axes `dst` adds.
inline Buffers expected_pieces(const Shape& shape, const Partials& p, const NamedSharding& dst) {
  Partials kept;
  for (int a : p.axes)
    if (dst.is_unreduced_over(a)) kept.axes.push_back(a);
  for (const auto& [key, a] : p.arrays) {
    std::vector<int64_t> k;
    for (size_t i = 0; i < p.axes.size(); ++i)
      if (dst.is_unreduced_over(p.axes[i])) k.push_back(key[i]);
    auto& sum = kept.arrays[k];
    sum.resize(a.size(), 0.0);
    for (size_t i = 0; i < a.size(); ++i) sum[i] += a[i];
  }
  Buffers out;
  for (int d : dst.mesh().devices()) {
    const auto c = dst.mesh().coords(d);
    std::vector<int64_t> key;
    for (int a : kept.axes) key.push_back(c[a]);
    bool first = true;
    for (int a : dst.unreduced_axes())
      if (!std::count(p.axes.begin(), p.axes.end(), a)) first = first && c[a] == 0;
    const Box box = dst.box_at(c, shape);
    auto& buf = out[d];
    buf.assign(numel(box), 0.0);
    if (!first) continue;
    const auto& global = kept.arrays.at(key);
    for_each_index(box, [&](const std::vector<int64_t>& idx) { buf[offset(box, idx)] = global[offset(full_box(shape), idx)]; });
  }
  return out;
}

/// Applies one step to every device. Returns false when a device's receive list disagrees with
/// what its peer's send list says it sends.
inline bool simulate_step(const Shape& shape, const ReshardStep& step, Buffers& buffers) {
  const Mesh& mesh = step.from.mesh();
  Buffers next;
  for (int d : mesh.devices()) {
    const auto c = mesh.coords(d);
    if (step.kind == StepKind::make_unreduced) {
      next[d] = buffers.at(d);
      if (!detail::keeps_value(step, c)) std::fill(next[d].begin(), next[d].end(), 0.0);
      continue;
    }
    const detail::Exchange ex = detail::exchange_for(shape, step.from, step.to, step.axes, step.reduce_axes, d);
    auto& out = next[d];
    out.assign(numel(ex.to_block), 0.0);
    auto take = [&](const std::vector<double>& src, const Box& src_block, const Box& region) {
      for_each_index(region, [&](const std::vector<int64_t>& idx) {
        double& slot = out[offset(ex.to_block, idx)];
        slot = ex.reduce ? slot + src[offset(src_block, idx)] : src[offset(src_block, idx)];
      });
    };
    take(buffers.at(d), ex.from_block, ex.keep);
    for (size_t j = 0; j < ex.members.size(); ++j) {
      if (static_cast<int>(j) == ex.self) continue;
      const int peer = ex.members[j];
      const detail::Exchange pex = detail::exchange_for(shape, step.from, step.to, step.axes, step.reduce_axes, peer);
      if (pex.members != ex.members) return false;
      if (!same_region(pex.send[ex.self], ex.recv[j])) return false;
      take(buffers.at(peer), pex.from_block, ex.recv[j]);
    }
  }
  buffers = std::move(next);
  return true;
}

}  // namespace dax::test
