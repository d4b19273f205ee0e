// The parts of the zip format a reader of .npz files needs (what numpy.savez writes): the end of
// central directory record (and its zip64 form), the central directory's entries, and each
// entry's local header, from which the entry's data starts. Pure: each function parses bytes it
// is given; errors are phrases that follow the file's name and name the byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/io/text_cursor.hpp>

namespace dax::detail::zip {

inline constexpr uint32_t local_signature = 0x04034b50;
inline constexpr uint32_t central_signature = 0x02014b50;
inline constexpr uint32_t end_signature = 0x06054b50;
inline constexpr uint32_t end64_signature = 0x06064b50;
inline constexpr uint32_t locator64_signature = 0x07064b50;
inline constexpr int64_t end_bytes = 22, locator64_bytes = 20, end64_bytes = 56, central_bytes = 46,
                         local_bytes = 30;
/// The end record is within this many bytes of the file's end (its comment is at most 65535).
inline constexpr int64_t tail_bytes = end_bytes + 65535 + locator64_bytes + end64_bytes;

inline uint64_t le(std::string_view b, size_t at, int width) {
  uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = v * 256 + static_cast<unsigned char>(b[at + i]);
  return v;
}

/// Where the central directory is.
struct Directory {
  int64_t offset = 0, size = 0, entries = 0;
  int64_t zip64_end_offset = -1;  // set when the zip64 end record must be read (it was not in the tail)
};

/// Finds the end records in `tail`, the last bytes of a file of `file_size` bytes.
inline Directory find_directory(std::string_view tail, int64_t file_size) {
  const int64_t base = file_size - static_cast<int64_t>(tail.size());
  int64_t at = -1;
  for (int64_t i = static_cast<int64_t>(tail.size()) - end_bytes; i >= 0; --i)
    if (le(tail, i, 4) == end_signature && i + end_bytes + static_cast<int64_t>(le(tail, i + 20, 2)) <=
                                               static_cast<int64_t>(tail.size())) {
      at = i;
      break;
    }
  DAX_CHECK(at >= 0, "is not a zip file (.npz): no end of central directory record (signature PK\\x05\\x06) in its "
                     "last ", tail.size(), " bytes");
  Directory d;
  d.entries = static_cast<int64_t>(le(tail, at + 10, 2));
  d.size = static_cast<int64_t>(le(tail, at + 12, 4));
  d.offset = static_cast<int64_t>(le(tail, at + 16, 4));
  DAX_CHECK(le(tail, at + 4, 2) == 0 && le(tail, at + 6, 2) == 0, "is a multi-disk zip file (end record at byte ",
            base + at, "); dax reads single-file .npz archives");
  const bool zip64 = d.entries == 0xffff || d.size == 0xffffffff || d.offset == 0xffffffff;
  if (zip64) {
    const int64_t loc = at - locator64_bytes;
    DAX_CHECK(loc >= 0 && le(tail, loc, 4) == locator64_signature, "is a malformed zip file: its end record at byte ",
              base + at, " needs a zip64 locator before it, found none");
    const uint64_t end64 = le(tail, loc + 8, 8);
    DAX_CHECK(end64 + end64_bytes <= static_cast<uint64_t>(base + loc), "is a malformed zip file: the zip64 locator at byte ",
              base + loc, " points to byte ", end64, ", past where it could be");
    d.zip64_end_offset = static_cast<int64_t>(end64);
  }
  if (d.zip64_end_offset < 0) {
    DAX_CHECK(d.offset + d.size <= base + at, "is a malformed zip file: the end record at byte ", base + at,
              " puts the central directory at bytes [", d.offset, ", ", d.offset + d.size, "), past the record");
  }
  return d;
}

/// Reads the zip64 end record (`bytes` starts at d.zip64_end_offset).
inline void read_zip64_end(Directory& d, std::string_view bytes) {
  DAX_CHECK(bytes.size() >= end64_bytes && le(bytes, 0, 4) == end64_signature,
            "is a malformed zip file: no zip64 end record (signature PK\\x06\\x06) at byte ", d.zip64_end_offset);
  d.entries = static_cast<int64_t>(le(bytes, 32, 8));
  d.size = static_cast<int64_t>(le(bytes, 40, 8));
  d.offset = static_cast<int64_t>(le(bytes, 48, 8));
  DAX_CHECK(d.offset >= 0 && d.size >= 0 && d.offset + d.size <= d.zip64_end_offset,
            "is a malformed zip file: the zip64 end record at byte ", d.zip64_end_offset,
            " puts the central directory at bytes [", d.offset, ", ", d.offset + d.size, "), past the record");
}

struct Entry {
  std::string name;
  int method = 0;  // 0 stored, 8 deflated
  int flags = 0;
  int64_t compressed = 0, size = 0;
  int64_t local_offset = 0;  // of the local header
  int64_t central_offset = 0;  // of this entry's central directory record (for messages)
};

/// The entries of the central directory (`bytes`, which starts at byte `base` of the file).
inline std::vector<Entry> parse_directory(std::string_view bytes, int64_t base, int64_t count) {
  std::vector<Entry> out;
  size_t at = 0;
  for (int64_t i = 0; i < count; ++i) {
    DAX_CHECK(at + central_bytes <= bytes.size() && le(bytes, at, 4) == central_signature,
              "is a malformed zip file: expected central directory entry ", i, " (signature PK\\x01\\x02) at byte ",
              base + static_cast<int64_t>(at));
    Entry e;
    e.central_offset = base + static_cast<int64_t>(at);
    e.flags = static_cast<int>(le(bytes, at + 8, 2));
    e.method = static_cast<int>(le(bytes, at + 10, 2));
    e.compressed = static_cast<int64_t>(le(bytes, at + 20, 4));
    e.size = static_cast<int64_t>(le(bytes, at + 24, 4));
    const size_t name_len = le(bytes, at + 28, 2), extra_len = le(bytes, at + 30, 2), comment_len = le(bytes, at + 32, 2);
    e.local_offset = static_cast<int64_t>(le(bytes, at + 42, 4));
    const size_t next = at + central_bytes + name_len + extra_len + comment_len;
    DAX_CHECK(next <= bytes.size(), "is a malformed zip file: central directory entry ", i, " at byte ",
              e.central_offset, " runs past the directory's end");
    e.name = std::string(bytes.substr(at + central_bytes, name_len));
    // zip64: the 32-bit fields that overflowed are in the extra field 0x0001, in this order.
    std::string_view extra = bytes.substr(at + central_bytes + name_len, extra_len);
    while (extra.size() >= 4) {
      const uint64_t id = le(extra, 0, 2), len = le(extra, 2, 2);
      DAX_CHECK(4 + len <= extra.size(), "is a malformed zip file: an extra field of entry '", io::printable(e.name),
                "' at byte ", e.central_offset, " runs past its end");
      if (id == 1) {
        size_t f = 4;
        auto take = [&](int64_t& field, uint64_t full) {
          if (static_cast<uint64_t>(field) != full) return;
          DAX_CHECK(f + 8 <= 4 + len, "is a malformed zip file: the zip64 field of entry '", io::printable(e.name),
                    "' at byte ", e.central_offset, " is too short");
          field = static_cast<int64_t>(le(extra, f, 8));
          f += 8;
        };
        take(e.size, 0xffffffff);
        take(e.compressed, 0xffffffff);
        take(e.local_offset, 0xffffffff);
      }
      extra = extra.substr(4 + len);
    }
    DAX_CHECK(e.size >= 0 && e.compressed >= 0 && e.local_offset >= 0, "is a malformed zip file: entry '",
              io::printable(e.name), "' at byte ", e.central_offset, " has sizes beyond 63 bits");
    out.push_back(std::move(e));
    at = next;
  }
  return out;
}

/// Where an entry's data starts: after its local header (`local`: at least local_bytes from the
/// entry's local_offset), whose name and extra-field lengths may differ from the central
/// directory's (numpy writes a zip64 field into the local header only).
inline int64_t data_offset(const Entry& e, std::string_view local) {
  DAX_CHECK(local.size() >= local_bytes && le(local, 0, 4) == local_signature, "is a malformed zip file: entry '",
            io::printable(e.name), "' has no local header (signature PK\\x03\\x04) at byte ", e.local_offset);
  return e.local_offset + local_bytes + static_cast<int64_t>(le(local, 26, 2)) + static_cast<int64_t>(le(local, 28, 2));
}

}  // namespace dax::detail::zip
