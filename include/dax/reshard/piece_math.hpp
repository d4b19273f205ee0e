// Closed-form piece arithmetic for a step between two shardings, independent of the device count.
// A device's piece in each array dimension depends only on its coordinates on the mesh axes that
// split that dimension, and under the ceil-chunk rule a piece's size and place change with a
// coordinate only where its piece index crosses a few thresholds (the last full piece, the last
// non-empty one). So a property of every device (equal pieces, containment, the most a device
// receives) is decided on a few representative coordinates per mesh axis: 0, 1, the last two, and
// the neighbours of those thresholds. Dimensions that share no mesh axis vary independently and
// are sampled apart; a dimension split by unrelated axes is sampled by target-piece sizes and
// source-piece boundaries, a finer split whose uneven chunks drift off the coarser grid by the
// coarse pieces that decide, and either also where the dimensions it shares an axis with change.
// What is left (several re-split dimensions in one group) takes every coordinate of its axes:
// one pass over devices, never over pairs.
#pragma once

#include <dax/core/compiled_mode.hpp>
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
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
  int64_t index(std::span<const int64_t> coords) const {
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

/// The geometry of a step from `from` to `to` on arrays of `shape`. Dimensions that share a mesh
/// axis (on either side) vary together and form a group; groups vary independently, so a property
/// of every device combines per-group facts, each decided on the group's samples: devices that
/// stand for all the others in every question the planner asks.
class StepGeometry {
 public:
  StepGeometry(const Shape& shape, const NamedSharding& from, const NamedSharding& to)
      : shape_(shape), mesh_(from.mesh()), na_(static_cast<size_t>(mesh_.num_axes())) {
    for (size_t d = 0; d < shape.size(); ++d) {
      Dim dim{shape[d], DimSplit(mesh_, from.dim_axes(d)), DimSplit(mesh_, to.dim_axes(d)), DimRelation::other};
      dim.relation = relation(dim);
      dim.from_chunk = (dim.n + dim.from.pieces - 1) / dim.from.pieces;
      dim.to_chunk = (dim.n + dim.to.pieces - 1) / dim.to.pieces;
      dims_.push_back(std::move(dim));
    }
    reps_.resize(na_);
    for (size_t a = 0; a < na_; ++a) reps_[a] = representatives(static_cast<int>(a), dims_.size());
    make_groups();
    for (Group& g : groups_) group_samples(g);
  }

  size_t ndim() const { return dims_.size(); }
  DimRelation relation(size_t d) const { return dims_[d].relation; }
  const DimSplit& from_split(size_t d) const { return dims_[d].from; }
  const DimSplit& to_split(size_t d) const { return dims_[d].to; }
  /// The chunk (largest piece) of dimension d's source split.
  int64_t from_chunk(size_t d) const { return dims_[d].from_chunk; }

  Slice from_piece(size_t d, std::span<const int64_t> c) const {
    const Dim& dim = dims_[d];
    return piece(dim.n, dim.from_chunk, dim.from.index(c));
  }
  Slice to_piece(size_t d, std::span<const int64_t> c) const {
    const Dim& dim = dims_[d];
    return piece(dim.n, dim.to_chunk, dim.to.index(c));
  }

  /// Groups of dimensions that vary together, each with its samples: coordinates on every mesh
  /// axis (0 on the axes of other groups).
  size_t num_groups() const { return groups_.size(); }
  size_t group_of(size_t d) const { return group_of_[d]; }
  const std::vector<size_t>& group_dims(size_t g) const { return groups_[g].dims; }
  size_t num_samples(size_t g) const { return groups_[g].count; }
  std::span<const int64_t> sample(size_t g, size_t i) const { return {groups_[g].coords.data() + i * na_, na_}; }

  /// Whether the device at `c` has a non-empty target piece in every dimension of group g.
  bool target_nonempty(size_t g, std::span<const int64_t> c) const {
    for (size_t d : groups_[g].dims)
      if (to_piece(d, c).size() == 0) return false;
    return true;
  }

 private:
  struct Dim {
    int64_t n;
    DimSplit from, to;
    DimRelation relation;
    int64_t from_chunk = 0, to_chunk = 0;
  };
  struct Group {
    std::vector<size_t> dims;
    std::vector<int> axes;
    std::vector<int64_t> coords;  // samples, na_ coordinates each
    size_t count = 0;
  };
  using AxisValues = std::vector<std::pair<int, std::vector<int64_t>>>;

  /// chunk_piece with the chunk computed once.
  static Slice piece(int64_t n, int64_t chunk, int64_t i) {
    const int64_t lo = i * chunk, hi = lo + chunk;
    return {lo < n ? lo : n, hi < n ? hi : n};
  }

  static bool uses(const Dim& dim, int a) { return dim.from.uses(a) || dim.to.uses(a); }

  /// Sorted distinct values of `v` in [0, m).
  static std::vector<int64_t> within(std::vector<int64_t> v, int64_t m) {
    std::erase_if(v, [&](int64_t x) { return x < 0 || x >= m; });
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
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

  /// Representative coordinates of mesh axis `a` for the dimensions other than `skip`: 0, 1, the
  /// last two and the neighbours of each split's thresholds; every coordinate when a dimension
  /// split by unrelated axes uses it.
  std::vector<int64_t> representatives(int a, size_t skip) const {
    const int64_t m = mesh_.axis_size(a);
    bool used = false;
    std::vector<int64_t> r{0, 1, m - 2, m - 1};
    for (size_t d = 0; d < dims_.size(); ++d) {
      const Dim& dim = dims_[d];
      if (d == skip) continue;
      for (const DimSplit* side : {&dim.from, &dim.to}) {
        if (!side->uses(a)) continue;
        used = true;
        if (dim.relation == DimRelation::other) {
          std::vector<int64_t> every(m);
          for (int64_t i = 0; i < m; ++i) every[i] = i;
          return every;
        }
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
    return used ? within(std::move(r), m) : std::vector<int64_t>{0};
  }

  /// Dimensions joined by the mesh axes they share, in order of their first dimension.
  void make_groups() {
    std::vector<size_t> root(dims_.size());
    for (size_t d = 0; d < dims_.size(); ++d) root[d] = d;
    auto find = [&](size_t d) {
      while (root[d] != d) d = root[d] = root[root[d]];
      return d;
    };
    std::vector<int> first(na_, -1);
    for (size_t d = 0; d < dims_.size(); ++d)
      for (const DimSplit* side : {&dims_[d].from, &dims_[d].to})
        for (const auto& [a, stride] : side->axes) {
          if (first[a] < 0) first[a] = static_cast<int>(d);
          else root[find(d)] = find(static_cast<size_t>(first[a]));
        }
    std::vector<int> group_at(dims_.size(), -1);
    group_of_.resize(dims_.size());
    for (size_t d = 0; d < dims_.size(); ++d) {
      const size_t r = find(d);
      if (group_at[r] < 0) {
        group_at[r] = static_cast<int>(groups_.size());
        groups_.emplace_back();
      }
      group_of_[d] = static_cast<size_t>(group_at[r]);
      groups_[group_of_[d]].dims.push_back(d);
    }
    for (size_t a = 0; a < na_; ++a)
      if (first[a] >= 0) groups_[group_of_[first[a]]].axes.push_back(static_cast<int>(a));
  }

  /// Appends `coords` with every combination of the given values on the given axes.
  void add_product(Group& g, std::vector<int64_t> coords, const AxisValues& axes) const {
    std::vector<size_t> at(axes.size(), 0);
    for (size_t i = 0; i < axes.size(); ++i) coords[axes[i].first] = axes[i].second[0];
    while (true) {
      g.coords.insert(g.coords.end(), coords.begin(), coords.end());
      ++g.count;
      size_t i = axes.size();
      while (i > 0 && ++at[i - 1] == axes[i - 1].second.size()) {
        at[i - 1] = 0;
        coords[axes[i - 1].first] = axes[i - 1].second[0];
        --i;
      }
      if (i == 0) return;
      coords[axes[i - 1].first] = axes[i - 1].second[at[i - 1]];
    }
  }

  AxisValues reps_of(const std::vector<int>& axes) const {
    AxisValues out;
    for (int a : axes) out.emplace_back(a, reps_[a]);
    return out;
  }

  /// A group's samples. One dimension: its own representatives. Several, none split by unrelated
  /// axes: every combination of the axes' representatives. Several where one dimension d0 is
  /// split by unrelated axes and shares one axis with the rest (`P('x')` -> `P('y', 'x')`, or
  /// `P('x', 'y')` -> `P(('x', 'y'))`): d0's samples, taking on the shared axis also every value
  /// near the others' representatives, times the representatives of the others' own axes.
  /// Otherwise every coordinate of the group's axes.
  void group_samples(Group& g) const {
    const std::vector<int64_t> origin(na_, 0);
    if (g.dims.size() == 1) return dim_samples(g.dims[0], g, -1, {}, {});
    std::vector<size_t> unrelated;
    for (size_t d : g.dims)
      if (dims_[d].relation == DimRelation::other) unrelated.push_back(d);
    if (unrelated.size() == 1) {
      const size_t d0 = unrelated[0];
      if (const int shared = coupled_axis(d0, g); shared >= 0) {
        std::vector<int> own_axes;
        for (int a : g.axes)
          if (!uses(dims_[d0], a)) own_axes.push_back(a);
        return dim_samples(d0, g, shared, representatives(shared, d0), reps_of(own_axes));
      }
    }
    add_product(g, origin, reps_of(g.axes));  // every coordinate where a dimension is unrelated
  }

  /// The axis dimension d0 shares with the rest of its group, when it is the only one and d0's
  /// sampler can take extra values of it: the sole axis of one side of an unrelated split, or the
  /// sole axis a finer split adds to a coarser one. Otherwise -1.
  int coupled_axis(size_t d0, const Group& g) const {
    const Dim& dim = dims_[d0];
    int shared = -1;
    for (int a : g.axes) {
      if (!uses(dim, a)) continue;
      bool elsewhere = false;
      for (size_t d : g.dims) elsewhere = elsewhere || (d != d0 && uses(dims_[d], a));
      if (!elsewhere) continue;
      if (shared >= 0) return -1;
      shared = a;
    }
    if (shared < 0) return -1;
    if (disjoint(dim)) {
      for (const DimSplit* side : {&dim.from, &dim.to})
        if (side->axes.size() == 1 && side->axes[0].first == shared) return shared;
      return -1;
    }
    const bool to_fine = dim.to.refines(dim.from);
    if (!to_fine && !dim.from.refines(dim.to)) return -1;
    const DimSplit& coarse = to_fine ? dim.from : dim.to;
    const DimSplit& fine = to_fine ? dim.to : dim.from;
    return fine.axes.size() == coarse.axes.size() + 1 && fine.axes.back().first == shared ? shared : -1;
  }

  static bool disjoint(const Dim& dim) {
    for (const auto& [a, stride] : dim.from.axes)
      if (dim.to.uses(a)) return false;
    return true;
  }

  /// The representatives of dimension d (times `rest`, the values of its group's other axes).
  /// When `shared` >= 0, the values its sampler takes on that axis also include every value
  /// within 2 of `extra`: the other dimensions of its group change only there, so each stretch
  /// where both are unchanged keeps its first, second and last members.
  /// Splits that nest or are unrelated use the axes' representative coordinates; a finer split
  /// whose uneven chunks drift off the coarser grid takes the coarse pieces that decide (all of
  /// them, or with one coarse axis and a finer target, those near thresholds; see below) and,
  /// within each, the fine offsets where a fine piece meets a coarse boundary or the end of the
  /// array (between those, nothing about the two pieces changes).
  void dim_samples(size_t d, Group& out, int shared, const std::vector<int64_t>& extra, const AxisValues& rest) const {
    const Dim& dim = dims_[d];
    std::vector<int64_t> coords(na_, 0);
    auto add = [&] { add_product(out, coords, rest); };
    auto widen = [&](std::vector<int64_t>& v, const DimSplit& side, size_t at) {
      if (shared < 0 || side.axes.size() != at + 1 || side.axes[at].first != shared) return;
      for (int64_t e : extra)
        for (int64_t k = -2; k <= 2; ++k) v.push_back(e + k);
    };
    const bool to_fine = dim.to.refines(dim.from), from_fine = dim.from.refines(dim.to);
    if (dim.relation == DimRelation::other && disjoint(dim)) {
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
      widen(ts, dim.to, 0);
      std::vector<int64_t> fs;
      for (int64_t it : within(std::move(ts), pt)) {
        for (const auto& [a, stride] : dim.to.axes) coords[a] = (it / stride) % mesh_.axis_size(a);
        const Slice t = piece(dim.n, ct, it);
        const int64_t j0 = cf > 0 ? std::min(t.start / cf, pf - 1) : 0;
        const int64_t j1 = cf > 0 && t.stop > t.start ? std::min((t.stop - 1) / cf, pf - 1) : j0;
        fs = {0, 1, pf - 2, pf - 1, j0 - 1, j0, j0 + 1, j1 - 1, j1, j1 + 1, last_from, last_from + 1};
        for (const auto& [a, stride] : dim.from.axes) fs.insert(fs.end(), {(j0 + stride) % pf, (j0 + pf - stride) % pf});
        widen(fs, dim.from, 0);
        for (int64_t jf : within(std::move(fs), pf)) {
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
      for (int64_t ic : coarse_pieces(dim, to_fine && nc == 1, kx, cf, cc, coarse.pieces)) {
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
        widen(xs, fine, nc);
        for (int64_t x : within(std::move(xs), kx)) {
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
    AxisValues values = reps_of(axes);
    values.insert(values.end(), rest.begin(), rest.end());
    add_product(out, coords, values);
  }

  /// The coarse pieces a drifting split samples. With one coarse axis on the source side, a
  /// device's fine target piece starts s = ic·(kx·cf − cc) + x·cf after its source piece (ic, x:
  /// its coarse piece and fine offset), and everything the planner asks of the pair (the overlap,
  /// containment, whether another source coordinate sends) is monotone in s while the two pieces
  /// keep their size classes (full, short, empty). s is extreme over such a region at its
  /// ends or where the region's bound on the fine index ic·kx + x starts to bind, so the coarse
  /// pieces near 0, the last, the coarse size thresholds and the fine thresholds over kx decide.
  /// Otherwise (several coarse axes compare digits; a finer source compares fine offsets) all.
  static std::vector<int64_t> coarse_pieces(const Dim& dim, bool bounded, int64_t kx, int64_t cf, int64_t cc,
                                            int64_t pc) {
    std::vector<int64_t> ics;
    if (!bounded) {
      ics.resize(pc);
      for (int64_t i = 0; i < pc; ++i) ics[i] = i;
      return ics;
    }
    ics = {0, 1, pc - 2, pc - 1};
    for (int64_t t : {dim.n / cc, (dim.n + cc - 1) / cc - 1}) ics.insert(ics.end(), {t - 1, t, t + 1});
    for (int64_t f : {dim.n / cf, (dim.n + cf - 1) / cf - 1})
      for (int64_t k = -2; k <= 2; ++k) ics.push_back(f / kx + k);
    return within(std::move(ics), pc);
  }

  Shape shape_;
  Mesh mesh_;
  size_t na_;
  std::vector<Dim> dims_;
  std::vector<std::vector<int64_t>> reps_;
  std::vector<Group> groups_;
  std::vector<size_t> group_of_;
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

DAX_OUTLINE std::shared_ptr<const StepGeometry> step_geometry(const Shape& shape, const NamedSharding& from,
                                                         const NamedSharding& to)
#if DAX_HEADER_DEFINITIONS
{
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
#else
;
#endif

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
  for (size_t k = 0; k < g.num_groups(); ++k)
    for (size_t i = 0; i < g.num_samples(k); ++i) {
      const auto c = g.sample(k, i);
      for (size_t d : g.group_dims(k))
        if (!(g.from_piece(d, c) == g.to_piece(d, c))) return false;
    }
  return true;
}

/// Whether every group has a device whose target piece is non-empty in all its dimensions (else
/// no device has a non-empty target piece).
inline bool some_target_nonempty(const StepGeometry& g) {
  for (size_t k = 0; k < g.num_groups(); ++k) {
    bool any = false;
    for (size_t i = 0; i < g.num_samples(k) && !any; ++i) any = g.target_nonempty(k, g.sample(k, i));
    if (!any) return false;
  }
  return true;
}

/// Every device's target piece lies inside its source piece.
inline bool target_inside_source(const StepGeometry& g) {
  // Fails when a device of one group has a non-empty target piece sticking out of its source
  // piece, non-empty in the group's other dimensions, while every other group has a device with
  // a non-empty target piece.
  if (!some_target_nonempty(g)) return true;
  for (size_t k = 0; k < g.num_groups(); ++k)
    for (size_t i = 0; i < g.num_samples(k); ++i) {
      const auto c = g.sample(k, i);
      if (!g.target_nonempty(k, c)) continue;
      for (size_t d : g.group_dims(k)) {
        const Slice f = g.from_piece(d, c), t = g.to_piece(d, c);
        if (t.start < f.start || t.stop > f.stop) return false;
      }
    }
  return true;
}

/// The most elements a device receives when every device gets its target piece from the devices
/// holding it, summing partials over `reduce_group` devices: of the reduce_group copies of its
/// target piece that exist across sources, it holds the part overlapping its own piece.
DAX_OUTLINE int64_t most_received(const StepGeometry& g, int64_t reduce_group)
#if DAX_HEADER_DEFINITIONS
{
  // The value grows with each group's target size and shrinks with its overlap: per target size
  // keep the smallest overlap, then try every combination of the groups' sizes.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> best(g.num_groups());
  for (size_t k = 0; k < g.num_groups(); ++k)
    for (size_t i = 0; i < g.num_samples(k); ++i) {
      const auto c = g.sample(k, i);
      int64_t t = 1, o = 1;
      for (size_t d : g.group_dims(k)) {
        const Slice f = g.from_piece(d, c), s = g.to_piece(d, c);
        t *= s.size();
        const int64_t lo = std::max(f.start, s.start), hi = std::min(f.stop, s.stop);
        o *= hi > lo ? hi - lo : 0;
      }
      auto it = std::find_if(best[k].begin(), best[k].end(), [&](const auto& p) { return p.first == t; });
      if (it == best[k].end()) best[k].emplace_back(t, o);
      else it->second = std::min(it->second, o);
    }
  int64_t most = 0;
  std::vector<size_t> at(g.num_groups(), 0);
  while (true) {
    int64_t t = 1, o = 1;
    for (size_t k = 0; k < g.num_groups(); ++k) {
      t *= best[k][at[k]].first;
      o *= best[k][at[k]].second;
    }
    most = std::max(most, reduce_group * t - o);
    size_t k = g.num_groups();
    while (k > 0 && ++at[k - 1] == best[k - 1].size()) at[--k] = 0;
    if (k == 0) return most;
  }
}
#else
;
#endif

}  // namespace dax::detail
