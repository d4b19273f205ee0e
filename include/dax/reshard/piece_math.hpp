// Closed-form piece arithmetic for a step between two shardings, independent of the device count.
// A device's piece in each array dimension depends only on its coordinates on the mesh axes that
// split that dimension, and under the ceil-chunk rule a piece's size and place change with a
// coordinate only where its piece index crosses a few thresholds (the last full piece, the last
// non-empty one). So a property of every device (equal pieces, containment, the most a device
// receives) is decided on a few representative coordinates per mesh axis: 0, 1, the last two, and
// the neighbours of those thresholds. A dimension split by unrelated axes on each side (when no
// axis splits another dimension too) is sampled by target-piece sizes and source-piece boundaries,
// a finer split whose uneven chunks drift off the coarser grid by every coarse piece; otherwise
// such dimensions take every coordinate of their axes: one pass over devices, never over pairs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
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
    // When no mesh axis splits two dimensions, dimensions vary independently: each gets its own
    // samples and a property of every device combines per-dimension facts.
    std::vector<int> dim_of(na, -1);
    separable_ = true;
    for (size_t d = 0; d < dims_.size(); ++d)
      for (const DimSplit* side : {&dims_[d].from, &dims_[d].to})
        for (const auto& [a, stride] : side->axes) {
          if (dim_of[a] >= 0 && dim_of[a] != static_cast<int>(d)) separable_ = false;
          dim_of[a] = static_cast<int>(d);
        }
    if (separable_) {
      samples_.resize(dims_.size());
      sample_coords_.resize(dims_.size());
      for (size_t d = 0; d < dims_.size(); ++d) dim_samples(d);
    }
  }

  /// One representative device of one dimension: its two pieces and its coordinates (on that
  /// dimension's axes; 0 elsewhere).
  struct DimSample {
    Slice from, to;
    size_t at;  // its coordinates: coords(d)[at + axis]
  };

  /// Whether dimensions vary independently (then `samples` holds each dimension's representatives).
  bool separable() const { return separable_; }
  const std::vector<DimSample>& samples(size_t d) const { return samples_[d]; }
  /// The coordinate on mesh axis `axis` of dimension d's sample `x`.
  int64_t coord(size_t d, const DimSample& x, int axis) const { return sample_coords_[d][x.at + axis]; }

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

  /// The representatives of dimension d alone. Splits that nest or are unrelated use the axes'
  /// representative coordinates; a finer split whose uneven chunks drift off the coarser grid takes
  /// every coarse piece and, within it, the fine offsets where a fine piece meets a coarse boundary
  /// or the end of the array (between those, nothing about the two pieces changes).
  void dim_samples(size_t d) {
    const Dim& dim = dims_[d];
    std::vector<DimSample>& out = samples_[d];
    std::vector<int64_t>& flat = sample_coords_[d];
    std::vector<int64_t> coords(mesh_.num_axes(), 0);
    auto add = [&] {
      out.push_back({from_piece(d, coords), to_piece(d, coords), flat.size()});
      flat.insert(flat.end(), coords.begin(), coords.end());
    };
    const bool to_fine = dim.to.refines(dim.from), from_fine = dim.from.refines(dim.to);
    bool disjoint = true;
    for (const auto& [a, stride] : dim.from.axes) disjoint = disjoint && !dim.to.uses(a);
    if (dim.relation == DimRelation::other && disjoint) {
      // Unrelated axes on the two sides: every (source piece, target piece) pair occurs. Target
      // pieces come in at most three sizes (full, one short, empty), each a run of indices, and at
      // most one target piece meets every source piece (it must hold both sides of the first
      // source boundary), so two members of each run stand for the run. For each, the source
      // pieces that decide a property: the first two and last two, those it meets at either
      // end and their neighbours (one disjoint from it, when any is), the last non-empty one and
      // the one after, and for each source axis one whose coordinate on that axis differs from the
      // piece holding its start (the test for which axes must send).
      const int64_t pf = dim.from.pieces, pt = dim.to.pieces, cf = dim.from_chunk, ct = dim.to_chunk;
      const int64_t full = ct > 0 ? dim.n / ct : 0, last_from = cf > 0 ? (dim.n + cf - 1) / cf - 1 : -1;
      std::vector<int64_t> ts{0, 1, full - 2, full - 1, full, full + 1, pt - 2, pt - 1};
      std::sort(ts.begin(), ts.end());
      ts.erase(std::unique(ts.begin(), ts.end()), ts.end());
      std::vector<int64_t> fs;
      for (int64_t it : ts) {
        if (it < 0 || it >= pt) continue;
        for (const auto& [a, stride] : dim.to.axes) coords[a] = (it / stride) % mesh_.axis_size(a);
        const Slice t = piece(dim.n, ct, it);
        const int64_t j0 = cf > 0 ? std::min(t.start / cf, pf - 1) : 0;
        const int64_t j1 = cf > 0 && t.stop > t.start ? std::min((t.stop - 1) / cf, pf - 1) : j0;
        fs = {0, 1, pf - 2, pf - 1, j0 - 1, j0, j0 + 1, j1 - 1, j1, j1 + 1, last_from, last_from + 1};
        for (const auto& [a, stride] : dim.from.axes) fs.insert(fs.end(), {(j0 + stride) % pf, (j0 + pf - stride) % pf});
        std::sort(fs.begin(), fs.end());
        fs.erase(std::unique(fs.begin(), fs.end()), fs.end());
        for (int64_t jf : fs) {
          if (jf < 0 || jf >= pf) continue;
          for (const auto& [a, stride] : dim.from.axes) coords[a] = (jf / stride) % mesh_.axis_size(a);
          add();
        }
      }
      return;
    }
    if (dim.relation == DimRelation::other && (to_fine || from_fine)) {
      const DimSplit& coarse = to_fine ? dim.from : dim.to;
      const DimSplit& fine = to_fine ? dim.to : dim.from;
      const int64_t kx = fine.pieces / coarse.pieces;
      const int64_t cf = to_fine ? dim.to_chunk : dim.from_chunk, cc = to_fine ? dim.from_chunk : dim.to_chunk;
      const size_t nc = coarse.axes.size();
      for (int64_t ic = 0; ic < coarse.pieces; ++ic) {
        for (const auto& [a, stride] : coarse.axes) coords[a] = (ic / stride) % mesh_.axis_size(a);
        const int64_t base = ic * kx * cf;
        std::vector<int64_t> xs{0, 1, kx - 2, kx - 1};
        auto near = [&](int64_t b) {
          if (b < base) return;
          const int64_t x = (b - base) / cf;
          xs.insert(xs.end(), {x - 1, x, x + 1});
        };
        for (int64_t j = base / cc; j * cc <= base + kx * cf && j * cc <= dim.n; ++j) near(j * cc);
        near(dim.n);
        std::sort(xs.begin(), xs.end());
        xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
        for (int64_t x : xs) {
          if (x < 0 || x >= kx) continue;
          for (size_t i = nc; i < fine.axes.size(); ++i) {
            const auto& [a, stride] = fine.axes[i];
            coords[a] = (x / stride) % mesh_.axis_size(a);
          }
          add();
        }
      }
      return;
    }
    std::vector<int> axes;
    for (const DimSplit* side : {&dim.from, &dim.to})
      for (const auto& [a, stride] : side->axes)
        if (std::find(axes.begin(), axes.end(), a) == axes.end()) axes.push_back(a);
    std::vector<size_t> at(axes.size(), 0);
    for (size_t i = 0; i < axes.size(); ++i) coords[axes[i]] = reps_[axes[i]][0];
    while (true) {
      add();
      size_t i = axes.size();
      while (i > 0 && ++at[i - 1] == reps_[axes[i - 1]].size()) {
        at[i - 1] = 0;
        coords[axes[i - 1]] = reps_[axes[i - 1]][0];
        --i;
      }
      if (i == 0) return;
      coords[axes[i - 1]] = reps_[axes[i - 1]][at[i - 1]];
    }
  }

  Shape shape_;
  Mesh mesh_;
  std::vector<Dim> dims_;
  std::vector<std::vector<int64_t>> reps_;
  bool separable_ = false;
  std::vector<std::vector<DimSample>> samples_;
  std::vector<std::vector<int64_t>> sample_coords_;
};

/// The geometry of a step, shared by the questions the planner asks about one pair of
/// shardings (remembered for the last few pairs on this thread).
struct SeenGeometry {
  Shape shape;
  NamedSharding from, to;
  std::shared_ptr<const StepGeometry> geometry;
};

/// This thread's remembered geometries and the slot the next one replaces.
inline std::pair<std::vector<SeenGeometry>, size_t>& geometry_memo() {
  thread_local std::pair<std::vector<SeenGeometry>, size_t> memo;
  return memo;
}

inline std::shared_ptr<const StepGeometry> step_geometry(const Shape& shape, const NamedSharding& from,
                                                         const NamedSharding& to) {
  using Seen = SeenGeometry;
  auto& [recent, next] = geometry_memo();
  for (const Seen& x : recent)
    if (x.from == from && x.to == to && x.shape == shape) return x.geometry;
  Seen x{shape, from, to, std::make_shared<const StepGeometry>(shape, from, to)};
  if (recent.size() < 8) {
    recent.push_back(std::move(x));
    return recent.back().geometry;
  }
  next = (next + 1) % recent.size();
  recent[next] = std::move(x);
  return recent[next].geometry;
}

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
  if (g.separable()) {
    for (size_t d = 0; d < g.ndim(); ++d)
      for (const auto& x : g.samples(d))
        if (!(x.from == x.to)) return false;
    return true;
  }
  return g.all_of([&](const std::vector<int64_t>& c) {
    for (size_t d = 0; d < g.ndim(); ++d)
      if (!(g.from_piece(d, c) == g.to_piece(d, c))) return false;
    return true;
  });
}

/// Every device's target piece lies inside its source piece.
inline bool target_inside_source(const StepGeometry& g) {
  if (g.separable()) {
    // Fails when one dimension has a non-empty target piece sticking out of its source piece
    // while every other dimension has some non-empty target piece.
    bool all_nonempty = true;
    for (size_t d = 0; d < g.ndim() && all_nonempty; ++d) {
      bool any = false;
      for (const auto& x : g.samples(d)) any = any || x.to.size() > 0;
      all_nonempty = any;
    }
    if (!all_nonempty) return true;
    for (size_t d = 0; d < g.ndim(); ++d)
      for (const auto& x : g.samples(d))
        if (x.to.size() > 0 && (x.to.start < x.from.start || x.to.stop > x.from.stop)) return false;
    return true;
  }
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
  if (g.separable()) {
    // The value grows with each dimension's target size and shrinks with its overlap: per target
    // size keep the smallest overlap, then try every combination (at most 3 sizes a dimension).
    std::vector<std::vector<std::pair<int64_t, int64_t>>> best(g.ndim());
    for (size_t d = 0; d < g.ndim(); ++d)
      for (const auto& x : g.samples(d)) {
        const int64_t t = x.to.size();
        const int64_t lo = std::max(x.from.start, x.to.start), hi = std::min(x.from.stop, x.to.stop);
        const int64_t o = hi > lo ? hi - lo : 0;
        auto it = std::find_if(best[d].begin(), best[d].end(), [&](const auto& p) { return p.first == t; });
        if (it == best[d].end()) best[d].emplace_back(t, o);
        else it->second = std::min(it->second, o);
      }
    int64_t most = 0;
    std::vector<size_t> at(g.ndim(), 0);
    while (true) {
      int64_t t = 1, o = 1;
      for (size_t d = 0; d < g.ndim(); ++d) {
        t *= best[d][at[d]].first;
        o *= best[d][at[d]].second;
      }
      most = std::max(most, reduce_group * t - o);
      size_t d = g.ndim();
      while (d > 0 && ++at[d - 1] == best[d - 1].size()) at[--d] = 0;
      if (d == 0) return most;
    }
  }
  return g.max_of([&](const std::vector<int64_t>& c) {
    const auto [t, o] = g.target_and_overlap(c);
    return reduce_group * t - o;
  });
}

}  // namespace dax::detail
