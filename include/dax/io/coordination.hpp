// How the ranks of a checkpoint's mesh decide together: strings broadcast from one member, errors
// agreed on (the lowest-ranked member's wins, thrown everywhere), checksums summed. Host values
// only, moved through the group's host communicator.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <dax/comm/communicator.hpp>
#include <dax/core/dtype.hpp>
#include <dax/core/error.hpp>

namespace dax::detail::checkpoint {

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

}  // namespace dax::detail::checkpoint
