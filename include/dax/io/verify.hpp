// What load checks before it reads any data: member 0 reads a checkpoint's header, size and
// sidecar (the facts) and shares them, and every rank checks the same facts with a pure function,
// so a damaged or foreign file is refused with the same message everywhere.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>

#include <dax/comm/communicator.hpp>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/io/coordination.hpp>
#include <dax/io/npy.hpp>
#include <dax/io/posix_file.hpp>
#include <dax/io/sidecar.hpp>

namespace dax::detail::checkpoint {

/// "float32 ('<f4')", or just "'<c8'" for a descr dax has no name for.
inline std::string describe(const std::string& descr) {
  const std::string name = npy::descr_name(descr);
  return name.front() == '\'' ? name : name + " ('" + descr + "')";
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
  bool has_checksum = true;  // false for a .npy without a sidecar (numpy.save wrote it)
  bool swap = false;         // stored in the other byte order (only without a sidecar)
};

/// The descr of the same type in the other byte order ('<f4' <-> '>f4'); "" if it has none.
inline std::string swapped_descr(const std::string& descr) {
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '>')) return {};
  return (descr[0] == '<' ? ">" : "<") + descr.substr(1);
}

/// Every check that needs no data: the header, the element type, the sidecar and the file's size.
/// A pure function of the facts, so ranks given the same facts throw the same message. A .npy
/// without a sidecar (written by numpy.save) passes the same header and size checks; it has no
/// checksum to verify, and data in the other byte order is accepted (load swaps it).
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
  const bool plain = !f.sidecar_error.empty() && f.sidecar_error == errno_text(ENOENT);
  const bool swap = plain && h.descr != want && !swapped_descr(want).empty() && h.descr == swapped_descr(want);
  DAX_CHECK(h.descr == want || swap, "load: ", path, " holds ", describe(h.descr), ", not the ", describe(want),
            " asked for");
  DAX_CHECK(!h.fortran_order, "load: ", path, " is in Fortran order (fortran_order: True); dax reads C-order data. "
            "Rewrite it in C order: numpy.save(path, numpy.ascontiguousarray(numpy.load(path)))");
  const int64_t bytes = npy::data_bytes(h.shape, sizeof(T));
  DAX_CHECK(bytes >= 0, "load: ", path, " has the shape ", to_string(h.shape), ", too large for 64-bit sizes");

  const int64_t expected = h.data_offset + bytes;
  const std::string layout = cat(expected, " bytes (", h.data_offset, "-byte header + ", numel(h.shape), " ",
                                 npy::descr_name(h.descr), ")");
  auto check_size = [&] {
    DAX_CHECK(f.file_size >= expected, "load: ", path, " is truncated: expected ", layout, ", found ", f.file_size);
    DAX_CHECK(f.file_size <= expected, "load: ", path, " is longer than its header says: expected ", layout,
              ", found ", f.file_size);
  };
  if (plain) {  // numpy.save wrote it: no sidecar, so no checksum; NumPy's header may differ in its padding
    check_size();
    Verified v{h.shape, h.data_offset, 0};
    v.has_checksum = false;
    v.swap = swap;
    return v;
  }

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

  check_size();
  return {h.shape, h.data_offset, s.checksum};
}

}  // namespace dax::detail::checkpoint
