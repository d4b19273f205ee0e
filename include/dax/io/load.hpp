// dax::load: a .npy file (dax::save's or numpy.save's) into any sharding, on any mesh and rank
// count. Every check that needs no data runs first (io/verify.hpp); then each rank reads only its
// own piece with MPI-IO and, when a sidecar is there, the pieces' checksums are summed and
// compared with the sidecar's.
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
#include <dax/io/sidecar.hpp>
#include <dax/io/verify.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax {
namespace detail::checkpoint {

/// Bytes per independent read: the checksum of one chunk runs while the next is read.
inline constexpr int64_t read_chunk_bytes = int64_t(16) << 20;

template <class T>
DistArray<T> load_file(const std::filesystem::path& path, const NamedSharding& sharding) {
  const Mesh& mesh = sharding.mesh();
  Runtime& rt = Runtime::current();
  rt.check_mesh(mesh);
  const std::string name = path.string();
  const bool member = mesh.contains(rt.rank());
  // Ranks outside the mesh take part in nothing, but still need the shape: they read the header
  // and sidecar themselves (and refuse what they see there, with the same messages).
  Communicator* group = member ? &rt.mesh_group(mesh).host() : nullptr;  // host values only
  const OpLabel label([&] { return cat("load ", name, " ", to_string(dtype_v<T>), " ", to_string(sharding.spec())); });
  const Facts facts = member ? shared_facts(*group, name) : read_facts(name);
  const Verified v = verify<T>(name, facts);
  const Shape& shape = v.shape;
  try {
    sharding.check_rank(shape);
  } catch (const Error& e) {
    fail("load: ", name, ": ", e.what());
  }
  if (!member) return DistArray<T>(shape, sharding, nullptr);

  const NamedSharding reduced =
      sharding.is_unreduced() ? NamedSharding(mesh, sharding.spec().without_unreduced()) : sharding;
  const Box box = reduced.device_indices(rt.rank(), shape);
  PieceView view;
  make_view<T>(view, "load", shape, box, true, !pieces_are_contiguous(shape, reduced, false));
  // Read into host memory (MPI-IO's), uploaded once at the end when the backend is a GPU.
  auto buffer = cpu::allocate(static_cast<size_t>(numel(box)) * sizeof(T));
  T* data = static_cast<T*>(buffer->data());
  const bool counts = reduced.replica_id(rt.rank()) == 0;  // each element enters the checksum once
  uint64_t local_sum = 0;
  std::string error;
  if (numel(shape) > 0) {
    File file;
    const int rc =
        MPI_File_open(native_comm(*group), name.c_str(), MPI_MODE_RDONLY, MPI_INFO_NULL, file.out());
    if (rc != MPI_SUCCESS) error = cat("load: cannot open ", name, ": ", mpi_error_text(rc));
    agree_or_fail(*group, error);
    auto step = [&](int code, const char* call) {
      if (code != MPI_SUCCESS && error.empty())
        error = cat("load: reading ", name, " failed: ", call, ": ", mpi_error_text(code));
    };
    auto check_count = [&](const MPI_Status& status, int64_t done, int expected) {
      int got = 0;
      MPI_Get_count(&status, view.element.get(), &got);
      if (got != expected && error.empty())
        error = cat("load: ", name, " ended while reading the piece ", to_string(box), ": read ", done + got, " of ",
                    view.count, " elements");
    };
    if (view.collective) {
      step(MPI_File_set_view(file.get(), v.data_offset, view.element.get(), view.filetype.get(), "native",
                             MPI_INFO_NULL),
           "MPI_File_set_view");
      MPI_Status status;
      step(MPI_File_read_all(file.get(), data, view.count, view.element.get(), &status), "MPI_File_read_all");
      check_count(status, 0, view.count);
      if (counts && error.empty()) local_sum = piece_checksum(data, shape, box);
    } else {
      // Chunk by chunk, each chunk's checksum while the next one is read.
      const int64_t chunk = std::max<int64_t>(1, read_chunk_bytes / static_cast<int64_t>(sizeof(T)));
      auto start = [&](int64_t at, MPI_Request& request) {
        const int n = static_cast<int>(std::min<int64_t>(chunk, view.count - at));
        step(MPI_File_iread_at(file.get(), v.data_offset + view.offset + at * static_cast<int64_t>(sizeof(T)),
                               data + at, n, view.element.get(), &request),
             "MPI_File_iread_at");
        return n;
      };
      MPI_Request request = MPI_REQUEST_NULL;
      int64_t at = 0;
      int n = view.count > 0 ? start(0, request) : 0;
      while (at < view.count && error.empty()) {
        MPI_Status status{};
        if (request != MPI_REQUEST_NULL) step(MPI_Wait(&request, &status), "MPI_Wait (MPI_File_iread_at)");
        check_count(status, at, n);
        if (!error.empty()) break;
        const int64_t done = at;
        const int done_n = n;
        at += n;
        if (at < view.count) n = start(at, request);
        if (counts) local_sum += run_checksum(data + done, done_n, view.first + done);
      }
      if (request != MPI_REQUEST_NULL) MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
    step(file.close(), "MPI_File_close");
    agree_or_fail(*group, error);
  }
  const uint64_t checksum = sum_over(*group, local_sum);
  DAX_CHECK(!v.has_checksum || checksum == v.checksum, "load: ", name, " fails its checksum: its sidecar ", name, ".dax says ",
            hex64(v.checksum), ", the data gives ", hex64(checksum), " (the data is damaged)");
  if (v.swap) npy::swap_bytes(data, numel(box));  // a big-endian numpy.save file on a little-endian machine, or the reverse
  if (dev::on_gpu()) buffer = dev::upload(data, numel(box));
  DistArray<T> out(shape, reduced, std::move(buffer));
  return sharding.is_unreduced() ? reshard(out, sharding) : out;
}

}  // namespace detail::checkpoint

/// Loads a .npy file, written by dax::save or by numpy.save, into `sharding` (any mesh, any number
/// of ranks): each rank reads only its own piece. Verifies the header, the element type (T must be
/// the saved one), the size, and, when the sidecar dax::save writes is there, the sidecar and the
/// checksum (a file without a sidecar has no checksum to verify; big-endian data is swapped on
/// reading); any mismatch is a dax::Error on every rank of the mesh, and no data is returned. Collective over the mesh; ranks outside it read only the header and
/// sidecar (for the shape) and return an array without a piece.
template <class T>
DistArray<T> load(const std::filesystem::path& path, const NamedSharding& sharding) {
  return detail::checkpoint::load_file<T>(path, sharding);
}

}  // namespace dax
