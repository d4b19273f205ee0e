// Each rank's piece of a C-order array stored in a file, moved with POSIX pread / pwrite, one call
// per contiguous run: a rank reads (or writes) exactly the bytes of its piece and no others. The
// readers of other programs' files (io/load_entry.hpp) and the safetensors writer use it.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail::stored {

/// Moves the region `box` of a C-order array of `shape` (`item` bytes per element, data from byte
/// `offset` of the file) between the file and `buf` (the region packed in C order): one pread or
/// pwrite per contiguous run of the file, so a rank touches only its piece's bytes. Returns the
/// error ("" if none).
inline std::string transfer_box(int fd, int64_t offset, const Shape& shape, const Box& box, int64_t item, char* buf,
                                bool write) {
  if (numel(box) == 0) return {};
  const size_t rank = shape.size();
  size_t k = rank;  // dimensions [k, rank) are whole in the box: the runs span them
  while (k > 0 && box[k - 1].start == 0 && box[k - 1].stop == shape[k - 1]) --k;
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * shape[d];
  const size_t outer = k > 0 ? k - 1 : 0;  // dimensions iterated over, one run per index
  const int64_t run = (k > 0 ? box[k - 1].size() * stride[k - 1] : numel(shape)) * item;
  std::vector<int64_t> at(outer);
  for (size_t d = 0; d < outer; ++d) at[d] = box[d].start;
  while (true) {
    int64_t flat = k > 0 ? box[k - 1].start * stride[k - 1] : 0;
    for (size_t d = 0; d < outer; ++d) flat += at[d] * stride[d];
    const int64_t from = offset + flat * item;
    int64_t got = 0;
    while (got < run) {
      const ssize_t r = write ? ::pwrite(fd, buf + got, static_cast<size_t>(run - got), from + got)
                              : ::pread(fd, buf + got, static_cast<size_t>(run - got), from + got);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0)
        return cat(write ? "writing" : "reading", " bytes [", from + got, ", ", from + run,
                   ") failed: ", std::strerror(errno));
      if (r == 0) return cat("the file ended at byte ", from + got, " while reading bytes [", from, ", ", from + run, ")");
      got += r;
    }
    buf += run;
    size_t d = outer;
    while (d > 0 && ++at[d - 1] == box[d - 1].stop) {
      at[d - 1] = box[d - 1].start;
      --d;
    }
    if (d == 0) return {};
  }
}

inline std::string read_box(int fd, int64_t offset, const Shape& shape, const Box& box, int64_t item, char* out) {
  return transfer_box(fd, offset, shape, box, item, out, false);
}

inline std::string write_box(int fd, int64_t offset, const Shape& shape, const Box& box, int64_t item,
                             const char* in) {
  return transfer_box(fd, offset, shape, box, item, const_cast<char*>(in), true);
}

}  // namespace dax::detail::stored
