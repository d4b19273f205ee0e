// dax::save / dax::load: checkpoints as standard NumPy .npy files. Every rank of the array's mesh
// writes (reads) its own piece in place with MPI-IO; a sidecar `<path>.dax` records the dtype, shape
// and a checksum computed piece by piece, and load refuses anything that does not match. Files
// appear under their names only once complete (written under a temporary name, then renamed).
#pragma once

#include <fcntl.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <dax/array/dist_array.hpp>
#include <dax/array/reshard.hpp>
#include <dax/backend/cpu/memory.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/comm/mpi_communicator.hpp>
#include <dax/core/error.hpp>
#include <dax/io/npy.hpp>
#include <dax/io/sidecar.hpp>
#include <dax/runtime/runtime.hpp>

namespace dax {
namespace detail::checkpoint {

inline std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return cat("MPI error ", code);
  return std::string(text, length);
}

/// The MPI communicator MPI-IO opens the group's files on (under a GPU transport too).
inline MPI_Comm native_comm(Communicator& c) {
  auto* mpi = dynamic_cast<MpiCommunicator*>(&c.host());
  DAX_CHECK(mpi != nullptr, "checkpoint: the mesh's communicator has no MPI communicator underneath");
  return mpi->native();
}

// Coordination moves host values (sizes, error texts, checksums), so it goes through the group's
// host communicator, group.host(): the group itself on CPU, the MPI communicator underneath a GPU
// transport, whose NCCL collectives take device memory only. It is guarded like every dax
// collective (fingerprints, watchdog); the MPI-IO calls open files on its MPI communicator.

/// A string from `root` to every member (as int64 words: the Communicator moves numbers).
inline void broadcast(Communicator& group, std::string& s, int root) {
  Communicator& host = group.host();
  int64_t n = static_cast<int64_t>(s.size());
  host.broadcast(&n, 1, DType::int64, root);
  if (n == 0) {
    s.clear();
    return;
  }
  std::vector<int64_t> words(static_cast<size_t>((n + 7) / 8), 0);
  if (host.rank() == root) std::memcpy(words.data(), s.data(), static_cast<size_t>(n));
  host.broadcast(words.data(), static_cast<int64_t>(words.size()), DType::int64, root);
  s.assign(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(n));
}

/// Decides together: each member passes its own error ("" if none); every member gets the error
/// of the lowest-ranked member that had one ("" if none did). Also a barrier.
inline std::string agreed_error(Communicator& group, const std::string& mine) {
  Communicator& host = group.host();
  int64_t first = mine.empty() ? host.size() : host.rank();
  host.all_reduce(nullptr, &first, 1, DType::int64, ReduceOp::min);
  if (first == group.size()) return {};
  std::string text = group.rank() == first ? mine : std::string();
  broadcast(group, text, static_cast<int>(first));
  return text;
}

/// Decides together (agreed_error) and throws the agreed error on every member, after running
/// `on_failure` (say, removing a half-written file); returns when no member had an error.
inline void agree_or_fail(Communicator& group, const std::string& mine, const std::function<void()>& on_failure = {}) {
  const std::string error = agreed_error(group, mine);
  if (error.empty()) return;
  if (on_failure) on_failure();
  fail(error);
}

/// The sum of every member's checksum terms, mod 2^64: the two 32-bit halves are summed apart (no
/// signed overflow for any group size MPI can have) and put back together.
inline uint64_t sum_over(Communicator& group, uint64_t mine) {
  int64_t halves[2] = {static_cast<int64_t>(mine & 0xffffffffu), static_cast<int64_t>(mine >> 32)};
  group.host().all_reduce(nullptr, halves, 2, DType::int64, ReduceOp::sum);
  return (static_cast<uint64_t>(halves[1]) << 32) + static_cast<uint64_t>(halves[0]);
}

/// An open MPI file. Closing is collective, so it is only ever explicit: a handle still open when
/// this goes away (some ranks failed to open it) is left open rather than risk a hang.
class File {
 public:
  File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  MPI_File* out() { return &fh_; }
  MPI_File get() const { return fh_; }
  int close() { return fh_ == MPI_FILE_NULL ? MPI_SUCCESS : MPI_File_close(&fh_); }

 private:
  MPI_File fh_ = MPI_FILE_NULL;
};

class Datatype {
 public:
  Datatype() = default;
  ~Datatype() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (t_ != MPI_DATATYPE_NULL && !finalized) MPI_Type_free(&t_);
  }
  Datatype(const Datatype&) = delete;
  Datatype& operator=(const Datatype&) = delete;
  MPI_Datatype* out() { return &t_; }
  MPI_Datatype get() const { return t_; }

 private:
  MPI_Datatype t_ = MPI_DATATYPE_NULL;
};

/// How the ranks move their pieces. When every piece that moves is one contiguous range of the
/// file (row-split arrays, replicated ones), each rank reads or writes its range on its own at its
/// offset (MPI_File_write_at / read_at, overlapped with the checksum): there is nothing for
/// collective buffering to merge. Otherwise the pieces are strided in the file and the ranks move
/// them together: a file view of the global array (MPI_Type_create_subarray) and write_all /
/// read_all, which lets MPI-IO aggregate the small runs. Decided from metadata alone, so every
/// rank takes the same path.
inline bool pieces_are_contiguous(const Shape& shape, const NamedSharding& s, bool replica_zero_only) {
  const Box whole = full_box(shape);
  for (int device : s.mesh().devices()) {
    if (replica_zero_only && s.replica_id(device) != 0) continue;
    if (!is_contiguous_in(whole, s.device_indices(device, shape))) return false;
  }
  return true;
}

/// This rank's part of the transfer: `count` elements (raw bytes of sizeof(T), never converted)
/// of the region `box` of the global array; at byte `offset` of the data when independent, laid
/// out by `filetype` when collective.
struct PieceView {
  bool collective = false;
  Datatype element, filetype;
  int count = 0;
  int64_t offset = 0;  // bytes from the start of the data (independent transfers)
  int64_t first = 0;   // global flat index of the first element (independent transfers)
};

/// Built from metadata alone, so it throws on every rank alike before any file is touched.
template <class T>
void make_view(PieceView& v, const char* op, const Shape& shape, const Box& box, bool moves_data, bool collective) {
  v.collective = collective;
  mpi_check(MPI_Type_contiguous(static_cast<int>(sizeof(T)), MPI_BYTE, v.element.out()), "MPI_Type_contiguous");
  mpi_check(MPI_Type_commit(v.element.out()), "MPI_Type_commit");
  const int64_t n = moves_data ? numel(box) : 0;
  DAX_CHECK(n <= INT_MAX, op, ": the piece ", to_string(box), " of ", to_string(shape), " has ", n,
            " elements; MPI-IO moves at most ", INT_MAX, " per rank (use more ranks)");
  v.count = static_cast<int>(n);
  if (!collective) {
    v.first = n > 0 ? offset_in(full_box(shape), box) : 0;
    v.offset = v.first * static_cast<int64_t>(sizeof(T));
    return;
  }
  for (size_t d = 0; d < shape.size(); ++d)
    DAX_CHECK(shape[d] <= INT_MAX, op, ": dimension ", d, " of ", to_string(shape), " has more than ", INT_MAX,
              " elements, MPI-IO's limit for one dimension of a file view");
  if (n == 0) {
    mpi_check(MPI_Type_dup(v.element.get(), v.filetype.out()), "MPI_Type_dup");
    return;
  }
  std::vector<int> sizes(shape.begin(), shape.end()), subsizes(shape.size()), starts(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    subsizes[d] = static_cast<int>(box[d].size());
    starts[d] = static_cast<int>(box[d].start);
  }
  mpi_check(MPI_Type_create_subarray(static_cast<int>(sizes.size()), sizes.data(), subsizes.data(), starts.data(),
                                     MPI_ORDER_C, v.element.get(), v.filetype.out()),
            "MPI_Type_create_subarray");
  mpi_check(MPI_Type_commit(v.filetype.out()), "MPI_Type_commit");
}

/// "float32 ('<f4')", or just "'<c8'" for a descr dax has no name for.
inline std::string describe(const std::string& descr) {
  const std::string name = npy::descr_name(descr);
  return name.front() == '\'' ? name : name + " ('" + descr + "')";
}

inline std::string errno_text(int code) { return std::strerror(code); }

/// Reads up to `limit` bytes from the start of `fd`.
inline std::string read_prefix(int fd, int64_t limit, std::string& error) {
  std::string out(static_cast<size_t>(limit), '\0');
  int64_t got = 0;
  while (got < limit) {
    const ssize_t r = ::pread(fd, out.data() + got, static_cast<size_t>(limit - got), got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      error = errno_text(errno);
      break;
    }
    if (r == 0) break;
    got += r;
  }
  out.resize(static_cast<size_t>(got));
  return out;
}

/// What one rank finds on disk before anything is read: the header bytes, the file's size and the
/// sidecar's text (or why they could not be had).
struct Facts {
  std::string open_error;
  int64_t file_size = -1;
  std::string head;  // the header (all of it when the preamble could be read)
  std::string sidecar_error;
  std::string sidecar;
};

inline constexpr int64_t max_sidecar_bytes = 65536;

inline Facts read_facts(const std::string& path) {
  Facts f;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    f.open_error = errno_text(errno);
  } else {
    struct stat st {};
    if (::fstat(fd, &st) != 0) f.open_error = errno_text(errno);
    else if (S_ISDIR(st.st_mode)) f.open_error = "it is a directory";
    else f.file_size = static_cast<int64_t>(st.st_size);
    if (f.open_error.empty()) {
      f.head = read_prefix(fd, std::min<int64_t>(f.file_size, 12), f.open_error);
      int64_t total = 0;
      try {
        total = npy::header_length(f.head);
      } catch (const Error&) {
        total = 0;  // refused again, with the message, when the facts are checked
      }
      if (f.open_error.empty() && total > static_cast<int64_t>(f.head.size()))
        f.head = read_prefix(fd, std::min(f.file_size, total), f.open_error);
    }
    ::close(fd);
  }
  const std::string sidecar = path + ".dax";
  const int sfd = ::open(sidecar.c_str(), O_RDONLY | O_CLOEXEC);
  if (sfd < 0) {
    f.sidecar_error = errno_text(errno);
  } else {
    f.sidecar = read_prefix(sfd, max_sidecar_bytes + 1, f.sidecar_error);
    ::close(sfd);
  }
  return f;
}

/// One string from several (each with its length first), for a single broadcast.
inline std::string pack(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += std::to_string(p.size()) + ":" + p;
  return out;
}

inline std::vector<std::string> unpack(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t colon = s.find(':', pos);
    const size_t n = std::stoull(s.substr(pos, colon - pos));
    out.push_back(s.substr(colon + 1, n));
    pos = colon + 1 + n;
  }
  return out;
}

/// Member 0 of the group reads the facts and every member gets them: all decide on the same bytes.
inline Facts shared_facts(Communicator& group, const std::string& path) {
  std::string packed;
  if (group.rank() == 0) {
    const Facts f = read_facts(path);
    packed = pack({f.open_error, std::to_string(f.file_size), f.head, f.sidecar_error, f.sidecar});
  }
  broadcast(group, packed, 0);
  const auto parts = unpack(packed);
  Facts f;
  f.open_error = parts.at(0);
  f.file_size = std::stoll(parts.at(1));
  f.head = parts.at(2);
  f.sidecar_error = parts.at(3);
  f.sidecar = parts.at(4);
  return f;
}

/// What a verified file holds.
struct Verified {
  Shape shape;
  int64_t data_offset = 0;
  uint64_t checksum = 0;
};

/// Every check that needs no data: the header, the element type, the sidecar and the file's size.
/// A pure function of the facts, so ranks given the same facts throw the same message.
template <class T>
Verified verify(const std::string& path, const Facts& f) {
  DAX_CHECK(f.open_error.empty(), "load: cannot open ", path, ": ", f.open_error);
  npy::Header h;
  try {
    h = npy::parse_header(f.head);
  } catch (const Error& e) {
    fail("load: ", path, " ", e.what());
  }
  const std::string want = npy::descr_of<T>();
  DAX_CHECK(h.descr == want, "load: ", path, " holds ", describe(h.descr), ", not the ", describe(want), " asked for");
  DAX_CHECK(!h.fortran_order, "load: ", path, " is in Fortran order (fortran_order: True); dax reads C-order data");
  const int64_t bytes = npy::data_bytes(h.shape, sizeof(T));
  DAX_CHECK(bytes >= 0, "load: ", path, " has the shape ", to_string(h.shape), ", too large for 64-bit sizes");

  const std::string sidecar_path = path + ".dax";
  DAX_CHECK(f.sidecar_error.empty(), "load: ", path, " has no sidecar ", sidecar_path, " (", f.sidecar_error,
            "): it was not written by dax::save, or its save did not finish");
  DAX_CHECK(static_cast<int64_t>(f.sidecar.size()) <= max_sidecar_bytes, "load: sidecar ", sidecar_path,
            " is malformed: it is longer than ", max_sidecar_bytes, " bytes");
  Sidecar s;
  try {
    s = parse_sidecar(f.sidecar);
  } catch (const Error& e) {
    fail("load: sidecar ", sidecar_path, " is malformed: ", e.what());
  }
  DAX_CHECK(s.descr == h.descr && s.shape == h.shape, "load: ", path, " does not match its sidecar ", sidecar_path,
            ": the header says ", describe(h.descr), " ", to_string(h.shape), ", the sidecar ", describe(s.descr), " ",
            to_string(s.shape));
  DAX_CHECK(s.header_bytes == h.data_offset && s.data_bytes == bytes, "load: ", path, " does not match its sidecar ",
            sidecar_path, ": the header says ", h.data_offset, " header bytes and ", bytes,
            " data bytes, the sidecar ", s.header_bytes, " and ", s.data_bytes);
  // dax writes exactly NumPy's header, so any other byte there (padding included) is damage.
  const std::string canonical = npy::write_header(h.descr, h.shape);
  for (size_t i = 0; i < canonical.size(); ++i)
    DAX_CHECK(i < f.head.size() && f.head[i] == canonical[i], "load: ", path, " has a damaged .npy header: byte ", i,
              " is '", npy::printable(f.head.substr(i, 1)), "' where dax writes '",
              npy::printable(canonical.substr(i, 1)), "'");

  const int64_t expected = h.data_offset + bytes;
  const std::string layout = cat(expected, " bytes (", h.data_offset, "-byte header + ", numel(h.shape), " ",
                                 npy::descr_name(h.descr), ")");
  DAX_CHECK(f.file_size >= expected, "load: ", path, " is truncated: expected ", layout, ", found ", f.file_size);
  DAX_CHECK(f.file_size <= expected, "load: ", path, " is longer than its header says: expected ", layout,
            ", found ", f.file_size);
  return {h.shape, h.data_offset, s.checksum};
}

inline std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  std::random_device device;
  const uint64_t r = (uint64_t(device()) << 32) ^ device() ^ (counter++ * index_step);
  return cat(::getpid(), ".", hex64(r));
}

/// Writes a small file with POSIX calls and makes it durable; returns the error ("" if none).
inline std::string write_durably(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return cat("cannot create ", path, ": ", errno_text(errno));
  size_t done = 0;
  std::string error;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      error = cat("cannot write ", path, ": ", errno_text(errno));
      break;
    }
    done += static_cast<size_t>(w);
  }
  if (error.empty() && ::fsync(fd) != 0) error = cat("cannot sync ", path, ": ", errno_text(errno));
  if (::close(fd) != 0 && error.empty()) error = cat("cannot close ", path, ": ", errno_text(errno));
  return error;
}

/// Makes the renames in a directory durable (best effort: some filesystems refuse fsync on one).
inline void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

/// Bytes per independent read: the checksum of one chunk runs while the next is read.
inline constexpr int64_t read_chunk_bytes = int64_t(16) << 20;

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
  Communicator& group = rt.mesh_group(mesh).host();  // host values only: see the helpers above
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
  DAX_CHECK(checksum == v.checksum, "load: ", name, " fails its checksum: its sidecar ", name, ".dax says ",
            hex64(v.checksum), ", the data gives ", hex64(checksum), " (the data is damaged)");
  if (dev::on_gpu()) buffer = dev::upload(data, numel(box));
  DistArray<T> out(shape, reduced, std::move(buffer));
  return sharding.is_unreduced() ? reshard(out, sharding) : out;
}

/// Entry names become file names: one path component, nothing hidden or special.
inline void check_entry_name(const char* op, const std::string& name) {
  DAX_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                name.find('\0') == std::string::npos,
            op, ": the entry name \"", npy::printable(name),
            "\" cannot be a file name (it must be non-empty, without '/', and not '.' or '..')");
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

/// Loads a file written by dax::save into `sharding` (any mesh, any number of ranks): each rank
/// reads only its own piece. Verifies the header, the element type (T must be the saved one),
/// the size, the sidecar and the checksum; any mismatch is a dax::Error on every rank of the mesh,
/// and no data is returned. Collective over the mesh; ranks outside it read only the header and
/// sidecar (for the shape) and return an array without a piece.
template <class T>
DistArray<T> load(const std::filesystem::path& path, const NamedSharding& sharding) {
  return detail::checkpoint::load_file<T>(path, sharding);
}

/// One named array of a checkpoint directory: `{"w1", w1}`. Holds any element type, so one call
/// saves a model whose arrays differ in dtype.
class CheckpointEntry {
 public:
  template <class T>
  CheckpointEntry(std::string name, DistArray<T> array)
      : name_(std::move(name)),
        save_([array = std::move(array)](const std::filesystem::path& p) {
          detail::checkpoint::save_file(p, array);
        }) {}
  const std::string& name() const { return name_; }
  void save_to(const std::filesystem::path& file) const { save_(file); }

 private:
  std::string name_;
  std::function<void(const std::filesystem::path&)> save_;
};

/// Saves each entry as `dir/<name>.npy` (+ its sidecar), creating `dir`. Collective: every rank
/// passes the same entries in the same order; each entry is saved over its own mesh.
inline void save(const std::filesystem::path& dir, std::initializer_list<CheckpointEntry> entries) {
  std::set<std::string> seen;
  for (const auto& e : entries) {
    detail::checkpoint::check_entry_name("save", e.name());
    DAX_CHECK(seen.insert(e.name()).second, "save: the entry name \"", e.name(), "\" appears twice");
  }
  for (const auto& e : entries) e.save_to(dir / (e.name() + ".npy"));
}

template <class T>
void save(const std::filesystem::path& dir, const std::map<std::string, DistArray<T>>& arrays) {
  for (const auto& [name, array] : arrays) detail::checkpoint::check_entry_name("save", name);
  for (const auto& [name, array] : arrays) detail::checkpoint::save_file(dir / (name + ".npy"), array);
}

/// Loads `dir/<name>.npy` for each entry into its sharding (all of element type T; load arrays of
/// other types with another call). Collective, entries in the map's (sorted) order.
template <class T>
std::map<std::string, DistArray<T>> load(const std::filesystem::path& dir,
                                         const std::map<std::string, NamedSharding>& shardings) {
  for (const auto& [name, sharding] : shardings) detail::checkpoint::check_entry_name("load", name);
  std::map<std::string, DistArray<T>> out;
  for (const auto& [name, sharding] : shardings)
    out.emplace(name, detail::checkpoint::load_file<T>(dir / (name + ".npy"), sharding));
  return out;
}

}  // namespace dax
