// dax::save_safetensors: named arrays of any element types as one safetensors file, the format
// model weights are published in. Member 0 writes the header; each piece is written once (by the
// replica at coordinate 0 of the replicated axes) in place with pwrite; the file appears under its
// name only once complete (temporary name, then rename), as dax::save does.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <dax/array/dist_array.hpp>
#include <dax/array/reshard.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/core/error.hpp>
#include <dax/io/coordination.hpp>
#include <dax/io/piece_io.hpp>
#include <dax/io/posix_file.hpp>
#include <dax/io/safetensors.hpp>
#include <dax/io/stored_file.hpp>
#include <dax/io/text_cursor.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax {

/// One named array of a safetensors file: `{"embed", embed}`. Holds any element type.
class TensorEntry {
 public:
  template <class T>
  TensorEntry(std::string name, DistArray<T> array)
      : name_(std::move(name)), dtype_(dtype_v<T>), shape_(array.shape()), mesh_(array.sharding().mesh()) {
    prepare_ = [array = std::move(array)]() -> Writer {
      // Partial sums are summed first (collective over the mesh): the file holds the value.
      const DistArray<T> x = array.sharding().is_unreduced()
                                 ? reshard(array, NamedSharding(array.sharding().mesh(),
                                                                array.sharding().spec().without_unreduced()))
                                 : array;
      Runtime& rt = Runtime::current();
      if (!x.is_addressable() || x.sharding().replica_id(rt.rank()) != 0 || x.local_size() == 0) return {};
      auto host = std::make_shared<std::vector<T>>(x.local_to_host());
      return [host, shape = x.shape(), box = x.local_index()](int fd, int64_t offset) {
        return detail::stored::write_box(fd, offset, shape, box, sizeof(T),
                                         reinterpret_cast<const char*>(host->data()));
      };
    };
  }
  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Mesh& mesh() const { return mesh_; }

  /// Writes this rank's piece (if it writes one) at `offset`; returns the error ("" if none).
  using Writer = std::function<std::string(int fd, int64_t offset)>;
  /// Sums partials (collective) and copies this rank's piece to the host if it writes one.
  Writer prepare() const { return prepare_(); }

 private:
  std::string name_;
  DType dtype_;
  Shape shape_;
  Mesh mesh_;
  std::function<Writer()> prepare_;
};

namespace detail::stored {

/// Names and metadata go into the JSON as they are: no quotes, backslashes or control bytes.
inline void check_json_text(const char* what, const std::string& s) {
  for (unsigned char c : s)
    DAX_CHECK(c >= 0x20 && c != '"' && c != '\\', "save_safetensors: the ", what, " \"", io::printable(s),
              "\" holds a quote, backslash or control character, which dax does not write");
}

}  // namespace detail::stored

/// Saves `entries` as one safetensors file at `path` (parent directories created), with the
/// optional string `metadata` (`__metadata__`). Every entry must be on one mesh; collective over
/// it, every rank passing the same entries in the same order; ranks outside it do nothing.
/// Each piece is written once, in place; the file exists complete under its name on every rank of
/// the mesh when this returns, or not at all (dax::Error on every rank).
inline void save_safetensors(const std::filesystem::path& path, std::initializer_list<TensorEntry> entries,
                             const std::map<std::string, std::string>& metadata = {}) {
  using namespace detail;
  using namespace detail::checkpoint;
  DAX_CHECK(entries.size() > 0, "save_safetensors: no entries to save to ", path.string());
  const Mesh& mesh = entries.begin()->mesh();
  std::set<std::string> seen;
  std::vector<detail::safetensors::Tensor> tensors;
  for (const TensorEntry& e : entries) {
    DAX_CHECK(e.mesh() == mesh, "save_safetensors: the entry '", detail::io::printable(e.name()),
              "' is on another mesh than the first entry's; a file is written over one mesh");
    DAX_CHECK(!e.name().empty() && e.name() != "__metadata__", "save_safetensors: the entry name \"",
              detail::io::printable(e.name()), "\" is not allowed");
    detail::stored::check_json_text("entry name", e.name());
    DAX_CHECK(seen.insert(e.name()).second, "save_safetensors: the entry name \"", detail::io::printable(e.name()),
              "\" appears twice");
    tensors.push_back({e.name(), std::string(detail::safetensors::dtype_name(e.dtype())), e.shape(), 0, 0});
  }
  for (const auto& [k, v] : metadata) {
    detail::stored::check_json_text("metadata key", k);
    detail::stored::check_json_text("metadata value", v);
  }
  Runtime& rt = Runtime::current();
  rt.check_mesh(mesh);
  if (!mesh.contains(rt.rank())) return;
  const std::string name = path.string();
  const OpLabel label([&] { return cat("save_safetensors ", name); });
  std::vector<TensorEntry::Writer> writers;
  for (const TensorEntry& e : entries) writers.push_back(e.prepare());
  const std::string header = detail::safetensors::write_header(tensors, metadata);
  const int64_t data_start = static_cast<int64_t>(header.size());
  const int64_t total = data_start + (tensors.empty() ? 0 : tensors.back().end);

  Communicator& group = rt.mesh_group(mesh).host();
  const int me = group.rank();
  std::string suffix = me == 0 ? unique_suffix() : std::string();
  broadcast(group, suffix, 0);
  const std::string tmp = name + ".tmp." + suffix;
  const std::filesystem::path dir = path.parent_path();
  auto remove_tmp = [&] {
    if (me == 0) std::remove(tmp.c_str());
  };

  std::string error;
  if (me == 0) {  // the directory, the header and the file's full size, before anyone writes data
    std::error_code ec;
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    if (ec) error = cat("save_safetensors: cannot create the directory ", dir.string(), ": ", ec.message());
    const detail::stored::Fd fd(error.empty() ? ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)
                                              : -1);
    if (error.empty() && fd.get() < 0) error = cat("save_safetensors: cannot create ", tmp, ": ", errno_text(errno));
    if (error.empty() && ::ftruncate(fd.get(), total) != 0)
      error = cat("save_safetensors: cannot size ", tmp, ": ", errno_text(errno));
    if (error.empty()) {
      const std::string e = detail::stored::write_box(fd.get(), 0, {data_start}, {{0, data_start}}, 1, header.data());
      if (!e.empty()) error = cat("save_safetensors: ", tmp, ": ", e);
    }
  }
  agree_or_fail(group, error, remove_tmp);
  {
    const detail::stored::Fd fd(::open(tmp.c_str(), O_WRONLY | O_CLOEXEC));
    if (fd.get() < 0) error = cat("save_safetensors: cannot open ", tmp, ": ", errno_text(errno));
    for (size_t i = 0; i < writers.size() && error.empty(); ++i)
      if (writers[i]) {
        const std::string e = writers[i](fd.get(), data_start + tensors[i].begin);
        if (!e.empty()) error = cat("save_safetensors: ", tmp, ": entry '", tensors[i].name, "': ", e);
      }
    if (error.empty() && fd.get() >= 0 && ::fsync(fd.get()) != 0)
      error = cat("save_safetensors: cannot sync ", tmp, ": ", errno_text(errno));
  }
  agree_or_fail(group, error, remove_tmp);  // every piece is in the file
  if (me == 0) {
    if (std::rename(tmp.c_str(), name.c_str()) != 0) {
      error = cat("save_safetensors: cannot rename ", tmp, " to ", name, ": ", errno_text(errno));
      std::remove(tmp.c_str());
    } else {
      sync_directory(dir);
    }
  }
  agree_or_fail(group, error);
}

}  // namespace dax
