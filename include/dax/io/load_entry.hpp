// dax::load of one named array from a file that holds several (.npz, safetensors; a .npy's one
// array is the entry ""), into any sharding: member 0 reads the file's index and shares it, then
// each rank reads only the bytes of its own piece with pread, run by run. No checksum: these
// formats carry none that a piece can be checked against (a .npz's CRC covers whole entries).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <dax/array/dist_array.hpp>
#include <dax/array/reshard.hpp>
#include <dax/backend/cpu/memory.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/core/error.hpp>
#include <dax/io/coordination.hpp>
#include <dax/io/piece_io.hpp>
#include <dax/io/stored_file.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax {
namespace detail::stored {

/// Member 0 reads the index; every member gets it, or the same error. Ranks outside the mesh
/// (group == nullptr) read it themselves.
inline Index shared_index(Communicator* group, const std::string& path, const char* op) {
  if (group == nullptr) {
    try {
      return read_index(path);
    } catch (const Error& e) {
      fail(op, ": ", about(path, e.what()));
    }
  }
  std::string text, error;
  if (group->rank() == 0) {
    try {
      text = serialize(read_index(path));
    } catch (const Error& e) {
      error = cat(op, ": ", about(path, e.what()));
    }
  }
  checkpoint::agree_or_fail(*group, error);
  checkpoint::broadcast(*group, text, 0);
  return deserialize(text);
}

inline std::string entry_label(const std::string& path, const std::string& name) {
  return name.empty() ? path : cat(path, ": entry '", io::printable(name), "'");
}

inline const Located& find_entry(const Index& idx, const std::string& path, const std::string& name, const char* op) {
  for (const Located& l : idx.arrays)
    if (l.entry.name == name) return l;
  std::string names;
  for (size_t i = 0; i < idx.arrays.size() && i < 8; ++i)
    names += cat(i ? ", " : "", "'", io::printable(idx.arrays[i].entry.name), "'");
  if (idx.arrays.size() > 8) names += cat(" and ", idx.arrays.size() - 8, " more");
  fail(op, ": ", path, " has no entry '", io::printable(name), "' (its ", format_name(idx.format), " entries: ",
       names.empty() ? "none" : names, ")");
}

/// Loads the located array into `sharding`; collective over its mesh.
template <class T>
DistArray<T> load_located(const std::string& path, const Located& l, const NamedSharding& sharding, Communicator* group) {
  const std::string label = entry_label(path, l.entry.name);
  const std::string& spelled = l.entry.dtype;
  DAX_CHECK(l.entry.element.has_value(), "load: ", label, " holds '", io::printable(spelled),
            "' elements, which dax has no element type for");
  DAX_CHECK(*l.entry.element == dtype_v<T>, "load: ", label, " holds ", to_string(*l.entry.element), " ('", spelled,
            "'), not the ", to_string(dtype_v<T>), " asked for");
  const Shape& shape = l.entry.shape;
  try {
    sharding.check_rank(shape);
  } catch (const Error& e) {
    fail("load: ", label, ": ", e.what());
  }
  if (group == nullptr) return DistArray<T>(shape, sharding, nullptr);
  const Mesh& mesh = sharding.mesh();
  Runtime& rt = Runtime::current();
  const NamedSharding reduced =
      sharding.is_unreduced() ? NamedSharding(mesh, sharding.spec().without_unreduced()) : sharding;
  const Box box = reduced.device_indices(rt.rank(), shape);
  auto buffer = cpu::allocate(static_cast<size_t>(numel(box)) * sizeof(T));
  T* data = static_cast<T*>(buffer->data());
  std::string error;
  if (numel(box) > 0) {
    const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) error = cat("load: cannot open ", path, ": ", std::strerror(errno));
    else error = read_box(fd.get(), l.offset, shape, box, sizeof(T), reinterpret_cast<char*>(data));
    if (!error.empty() && fd.get() >= 0) error = cat("load: ", label, ": ", error);
  }
  if (error.empty() && l.swap) npy::swap_bytes(data, numel(box));
  if (error.empty() && dtype_v<T> == DType::boolean) {
    // A bool that is neither 0 nor 1 is no bool at all (reading it is undefined): name its byte.
    const auto* bytes = reinterpret_cast<const unsigned char*>(data);
    for (int64_t i = 0; i < numel(box) && error.empty(); ++i)
      if (bytes[i] > 1) {
        Box one = box;
        int64_t rest = i;
        for (size_t d = one.size(); d-- > 0;) {
          const int64_t at = one[d].start + rest % box[d].size();
          rest /= box[d].size();
          one[d] = {at, at + 1};
        }
        error = cat("load: ", label, " holds the byte ", static_cast<int>(bytes[i]), " at byte ",
                    l.offset + offset_in(full_box(shape), one), " of the file, where a bool must be 0 or 1");
      }
  }
  checkpoint::agree_or_fail(*group, error);
  if (dev::on_gpu()) buffer = dev::upload(data, numel(box));
  DistArray<T> out(shape, reduced, std::move(buffer));
  return sharding.is_unreduced() ? reshard(out, sharding) : out;
}

template <class T>
DistArray<T> load_entry(const std::filesystem::path& file, const std::string& name, const NamedSharding& sharding) {
  const Mesh& mesh = sharding.mesh();
  Runtime& rt = Runtime::current();
  rt.check_mesh(mesh);
  const std::string path = file.string();
  Communicator* group = mesh.contains(rt.rank()) ? &rt.mesh_group(mesh).host() : nullptr;
  const OpLabel label([&] {
    return cat("load ", path, " '", name, "' ", to_string(dtype_v<T>), " ", to_string(sharding.spec()));
  });
  const Index idx = shared_index(group, path, "load");
  return load_located<T>(path, find_entry(idx, path, name, "load"), sharding, group);
}

}  // namespace detail::stored

/// Loads the array `name` of a .npy, .npz or safetensors file (see dax::file_entries; a .npy's one
/// array is the entry "") into `sharding`, on any mesh: each rank reads only the bytes of its own
/// piece. T must be the stored element type (big-endian .npy data is swapped on reading). Any
/// malformed file, missing entry or type mismatch is a dax::Error on every rank of the mesh naming
/// the file, the entry and the byte. Collective over the mesh; ranks outside it read the headers
/// only and return an array without a piece.
template <class T>
DistArray<T> load(const std::filesystem::path& file, const std::string& name, const NamedSharding& sharding) {
  return detail::stored::load_entry<T>(file, name, sharding);
}

template <class T>
DistArray<T> load(const std::filesystem::path& file, const char* name, const NamedSharding& sharding) {
  return detail::stored::load_entry<T>(file, std::string(name), sharding);
}

/// Loads the entries named in `shardings` (all of element type T) from one .npz or safetensors
/// file, each into its sharding; the headers are read once per mesh. Collective, entries in the map's order.
template <class T>
std::map<std::string, DistArray<T>> load_entries(const std::filesystem::path& file,
                                                 const std::map<std::string, NamedSharding>& shardings) {
  std::map<std::string, DistArray<T>> out;
  Runtime& rt = Runtime::current();
  const std::string path = file.string();
  std::map<detail::Communicator*, detail::stored::Index> indexes;  // one read per group (usually one)
  for (const auto& [name, sharding] : shardings) {
    rt.check_mesh(sharding.mesh());
    detail::Communicator* group = sharding.mesh().contains(rt.rank()) ? &rt.mesh_group(sharding.mesh()).host() : nullptr;
    auto it = indexes.find(group);
    if (it == indexes.end()) it = indexes.emplace(group, detail::stored::shared_index(group, path, "load")).first;
    out.emplace(name, detail::stored::load_located<T>(path, detail::stored::find_entry(it->second, path, name, "load"),
                                                      sharding, group));
  }
  return out;
}

}  // namespace dax
