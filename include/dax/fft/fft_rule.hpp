// Where a distributed FFT transforms each axis: a pure function of the shape, the sharding and the
// axes, as FFTW's MPI interface and heFFTe plan their slabs and pencils. A transform along an axis
// needs that axis whole on every device, so the axes are done in (at most) two groups: those the
// input already holds whole, in the input's own layout, and those it splits, in a layout where the
// mesh axes that split them are moved onto other dimensions (one all-to-all, the "transpose" of a
// slab or pencil FFT). The result comes back to the input's layout (one more all-to-all) unless the
// caller keeps the transposed one, as FFTW_MPI_TRANSPOSED_OUT does.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/sharding/build.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax::detail {

/// What a transform does to element types: complex to complex, real to complex (the halved axis's
/// length n becomes n / 2 + 1), complex to real (the reverse).
enum class FftKind { c2c, r2c, c2r };

/// One local step: reshard to `layout`, then transform `axes` (each whole in it) on every device.
struct FftStage {
  NamedSharding layout;
  std::vector<int> axes;  // ascending; for r2c / c2r the halved axis is transformed in this stage when `halves`
  bool halves = false;    // this stage does the real <-> complex step (the halved axis)
};

struct FftRule {
  std::vector<FftStage> stages;
  NamedSharding output;  // the result's sharding (the input's, or the last stage's when transposed)
};

/// The dimensions an axis list names, normalised (negative from the end), checked: in range, none twice.
inline std::vector<int> fft_axes(const std::vector<int>& axes, size_t ndim, const char* op) {
  std::vector<int> out;
  for (int a : axes) {
    const int d = a < 0 ? a + static_cast<int>(ndim) : a;
    DAX_CHECK(d >= 0 && d < static_cast<int>(ndim), op, ": axis ", a, " is out of range for an array of rank ", ndim);
    DAX_CHECK(std::find(out.begin(), out.end(), d) == out.end(), op, ": axis ", a, " is named twice");
    out.push_back(d);
  }
  return out;
}

/// `s` with the mesh axes that split any of `axes` moved onto the other dimensions (each to the one
/// with the most elements per piece at that point, so the moved data stays as even as it can), or
/// dropped (replicated) where every dimension is one of `axes`.
inline NamedSharding fft_move_off(const NamedSharding& s, const Shape& shape, const std::vector<int>& axes) {
  auto dims = dims_of(s, shape.size());
  const auto in_axes = [&](size_t d) { return std::find(axes.begin(), axes.end(), static_cast<int>(d)) != axes.end(); };
  std::vector<int> moving;
  for (int a : axes) {
    moving.insert(moving.end(), dims[a].begin(), dims[a].end());
    dims[a].clear();
  }
  for (int mesh_axis : moving) {
    int best = -1;
    double best_size = -1;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (in_axes(d)) continue;
      int64_t parts = 1;
      for (int m : dims[d]) parts *= s.mesh().axis_size(m);
      const double per_piece = double(shape[d]) / double(parts);
      if (per_piece > best_size) {
        best_size = per_piece;
        best = static_cast<int>(d);
      }
    }
    if (best >= 0) dims[best].push_back(mesh_axis);
  }
  return make_sharding(s.mesh(), dims, {});
}

/// The stages of a transform of `axes` of an array of `shape` laid out as `in`. For r2c the halved
/// axis (`axes.back()`) is transformed in the first stage (the others then act on complex values);
/// for c2r in the last. Partial sums are summed first (the input layout without unreduced axes).
inline FftRule fft_rule(const Shape& shape, const NamedSharding& in, const std::vector<int>& axes, FftKind kind,
                        bool keep_transposed) {
  const NamedSharding start = with_unreduced_axes(in, shape.size(), {});
  std::vector<int> whole, split;
  for (int a : axes) (start.dim_axes(a).empty() ? whole : split).push_back(a);
  std::sort(whole.begin(), whole.end());
  std::sort(split.begin(), split.end());
  const int halved = axes.empty() ? -1 : axes.back();
  const auto has = [](const std::vector<int>& v, int a) { return std::find(v.begin(), v.end(), a) != v.end(); };
  FftRule rule{{}, start};
  if (split.empty()) {
    if (!whole.empty()) rule.stages.push_back({start, whole, kind != FftKind::c2c});
    return rule;
  }
  if (whole.empty() && split.size() == shape.size() && split.size() >= 2) {
    // Every dimension is split and transformed: no other dimension can hold the mesh axes while
    // they are. Two groups, as a 2-D pencil transform does: the largest axis (`keep`) takes every
    // mesh axis while the others are transformed, then they take them back while it is (the
    // halved axis's group first for r2c, last for c2r). One all-to-all between, none gathered.
    int keep = split.front();
    for (int a : split)
      if (shape[a] > shape[keep]) keep = a;
    std::vector<int> others;
    for (int a : split)
      if (a != keep) others.push_back(a);
    const bool keep_first = (kind == FftKind::r2c && keep == halved) || (kind == FftKind::c2r && keep != halved);
    const std::vector<int> first = keep_first ? std::vector<int>{keep} : others;
    const std::vector<int> second = keep_first ? others : std::vector<int>{keep};
    const NamedSharding one = fft_move_off(start, shape, first);
    const NamedSharding two = fft_move_off(one, shape, second);
    rule.stages.push_back({one, first, kind != FftKind::c2c && has(first, halved)});
    rule.stages.push_back({two, second, kind != FftKind::c2c && has(second, halved)});
    if (keep_transposed) rule.output = rule.stages.back().layout;
    return rule;
  }
  const NamedSharding moved = fft_move_off(start, shape, split);
  // The halved axis's group goes first for r2c and last for c2r; otherwise the whole axes go first
  // (their layout is the input's, so a transposed result needs only the one move).
  const bool split_first = (kind == FftKind::r2c && has(split, halved)) || (kind == FftKind::c2r && has(whole, halved));
  const FftStage whole_stage{start, whole, kind != FftKind::c2c && has(whole, halved)};
  const FftStage split_stage{moved, split, kind != FftKind::c2c && has(split, halved)};
  if (split_first) {
    rule.stages.push_back(split_stage);
    if (!whole.empty()) rule.stages.push_back(whole_stage);
  } else {
    if (!whole.empty()) rule.stages.push_back(whole_stage);
    rule.stages.push_back(split_stage);
  }
  if (keep_transposed) rule.output = rule.stages.back().layout;
  return rule;
}

}  // namespace dax::detail
