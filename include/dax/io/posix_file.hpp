// The small POSIX file operations checkpoints need beside MPI-IO: reading a file's first bytes,
// writing a small file durably, syncing a directory, and unique names for temporary files.
// Errors come back as text, so the ranks can agree on them before anyone throws.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include <dax/core/error.hpp>
#include <dax/io/checksum.hpp>
#include <dax/io/sidecar.hpp>

namespace dax::detail::checkpoint {

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

}  // namespace dax::detail::checkpoint
