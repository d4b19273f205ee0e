// The exchange behind slicing a split dimension. The slice keeps its input's spec, so each device
// receives, from the devices that hold them, only the kept elements of its new piece that it does
// not hold already (the lower bound); the slice's cotangent (pad) is the same exchange reversed.
// Pure: an ordinary step's Exchange, every box in the window's coordinates (the result's indices).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <dax/core/shape.hpp>
#include <dax/reshard/exchange.hpp>
#include <dax/sharding/chunk.hpp>
#include <dax/sharding/mesh.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax::detail {

/// x[lo : lo + step * shape : step] per dimension of an array of shape `whole`: the slice's
/// result has shape `shape`, its index j reading the input's lo + j * step.
struct Window {
  Shape whole;
  std::vector<int64_t> lo, step;
  Shape shape;
  friend bool operator==(const Window&, const Window&) = default;
};

/// Whether every step is 1: the window is then one box of the input, moved by -lo.
inline bool unit_step(const Window& w) {
  for (int64_t b : w.step)
    if (b != 1) return false;
  return true;
}

/// Of the input indices `rows`, the result indices j whose input index lo + j * step they hold.
inline Slice kept_rows(const Slice& rows, int64_t lo, int64_t step, int64_t len) {
  const auto first_at_or_after = [&](int64_t i) {  // ceil((i - lo) / step), within [0, len]
    const int64_t t = i - lo;
    const int64_t j = t >= 0 ? (t + step - 1) / step : -(-t / step);
    return std::clamp<int64_t>(j, 0, len);
  };
  return {first_at_or_after(rows.start), first_at_or_after(rows.stop)};
}

/// The part of the window an input piece holds, as a box of result indices.
inline Box kept_box(const Box& piece, const Window& w) {
  Box out(piece.size());
  for (size_t d = 0; d < piece.size(); ++d) out[d] = kept_rows(piece[d], w.lo[d], w.step[d], w.shape[d]);
  return out;
}

/// `box` moved by -lo in every dimension: an input piece in the window's coordinates.
inline Box shifted_back(Box box, const std::vector<int64_t>& lo) {
  for (size_t d = 0; d < box.size(); ++d) box[d] = {box[d].start - lo[d], box[d].stop - lo[d]};
  return box;
}

/// The block an input piece's buffer covers in the window's coordinates. With unit steps it is the
/// piece as it is (moved by -lo), so the exchange reads or writes it in place; a strided window's
/// kept elements are no box there, so the slice gathers them into a dense block of their own first.
inline Box input_block(const Box& piece, const Window& w) {
  return unit_step(w) ? shifted_back(piece, w.lo) : kept_box(piece, w);
}

/// The mesh axes over which elements move when both the input (shape w.whole) and the result
/// (shape w.shape) are laid out by the spec of `s`: those splitting a dimension where some
/// result piece keeps an input row that the input piece with the same index does not hold. Decided
/// per dimension from the sizes alone, so every device of the mesh agrees without talking.
inline std::vector<int> window_moving_axes(const Window& w, const NamedSharding& s) {
  std::vector<int> axes;
  if (numel(w.shape) == 0) return axes;
  for (size_t d = 0; d < w.shape.size(); ++d) {
    const int64_t k = s.num_pieces(d);
    if (k == 1) continue;
    bool moves = false;
    for (int64_t i = 0; i < k && !moves; ++i) {
      const Slice out = chunk_piece(w.shape[d], k, i);
      if (out.size() == 0) continue;
      const Slice in = chunk_piece(w.whole[d], k, i);
      const int64_t first = w.lo[d] + out.start * w.step[d], last = w.lo[d] + (out.stop - 1) * w.step[d];
      moves = first < in.start || last >= in.stop;
    }
    if (!moves) continue;
    for (int a : s.dim_axes(d))
      if (s.mesh().axis_size(a) > 1) axes.push_back(a);
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

/// One device's part in moving the window between pieces of the input and of the result (both
/// laid out by the spec of `s`) over the group of mesh axes `axes`. `into_window`: the slice, from
/// the input's block (input_block) into the result's piece; otherwise its reverse, the pad, from the
/// result's piece into the input's block. Either way only kept elements move: the input side's
/// regions are cut from the kept part of its piece, never from the rows outside the window.
inline Exchange window_exchange_for(const Window& w, const NamedSharding& s, const std::vector<int>& axes,
                                    int device, bool into_window) {
  const Mesh& mesh = s.mesh();
  const auto held = [&](const std::vector<int64_t>& c) { return kept_box(s.box_at(c, w.whole), w); };
  const auto result = [&](const std::vector<int64_t>& c) { return s.box_at(c, w.shape); };
  const auto source = [&](const std::vector<int64_t>& c) { return into_window ? held(c) : result(c); };
  const auto target = [&](const std::vector<int64_t>& c) { return into_window ? result(c) : held(c); };
  Exchange ex;
  ex.members = group_members(mesh, axes, device);
  const auto dc = mesh.coords(device);
  const Box input = input_block(s.box_at(dc, w.whole), w);
  ex.from_block = into_window ? input : result(dc);
  ex.to_block = into_window ? result(dc) : input;
  const Box from = source(dc), to = target(dc);
  ex.keep = intersect(from, to);
  ex.send.resize(ex.members.size());
  ex.recv.resize(ex.members.size());
  for (size_t j = 0; j < ex.members.size(); ++j) {
    if (ex.members[j] == device) {
      ex.self = static_cast<int>(j);
      ex.send[j] = ex.recv[j] = empty_box(w.shape.size());
      continue;
    }
    const auto pc = mesh.coords(ex.members[j]);
    ex.send[j] = intersect(from, target(pc));
    ex.recv[j] = intersect(source(pc), to);
  }
  return ex;
}

}  // namespace dax::detail
