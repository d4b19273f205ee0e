// dax::save: an array as a standard NumPy .npy file. Every rank of the array's mesh writes its own
// piece in place with MPI-IO (replicated pieces once); the sidecar `<path>.dax` records the dtype,
// shape and checksum. Both appear under their names only once complete (temporary name, rename).
#pragma once

#include <dax/core/mpi.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <dax/array/dist_array.hpp>
#include <dax/array/reshard.hpp>
#include <dax/backend/cpu/memory.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/core/error.hpp>
#include <dax/io/checksum.hpp>
#include <dax/io/coordination.hpp>
#include <dax/io/mpi_io.hpp>
#include <dax/io/npy.hpp>
#include <dax/io/posix_file.hpp>
#include <dax/io/sidecar.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax {
namespace detail::checkpoint {

template <class T>
void save_file(const std::filesystem::path& path, const DistArray<T>& array) {
  const NamedSharding& sharding = array.sharding();
  const Mesh& mesh = sharding.mesh();
  Runtime& rt = Runtime::current();
  rt.check_mesh(mesh);
  if (sharding.is_unreduced()) {  // the file holds the value: sum the partials first
    save_file(path, reshard(array, NamedSharding(mesh, sharding.spec().without_unreduced())));
    return;
  }
  if (!mesh.contains(rt.rank())) return;
  const std::string name = path.string();
  const Shape& shape = array.shape();
  const Box& box = array.local_index();
  const std::string header = npy::write_header(npy::descr_of<T>(), shape);
  const int64_t data_bytes = numel(shape) * static_cast<int64_t>(sizeof(T));
  const bool writes = sharding.replica_id(rt.rank()) == 0;  // replicas are written once
  PieceView view;
  make_view<T>(view, "save", shape, box, writes, !pieces_are_contiguous(shape, sharding, true));
  Communicator& group = rt.mesh_group(mesh).host();  // host values only: see io/coordination.hpp
  const int me = group.rank();
  const T* data = array.local_data().data();
  std::unique_ptr<T[]> staged;  // MPI-IO writes from host memory: a GPU piece is copied down first
  if (dev::on_gpu() && array.local_size() > 0) {
    staged = std::make_unique_for_overwrite<T[]>(array.local_size());
    dev::to_host(staged.get(), data, array.local_size() * sizeof(T));
    data = staged.get();
  }
  const OpLabel label([&] {
    return cat("save ", name, " ", to_string(shape), " ", to_string(dtype_v<T>), " ", to_string(sharding.spec()));
  });

  std::string suffix = me == 0 ? unique_suffix() : std::string();
  broadcast(group, suffix, 0);
  const std::string tmp = name + ".tmp." + suffix;
  const std::string sidecar = name + ".dax", sidecar_tmp = sidecar + ".tmp." + suffix;
  const std::filesystem::path dir = path.parent_path();

  std::string error;
  if (me == 0 && !dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) error = cat("save: cannot create the directory ", dir.string(), ": ", ec.message());
  }
  agree_or_fail(group, error);  // no rank opens before the directory exists

  File file;
  const int rc =
      MPI_File_open(native_comm(group), tmp.c_str(), MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, file.out());
  if (rc != MPI_SUCCESS) error = cat("save: cannot create ", tmp, ": ", mpi_error_text(rc));
  agree_or_fail(group, error, [&] {
    if (me == 0) std::remove(tmp.c_str());
  });
  auto step = [&](int code, const char* call) {
    if (code != MPI_SUCCESS && error.empty())
      error = cat("save: writing ", tmp, " failed: ", call, ": ", mpi_error_text(code));
  };
  auto check_count = [&](const MPI_Status& status, MPI_Datatype type, int expected, const char* what) {
    int got = 0;
    MPI_Get_count(&status, type, &got);
    if (got != expected && error.empty())
      error = cat("save: writing ", tmp, " failed: wrote ", got, " of the ", expected, " ", what);
  };
  const std::string piece_text = cat("elements of the piece ", to_string(box));
  const int64_t total = static_cast<int64_t>(header.size()) + data_bytes;
  step(MPI_File_set_size(file.get(), total), "MPI_File_set_size");
  if (me == 0) {
    MPI_Status status;
    step(MPI_File_write_at(file.get(), 0, header.data(), static_cast<int>(header.size()), MPI_BYTE, &status),
         "MPI_File_write_at");
    check_count(status, MPI_BYTE, static_cast<int>(header.size()), "header bytes");
  }
  uint64_t local_sum = 0;
  if (view.collective) {
    step(MPI_File_set_view(file.get(), static_cast<MPI_Offset>(header.size()), view.element.get(),
                           view.filetype.get(), "native", MPI_INFO_NULL),
         "MPI_File_set_view");
    MPI_Status status;
    step(MPI_File_write_all(file.get(), data, view.count, view.element.get(), &status), "MPI_File_write_all");
    check_count(status, view.element.get(), view.count, piece_text.c_str());
    if (writes) local_sum = piece_checksum(data, shape, box);
  } else if (view.count > 0) {
    MPI_Request request = MPI_REQUEST_NULL;
    step(MPI_File_iwrite_at(file.get(), static_cast<MPI_Offset>(header.size()) + view.offset, data, view.count,
                            view.element.get(), &request),
         "MPI_File_iwrite_at");
    local_sum = run_checksum(data, view.count, view.first);  // while the write runs
    MPI_Status status{};
    if (request != MPI_REQUEST_NULL) {
      step(MPI_Wait(&request, &status), "MPI_Wait (MPI_File_iwrite_at)");
      check_count(status, view.element.get(), view.count, piece_text.c_str());
    }
  }
  step(MPI_File_sync(file.get()), "MPI_File_sync");
  step(file.close(), "MPI_File_close");
  agree_or_fail(group, error, [&] {  // every rank has closed the file: it is complete
    if (me == 0) std::remove(tmp.c_str());
  });
  const uint64_t checksum = sum_over(group, local_sum);
  if (me == 0) {
    const std::string text = sidecar_text({npy::descr_of<T>(), shape, static_cast<int64_t>(header.size()),
                                           data_bytes, checksum});
    error = write_durably(sidecar_tmp, text);
    if (!error.empty()) error = "save: " + error;
    // The sidecar first: once `path` exists, so does the sidecar that goes with it.
    if (error.empty() && std::rename(sidecar_tmp.c_str(), sidecar.c_str()) != 0)
      error = cat("save: cannot rename ", sidecar_tmp, " to ", sidecar, ": ", errno_text(errno));
    if (error.empty() && std::rename(tmp.c_str(), name.c_str()) != 0)
      error = cat("save: cannot rename ", tmp, " to ", name, ": ", errno_text(errno));
    if (error.empty()) sync_directory(dir);
    if (!error.empty()) {
      std::remove(tmp.c_str());
      std::remove(sidecar_tmp.c_str());
    }
  }
  agree_or_fail(group, error);  // and the renamed file exists when any rank returns
}

}  // namespace detail::checkpoint

/// Saves `array` as a NumPy .npy file at `path` (C order; NumPy reads it with np.load) plus the
/// sidecar `path + ".dax"` (dtype, shape, checksum). Collective over the array's mesh: each rank
/// writes its own piece in place (replicated pieces once); unreduced arrays are summed first.
/// Parent directories are created. The files appear under their names only when complete, and
/// exist on every rank of the mesh when it returns. Ranks outside the mesh do nothing.
template <class T>
void save(const std::filesystem::path& path, const DistArray<T>& array) {
  detail::checkpoint::save_file(path, array);
}

}  // namespace dax
