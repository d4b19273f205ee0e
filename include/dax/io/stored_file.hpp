// The arrays a file holds, whatever wrote it: a .npy file (numpy.save or dax::save: one array), a
// .npz archive (numpy.savez: one .npy per entry, stored uncompressed) or a safetensors file. The
// index says, for each array, its name, dtype, shape and where its C-order data lies in the file,
// read from headers alone (a few small reads, never the data). dax::file_entries lists it.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <dax/core/dtype.hpp>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/io/npy.hpp>
#include <dax/io/safetensors.hpp>
#include <dax/io/text_cursor.hpp>
#include <dax/io/zip.hpp>

namespace dax {

/// One array of a file, as dax::file_entries lists it.
struct StoredEntry {
  std::string name;               // the entry's name; "" for the one array of a .npy file
  std::string dtype;              // as the file spells it: "<f4" (.npy, .npz), "F32" (safetensors)
  std::optional<DType> element;   // dax's element type for it, if dax has one
  Shape shape;
  friend bool operator==(const StoredEntry&, const StoredEntry&) = default;
};

namespace detail::stored {

enum class Format { npy, npz, safetensors };

inline const char* format_name(Format f) {
  return f == Format::npy ? ".npy" : f == Format::npz ? ".npz" : "safetensors";
}

/// An array and where its data is.
struct Located {
  StoredEntry entry;
  int64_t offset = 0;     // byte of the file where the C-order data starts
  int64_t item_size = 0;
  bool swap = false;      // stored in the other byte order: swapped after reading
  int64_t entry_byte = 0; // where the entry is described (for messages)
};

struct Index {
  Format format = Format::npy;
  int64_t file_size = 0;
  std::vector<Located> arrays;
};

/// dax's element type for a .npy descr, and whether its bytes must be swapped.
inline std::optional<DType> npy_element(const std::string& descr, bool& swap) {
  swap = false;
  if (descr == "|b1") return DType::boolean;
  if (descr == "|V2") return DType::bfloat16;
  if (descr.size() != 3 && descr.size() != 4) return std::nullopt;
  const bool little = std::endian::native == std::endian::little;
  const char order = descr[0];
  if (order != '<' && order != '>' && order != '=' && order != '|') return std::nullopt;
  swap = (order == '<' && !little) || (order == '>' && little);
  const std::string kind = descr.substr(1);
  if (kind == "f4") return DType::float32;
  if (kind == "f8") return DType::float64;
  if (kind == "f2") return DType::float16;
  if (kind == "i4") return DType::int32;
  if (kind == "i8") return DType::int64;
  if (kind == "b1") return DType::boolean;
  if (kind == "c8") return DType::complex64;
  if (kind == "c16") return DType::complex128;
  return std::nullopt;
}

/// Reads exactly `n` bytes at `offset` (fewer only at the file's end); errors as text.
inline std::string pread_text(int fd, int64_t offset, int64_t n, std::string& error) {
  std::string out(static_cast<size_t>(std::max<int64_t>(n, 0)), '\0');
  int64_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, out.data() + got, static_cast<size_t>(n - got), offset + got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      error = std::strerror(errno);
      break;
    }
    if (r == 0) break;
    got += r;
  }
  out.resize(static_cast<size_t>(got));
  return out;
}

/// A file descriptor closed when it goes away.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

/// Reads for the index: errors from the OS become phrases after the file's name.
class Source {
 public:
  explicit Source(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_.get() < 0) fail("cannot be opened: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) fail("cannot be read: ", std::strerror(errno));
    DAX_CHECK(!S_ISDIR(st.st_mode), "cannot be read: it is a directory");
    size_ = static_cast<int64_t>(st.st_size);
  }
  int64_t size() const { return size_; }
  /// Up to `n` bytes at `offset` (fewer at the file's end).
  std::string read(int64_t offset, int64_t n) {
    std::string error;
    std::string out = pread_text(fd_.get(), offset, std::min(n, std::max<int64_t>(size_ - offset, 0)), error);
    DAX_CHECK(error.empty(), "cannot be read at byte ", offset, ": ", error);
    return out;
  }

 private:
  Fd fd_;
  int64_t size_ = 0;
};

/// The .npy array at `base` of the file (a whole .npy file: base 0, `room` the file's size; an
/// .npz entry: its data's offset and size). `where` prefixes messages ("", "entry 'w' ").
inline Located read_npy(Source& src, int64_t base, int64_t room, const std::string& name, const std::string& where,
                        bool exact_room) {
  std::string head = src.read(base, std::min<int64_t>(room, 12));
  std::string phrase;
  npy::Header h;
  try {
    const int64_t total = npy::header_length(head);
    if (total > static_cast<int64_t>(head.size())) head = src.read(base, std::min(room, total));
    h = npy::parse_header(head);
  } catch (const Error& e) {
    fail(where, e.what(), base ? cat(" (the .npy data starts at byte ", base, " of the file)") : std::string());
  }
  Located l;
  l.entry.name = name;
  l.entry.dtype = h.descr;
  l.entry.shape = h.shape;
  l.entry.element = npy_element(h.descr, l.swap);
  l.offset = base + h.data_offset;
  l.entry_byte = base;
  l.item_size = l.entry.element ? itemsize(*l.entry.element) : 0;
  const int64_t bytes = l.entry.element ? npy::data_bytes(h.shape, l.item_size) : 0;
  DAX_CHECK(bytes >= 0, where, "has the shape ", to_string(h.shape), ", too large for 64-bit sizes");
  const int64_t expected = h.data_offset + bytes;
  if (l.entry.element) {
    DAX_CHECK(room >= expected, where, "is truncated: its header (at byte ", base, ") gives ", npy::descr_name(h.descr),
              " ", to_string(h.shape), ", ", expected, " bytes with the header, but only ", room, " are there");
    DAX_CHECK(!exact_room || room == expected, where, "is longer than its header says: expected ", expected,
              " bytes (", h.data_offset, "-byte header + ", numel(h.shape), " ", npy::descr_name(h.descr), "), found ",
              room);
  }
  DAX_CHECK(!h.fortran_order, where, "is in Fortran order (fortran_order: True); dax reads C-order data. "
            "Rewrite it in C order: numpy.save(path, numpy.ascontiguousarray(numpy.load(path)))");
  return l;
}

inline Index read_npz(Source& src) {
  Index idx;
  idx.format = Format::npz;
  idx.file_size = src.size();
  const std::string tail = src.read(std::max<int64_t>(0, src.size() - zip::tail_bytes), zip::tail_bytes);
  zip::Directory dir = zip::find_directory(tail, src.size());
  if (dir.zip64_end_offset >= 0) zip::read_zip64_end(dir, src.read(dir.zip64_end_offset, zip::end64_bytes));
  DAX_CHECK(dir.offset + dir.size <= src.size(), "is a malformed zip file: its central directory [", dir.offset, ", ",
            dir.offset + dir.size, ") leaves the file, which ends at byte ", src.size());
  const std::string central = src.read(dir.offset, dir.size);
  for (const zip::Entry& e : zip::parse_directory(central, dir.offset, dir.entries)) {
    const std::string where = cat("entry '", io::printable(e.name), "' ");
    DAX_CHECK(e.name.size() > 4 && e.name.substr(e.name.size() - 4) == ".npy", "holds the ", where,
              "(central directory byte ", e.central_offset, "), which is not a .npy file; an .npz holds only .npy "
              "entries");
    DAX_CHECK(e.method == 0, "holds the ", where, "(central directory byte ", e.central_offset,
              ") compressed (method ", e.method, "); dax reads each rank's piece in place from stored entries: "
              "write the file with numpy.savez, not numpy.savez_compressed");
    DAX_CHECK(e.compressed == e.size, "is a malformed zip file: the stored ", where, "(central directory byte ",
              e.central_offset, ") has ", e.compressed, " bytes stored but a size of ", e.size);
    DAX_CHECK(e.local_offset + zip::local_bytes <= dir.offset, "is a malformed zip file: the ", where,
              "(central directory byte ", e.central_offset, ") has its local header at byte ", e.local_offset,
              ", past the central directory at byte ", dir.offset);
    const int64_t data = zip::data_offset(e, src.read(e.local_offset, zip::local_bytes));
    DAX_CHECK(data + e.size <= dir.offset, "is a malformed zip file: the data of the ", where, "(bytes [", data, ", ",
              data + e.size, ")) runs into the central directory at byte ", dir.offset);
    const std::string name = e.name.substr(0, e.name.size() - 4);
    for (const Located& other : idx.arrays)
      DAX_CHECK(other.entry.name != name, "holds the entry '", io::printable(e.name), "' twice");
    idx.arrays.push_back(read_npy(src, data, e.size, name, ": " + where, true));
  }
  return idx;
}

inline Index read_safetensors(Source& src) {
  Index idx;
  idx.format = Format::safetensors;
  idx.file_size = src.size();
  const int64_t n = safetensors::header_length(src.read(0, 8), src.size());
  const safetensors::Header h = safetensors::parse_header(src.read(8, n), src.size());
  for (const auto& t : h.tensors) {
    const auto* d = safetensors::find_dtype(t.dtype);
    Located l;
    l.entry = {t.name, t.dtype, d->element, t.shape};
    l.offset = h.data_start + t.begin;
    l.item_size = d->item_size;
    idx.arrays.push_back(std::move(l));
  }
  return idx;
}

/// The index of the file at `path`. Throws dax::Error with a phrase that follows the file's name.
/// The format is told by the first bytes (.npy's magic, a zip's PK\x03\x04 or PK\x05\x06), else by
/// the name (.npz, .safetensors).
inline Index read_index(const std::string& path) {
  Source src(path);
  const std::string first = src.read(0, 8);
  if (first.substr(0, npy::magic.size()) == npy::magic) {
    Index idx;
    idx.file_size = src.size();
    idx.arrays.push_back(read_npy(src, 0, src.size(), "", "", true));
    return idx;
  }
  const bool zip_magic = first.size() >= 4 && (first.substr(0, 4) == std::string("PK\x03\x04", 4) ||
                                               first.substr(0, 4) == std::string("PK\x05\x06", 4));
  if (zip_magic || std::filesystem::path(path).extension() == ".npz")
    return read_npz(src);
  if (std::filesystem::path(path).extension() == ".safetensors") return read_safetensors(src);
  fail("is not a .npy, .npz or .safetensors file: it starts with \"", io::printable(first),
       "\" (neither .npy's magic \\x93NUMPY nor a zip's PK\\x03\\x04) and its name does not end in .safetensors");
}

/// "<path> <phrase>", or "<path>: entry ..." for a phrase about an entry (which starts with ':').
inline std::string about(const std::string& path, const std::string& phrase) {
  return path + (phrase.empty() || phrase[0] == ':' ? "" : " ") + phrase;
}

/// The index as one string and back (rank 0 reads it; the others get it in one broadcast).
inline std::string serialize(const Index& idx) {
  std::string out = cat(static_cast<int>(idx.format), " ", idx.file_size, " ", idx.arrays.size(), "\n");
  for (const Located& l : idx.arrays) {
    out += cat(l.entry.name.size(), " ", l.entry.name, " ", l.entry.dtype.size(), " ", l.entry.dtype, " ",
               l.entry.element ? static_cast<int>(*l.entry.element) : -1, " ", l.entry.shape.size());
    for (int64_t d : l.entry.shape) out += cat(" ", d);
    out += cat(" ", l.offset, " ", l.item_size, " ", l.swap ? 1 : 0, " ", l.entry_byte, "\n");
  }
  return out;
}

inline Index deserialize(const std::string& s) {
  size_t pos = 0;
  auto number = [&] {
    while (s[pos] == ' ' || s[pos] == '\n') ++pos;
    size_t used = 0;
    const int64_t v = std::stoll(s.substr(pos, 24), &used);
    pos += used;
    return v;
  };
  auto text = [&] {
    const auto n = static_cast<size_t>(number());
    ++pos;  // the space
    std::string t = s.substr(pos, n);
    pos += n;
    return t;
  };
  Index idx;
  idx.format = static_cast<Format>(number());
  idx.file_size = number();
  const int64_t count = number();
  for (int64_t i = 0; i < count; ++i) {
    Located l;
    l.entry.name = text();
    l.entry.dtype = text();
    const int64_t element = number();
    if (element >= 0) l.entry.element = static_cast<DType>(element);
    l.entry.shape.resize(static_cast<size_t>(number()));
    for (auto& d : l.entry.shape) d = number();
    l.offset = number();
    l.item_size = number();
    l.swap = number() != 0;
    l.entry_byte = number();
    idx.arrays.push_back(std::move(l));
  }
  return idx;
}

}  // namespace detail::stored

/// The arrays the file at `path` holds (a .npy, .npz or safetensors file: see io/stored_file.hpp),
/// in the file's order, each with its name, dtype as the file spells it, dax's element type for it
/// (if any) and shape. Reads headers only. Not collective: any rank may call it. A file that cannot
/// be read or is malformed is a dax::Error naming the file, the entry and the byte.
inline std::vector<StoredEntry> file_entries(const std::filesystem::path& path) {
  detail::stored::Index idx;
  try {
    idx = detail::stored::read_index(path.string());
  } catch (const Error& e) {
    detail::fail("file_entries: ", detail::stored::about(path.string(), e.what()));
  }
  std::vector<StoredEntry> out;
  for (const auto& l : idx.arrays) out.push_back(l.entry);
  return out;
}

}  // namespace dax
