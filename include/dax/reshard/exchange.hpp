// What one device sends, receives and keeps in one step: the block-intersection rule every step
// kind shares. For a target piece, the source of each (source piece, partial) is the device that
// holds it and agrees with the receiver on every other mesh axis of the group, so a device is its
// own source whenever it holds the data, and replicas share the sending evenly.
#pragma once

#include <cstdint>
#include <vector>

#include <dax/core/shape.hpp>
#include <dax/reshard/step.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax::detail {

struct Exchange {
  std::vector<int> members;  // device ids of the group, in communicator rank order
  int self = 0;              // this device's position in `members`
  Box from_block, to_block;  // this device's piece before and after the step
  Box keep;                  // the part of to_block it holds already (added when reducing)
  std::vector<Box> send;     // send[j]: region for member j (empty when none; empty for self)
  std::vector<Box> recv;     // recv[j]: region from member j, copied or summed into to_block
  bool reduce = false;
};

inline bool has_axis(const std::vector<int>& axes, int axis) {
  for (int a : axes)
    if (a == axis) return true;
  return false;
}

/// Whether device `s` supplies data to device `d` in a step from `from`: they must agree on every
/// mesh axis except those splitting `from` (different pieces) and those being reduced (different
/// partials).
inline bool is_source(const NamedSharding& from, const std::vector<int>& reduce_axes,
                      const std::vector<int64_t>& s, const std::vector<int64_t>& d) {
  for (int a = 0; a < from.mesh().num_axes(); ++a)
    if (s[a] != d[a] && !from.splits(a) && !has_axis(reduce_axes, a)) return false;
  return true;
}

/// The exchange of `device` in a step from `from` to `to` over the mesh axes `axes`.
inline Exchange exchange_for(const Shape& shape, const NamedSharding& from, const NamedSharding& to,
                             const std::vector<int>& axes, const std::vector<int>& reduce_axes,
                             int device) {
  const Mesh& mesh = from.mesh();
  Exchange ex;
  ex.members = group_members(mesh, axes, device);
  ex.reduce = !reduce_axes.empty();
  const auto dc = mesh.coords(device);
  ex.from_block = from.box_at(dc, shape);
  ex.to_block = to.box_at(dc, shape);
  ex.keep = intersect(ex.from_block, ex.to_block);
  ex.send.resize(ex.members.size());
  ex.recv.resize(ex.members.size());
  for (size_t j = 0; j < ex.members.size(); ++j) {
    const int peer = ex.members[j];
    if (peer == device) {
      ex.self = static_cast<int>(j);
      ex.send[j] = ex.recv[j] = empty_box(shape.size());
      continue;
    }
    const auto pc = mesh.coords(peer);
    ex.recv[j] = is_source(from, reduce_axes, pc, dc) ? intersect(from.box_at(pc, shape), ex.to_block)
                                                      : empty_box(shape.size());
    ex.send[j] = is_source(from, reduce_axes, dc, pc) ? intersect(ex.from_block, to.box_at(pc, shape))
                                                      : empty_box(shape.size());
  }
  return ex;
}

inline int64_t received_elements(const Exchange& ex) {
  int64_t n = 0;
  for (size_t j = 0; j < ex.recv.size(); ++j)
    if (static_cast<int>(j) != ex.self) n += numel(ex.recv[j]);
  return n;
}

/// The mesh axes over which some device must receive data in a step from `from` to `to`
/// (reducing over `reduce_axes`): the smallest group that makes the step possible.
inline std::vector<int> involved_axes(const Shape& shape, const NamedSharding& from,
                                      const NamedSharding& to, const std::vector<int>& reduce_axes) {
  const Mesh& mesh = from.mesh();
  std::vector<bool> involved(mesh.num_axes(), false);
  for (int d : mesh.devices()) {
    const auto dc = mesh.coords(d);
    const Box target = to.box_at(dc, shape);
    if (numel(target) == 0) continue;
    for (int s : mesh.devices()) {
      if (s == d) continue;
      const auto sc = mesh.coords(s);
      if (!is_source(from, reduce_axes, sc, dc)) continue;
      if (numel(intersect(from.box_at(sc, shape), target)) == 0) continue;
      for (int a = 0; a < mesh.num_axes(); ++a)
        if (sc[a] != dc[a]) involved[a] = true;
    }
  }
  std::vector<int> out;
  for (int a = 0; a < mesh.num_axes(); ++a)
    if (involved[a]) out.push_back(a);
  return out;
}

/// Max over devices of the elements a plain exchange receives.
inline int64_t max_received(const Shape& shape, const NamedSharding& from, const NamedSharding& to,
                            const std::vector<int>& axes, const std::vector<int>& reduce_axes) {
  int64_t most = 0;
  for (int d : from.mesh().devices()) {
    const int64_t n = received_elements(exchange_for(shape, from, to, axes, reduce_axes, d));
    most = n > most ? n : most;
  }
  return most;
}

}  // namespace dax::detail
