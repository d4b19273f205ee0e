// Closed-form piece arithmetic for a step between two shardings, independent of the device count.
// A device's piece in each array dimension depends only on its coordinates on the mesh axes that
// split that dimension, and under the ceil-chunk rule a piece's size and place change with a
// coordinate only where its piece index crosses a few thresholds (the last full piece, the last
// non-empty one). So a property of every device (equal pieces, containment, the most a device
// receives) is decided on a few representative coordinates per mesh axis: 0, 1, the last two, and
// the neighbours of those thresholds. Dimensions whose two splits are not so related (different
// axes on each side, or a finer split whose uneven chunks drift off the coarser grid) take every
// coordinate of their axes: still one pass over devices, never over pairs of devices.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <dax/core/shape.hpp>
#include <dax/sharding/chunk.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax::detail {

/// One side of one dimension: the mesh axes (of size > 1, major first) splitting it, each with
/// its stride in the piece index, and the number of pieces.
struct DimSplit {
  std::vector<std::pair<int, int64_t>> axes;  // (mesh axis, stride)
  int64_t pieces = 1;

  DimSplit() = default;
  DimSplit(const Mesh& mesh, const std::vector<int>& split) {
    for (int a : split)
      if (mesh.axis_size(a) > 1) axes.emplace_back(a, 0);
    for (size_t i = axes.size(); i-- > 0;) {
      axes[i].second = pieces;
      pieces *= mesh.axis_size(axes[i].first);
    }
  }
  int64_t index(const std::vector<int64_t>& coords) const {
    int64_t i = 0;
    for (const auto& [a, stride] : axes) i += coords[a] * stride;
    return i;
  }
  bool uses(int axis) const {
    for (const auto& [a, stride] : axes)
      if (a == axis) return true;
    return false;
  }
  int64_t stride_of(int axis) const {
    for (const auto& [a, stride] : axes)
      if (a == axis) return stride;
    return 0;
  }
  bool same_axes(const DimSplit& o) const {
    if (axes.size() != o.axes.size()) return false;
    for (size_t i = 0; i < axes.size(); ++i)
      if (axes[i].first != o.axes[i].first) return false;
    return true;
  }
  /// This split's axes start with all of `o`'s, in order.
  bool refines(const DimSplit& o) const {
    if (o.axes.size() > axes.size()) return false;
    for (size_t i = 0; i < o.axes.size(); ++i)
      if (axes[i].first != o.axes[i].first) return false;
    return true;
  }
};

/// Largest piece of n split k ways.
inline int64_t largest_chunk(int64_t n, int64_t k) { return n == 0 ? 0 : std::min(n, (n + k - 1) / k); }

/// How the two splits of one dimension relate.
enum class DimRelation {
  same,         // the same axes: every device's two pieces are equal
  from_whole,   // the source does not split it
  to_whole,     // the target does not split it
  to_finer,     // the target's axes extend the source's and its pieces nest inside
  from_finer,   // the source's axes extend the target's and its pieces nest inside
  other,        // anything else: decided coordinate by coordinate
};

/// The geometry of a step from `from` to `to` on arrays of `shape`.
class StepGeometry {
 public:
  StepGeometry(const Shape& shape, const NamedSharding& from, const NamedSharding& to)
      : shape_(shape), mesh_(from.mesh()) {
    const int na = mesh_.num_axes();
    for (size_t d = 0; d < shape.size(); ++d) {
      Dim dim{shape[d], DimSplit(mesh_, from.dim_axes(d)), DimSplit(mesh_, to.dim_axes(d)), DimRelation::other};
      dim.relation = relation(dim);
      dim.from_chunk = (dim.n + dim.from.pieces - 1) / dim.from.pieces;
      dim.to_chunk = (dim.n + dim.to.pieces - 1) / dim.to.pieces;
      dims_.push_back(std::move(dim));
    }
    // Representative coordinates per mesh axis.
    reps_.assign(na, {0});
    for (int a = 0; a < na; ++a) {
      const int64_t m = mesh_.axis_size(a);
      bool used = false, every = false;
      std::vector<int64_t> r{0, 1, m - 2, m - 1};
      for (const Dim& dim : dims_) {
        for (const DimSplit* side : {&dim.from, &dim.to}) {
          if (!side->uses(a)) continue;
          used = true;
          if (dim.relation == DimRelation::other) every = true;
          if (dim.n == 0) continue;
          const int64_t c = (dim.n + side->pieces - 1) / side->pieces;
          const int64_t last = (dim.n + c - 1) / c - 1, first_short = dim.n / c;
          for (int64_t t : {last, first_short}) {
            if (t >= side->pieces) continue;
            const int64_t v = (t / side->stride_of(a)) % m;
            r.insert(r.end(), {v - 1, v, v + 1});
          }
        }
      }
      if (!used) continue;
      if (every) {
        reps_[a].resize(m);
        for (int64_t i = 0; i < m; ++i) reps_[a][i] = i;
        continue;
      }
      std::vector<int64_t> kept;
      for (int64_t v : r)
        if (v >= 0 && v < m) kept.push_back(v);
      std::sort(kept.begin(), kept.end());
      kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
      reps_[a] = std::move(kept);
    }
  }

  size_t ndim() const { return dims_.size(); }
  DimRelation relation(size_t d) const { return dims_[d].relation; }
  const DimSplit& from_split(size_t d) const { return dims_[d].from; }
  const DimSplit& to_split(size_t d) const { return dims_[d].to; }

  Slice from_piece(size_t d, const std::vector<int64_t>& c) const {
    const Dim& dim = dims_[d];
    return piece(dim.n, dim.from_chunk, dim.from.index(c));
  }
  Slice to_piece(size_t d, const std::vector<int64_t>& c) const {
    const Dim& dim = dims_[d];
    return piece(dim.n, dim.to_chunk, dim.to.index(c));
  }
  /// The chunk (largest piece) of dimension d's source split.
  int64_t from_chunk(size_t d) const { return dims_[d].from_chunk; }

  /// Calls f(coords) for representative devices until it returns false; returns whether it never did.
  template <class F>
  bool all_of(F&& f) const {
    const int na = mesh_.num_axes();
    std::vector<size_t> at(na, 0);
    std::vector<int64_t> coords(na);
    for (int a = 0; a < na; ++a) coords[a] = reps_[a][0];
    while (true) {
      if (!f(static_cast<const std::vector<int64_t>&>(coords))) return false;
      int a = na;
      while (a > 0 && ++at[a - 1] == reps_[a - 1].size()) {
        at[a - 1] = 0;
        coords[a - 1] = reps_[a - 1][0];
        --a;
      }
      if (a == 0) return true;
      coords[a - 1] = reps_[a - 1][at[a - 1]];
    }
  }

  /// The largest f(coords) over every device.
  template <class F>
  int64_t max_of(F&& f) const {
    int64_t most = 0;
    all_of([&](const std::vector<int64_t>& c) {
      most = std::max(most, f(c));
      return true;
    });
    return most;
  }

  /// Elements of the target piece and of its overlap with the source piece, at `coords`.
  std::pair<int64_t, int64_t> target_and_overlap(const std::vector<int64_t>& c) const {
    int64_t t = 1, o = 1;
    for (size_t d = 0; d < dims_.size(); ++d) {
      const Slice f = from_piece(d, c), s = to_piece(d, c);
      t *= s.size();
      const int64_t lo = std::max(f.start, s.start), hi = std::min(f.stop, s.stop);
      o *= hi > lo ? hi - lo : 0;
    }
    return {t, o};
  }

 private:
  struct Dim {
    int64_t n;
    DimSplit from, to;
    DimRelation relation;
    int64_t from_chunk = 0, to_chunk = 0;
  };

  /// chunk_piece with the chunk computed once.
  static Slice piece(int64_t n, int64_t chunk, int64_t i) {
    const int64_t lo = i * chunk, hi = lo + chunk;
    return {lo < n ? lo : n, hi < n ? hi : n};
  }

  static DimRelation relation(const Dim& dim) {
    if (dim.from.same_axes(dim.to)) return DimRelation::same;
    if (dim.from.axes.empty()) return DimRelation::from_whole;
    if (dim.to.axes.empty()) return DimRelation::to_whole;
    // A finer split nests in a coarser one when its chunks tile the coarse chunks exactly.
    auto nests = [&](const DimSplit& fine, const DimSplit& coarse) {
      if (dim.n == 0) return true;
      const int64_t cf = (dim.n + fine.pieces - 1) / fine.pieces;
      const int64_t cc = (dim.n + coarse.pieces - 1) / coarse.pieces;
      return cf * (fine.pieces / coarse.pieces) == cc;
    };
    if (dim.to.refines(dim.from) && nests(dim.to, dim.from)) return DimRelation::to_finer;
    if (dim.from.refines(dim.to) && nests(dim.from, dim.to)) return DimRelation::from_finer;
    return DimRelation::other;
  }

  Shape shape_;
  Mesh mesh_;
  std::vector<Dim> dims_;
  std::vector<std::vector<int64_t>> reps_;
};

/// The largest piece any device holds under `s` (one dimension's largest chunk times the others').
inline int64_t largest_piece(const Shape& shape, const NamedSharding& s) {
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) n *= largest_chunk(shape[d], s.num_pieces(d));
  return n;
}

/// Every device holds the same piece under both shardings.
inline bool same_pieces(const StepGeometry& g) {
  bool trivial = true;
  for (size_t d = 0; d < g.ndim(); ++d) trivial = trivial && g.relation(d) == DimRelation::same;
  if (trivial) return true;
  return g.all_of([&](const std::vector<int64_t>& c) {
    for (size_t d = 0; d < g.ndim(); ++d)
      if (!(g.from_piece(d, c) == g.to_piece(d, c))) return false;
    return true;
  });
}

/// Every device's target piece lies inside its source piece.
inline bool target_inside_source(const StepGeometry& g) {
  return g.all_of([&](const std::vector<int64_t>& c) {
    bool inside = true, empty = false;
    for (size_t d = 0; d < g.ndim(); ++d) {
      const Slice f = g.from_piece(d, c), t = g.to_piece(d, c);
      empty = empty || t.size() == 0;
      inside = inside && t.start >= f.start && t.stop <= f.stop;
    }
    return empty || inside;
  });
}

/// The most elements a device receives when every device gets its target piece from the devices
/// holding it, summing partials over `reduce_group` devices: of the reduce_group copies of its
/// target piece that exist across sources, it holds the part overlapping its own piece.
inline int64_t most_received(const StepGeometry& g, int64_t reduce_group) {
  return g.max_of([&](const std::vector<int64_t>& c) {
    const auto [t, o] = g.target_and_overlap(c);
    return reduce_group * t - o;
  });
}

}  // namespace dax::detail
