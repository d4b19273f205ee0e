// The light check's records of collective calls, and the node's board they are posted on.
//
// Under the default divergence check every member of a group tells the others which call it is
// making (kind, count, dtype, number in the group's sequence). Members on the same node do it with
// no message at all: each posts its record in its own row of a shared-memory board (one
// MPI_Win_allocate_shared per node, made when the runtime starts), and the others read it there,
// after the call (a finished collective means every member made its call, so its record is posted)
// or from the watchdog thread while they wait. Members on other nodes still get the record as a
// small message (mpi_call_checks.hpp).
//
// The board's row of a rank holds, per group, the records of its last kDepth calls: a member cannot
// be kDepth calls ahead of another on a group whose collectives all need every member's data.
// A record carries its group's call number and its sender's world rank, and a hash that is written
// last, so a reader that meets an older call, another group's record or a half-written one sees
// "not posted" and never a false divergence.
#pragma once

#include <dax/core/mpi.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <dax/comm/mpi_check.hpp>

namespace dax::detail {

/// A member's record of one call.
struct CallRecord {
  int64_t number = 0;
  int64_t count = 0;
  int32_t type = 0;
  int32_t world_rank = -1;
  char kind[32] = {};
  uint64_t check = 0;  // 0 until a record has arrived
};
static_assert(sizeof(CallRecord) == 64, "one cache line per record");

inline uint64_t call_record_check(const CallRecord& r) {
  uint64_t h = 0x7265636f7264ull;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x9e3779b97f4a7c15ull; h ^= h >> 29; };
  mix(static_cast<uint64_t>(r.number));
  mix(static_cast<uint64_t>(r.count));
  mix(static_cast<uint64_t>(static_cast<uint32_t>(r.type)) << 32 | static_cast<uint32_t>(r.world_rank));
  uint64_t w[4];
  std::memcpy(w, r.kind, sizeof(w));
  for (uint64_t v : w) mix(v);
  return h | 1;
}

/// Reads a record another process or MPI may be writing at this moment: word by word, then
/// checked; false if it has not (fully) arrived.
inline bool read_call_record(const CallRecord& in, CallRecord& out) {
  static_assert(sizeof(CallRecord) % 8 == 0);
  const auto* from = reinterpret_cast<const uint64_t*>(&in);
  auto* to = reinterpret_cast<uint64_t*>(&out);
  for (size_t i = 0; i < sizeof(CallRecord) / 8; ++i) to[i] = __atomic_load_n(from + i, __ATOMIC_ACQUIRE);
  out.kind[sizeof(out.kind) - 1] = 0;
  return out.check != 0 && out.check == call_record_check(out);
}

/// Writes `r` (whose check is computed) where others may read it: the check goes to 0 first and
/// back last, so a reader never takes a half-written record for a whole one.
inline void post_call_record(CallRecord& slot, const CallRecord& r) {
  __atomic_store_n(&slot.check, uint64_t{0}, __ATOMIC_RELEASE);
  const auto* from = reinterpret_cast<const uint64_t*>(&r);
  auto* to = reinterpret_cast<uint64_t*>(&slot);
  for (size_t i = 0; i + 1 < sizeof(CallRecord) / 8; ++i) __atomic_store_n(to + i, from[i], __ATOMIC_RELAXED);
  __atomic_store_n(&slot.check, r.check, __ATOMIC_RELEASE);
}

/// The node's shared board. Made by the runtime over the world (collective); null when the light
/// check is off or the MPI library cannot share memory, in which case every record is a message.
class CallBoard {
 public:
  static constexpr int kGroups = 512;  // groups a process can post for; later groups use messages
  static constexpr int kDepth = 8;     // calls kept per group

  /// Collective over `world`. Returns null (and frees what it made) if shared memory is refused.
  static std::unique_ptr<CallBoard> create(MPI_Comm world) {
    auto board = std::unique_ptr<CallBoard>(new CallBoard);
    if (!board->open(world)) return nullptr;
    return board;
  }
  ~CallBoard() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (window_ != MPI_WIN_NULL) MPI_Win_free(&window_);
    if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
  }
  CallBoard(const CallBoard&) = delete;
  CallBoard& operator=(const CallBoard&) = delete;

  /// Where world rank `w` posts on this node's board; -1 if it is on another node.
  int node_rank_of(int world_rank) const {
    return world_rank >= 0 && world_rank < static_cast<int>(node_rank_.size()) ? node_rank_[world_rank] : -1;
  }

  /// The slot of call `number` of the group with board id `group` in the row of node rank `row`.
  CallRecord& slot(int row, int group, int64_t number) const {
    return rows_[row][static_cast<size_t>(group) * kDepth + static_cast<size_t>(number % kDepth)];
  }

  /// Collective over a new group's communicator: an id no member uses for another group (the
  /// largest of the members' next free ids), or -1 once a member has run out.
  int agree_group_id(MPI_Comm comm) {
    int agreed = 0;
    mpi_check(MPI_Allreduce(&next_group_, &agreed, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce (call board id)");
    if (agreed >= kGroups) {
      next_group_ = kGroups;
      return -1;
    }
    next_group_ = agreed + 1;
    return agreed;
  }

 private:
  CallBoard() = default;

  bool open(MPI_Comm world) {
    mpi_check(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_), "MPI_Comm_split_type");
    mpi_check(MPI_Comm_set_errhandler(node_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    int node_size = 0, node_rank = 0, world_size = 0, world_rank = 0;
    MPI_Comm_size(node_, &node_size);
    MPI_Comm_rank(node_, &node_rank);
    MPI_Comm_size(world, &world_size);
    MPI_Comm_rank(world, &world_rank);
    const MPI_Aint bytes = static_cast<MPI_Aint>(sizeof(CallRecord)) * kGroups * kDepth;
    void* mine = nullptr;
    const int rc = MPI_Win_allocate_shared(bytes, static_cast<int>(sizeof(CallRecord)), MPI_INFO_NULL, node_, &mine,
                                           &window_);
    int ok = rc == MPI_SUCCESS, all_ok = 0;  // every member takes the same way
    mpi_check(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, node_), "MPI_Allreduce");
    if (!all_ok) {  // freeing is collective and some members have no window: leave it to MPI_Finalize
      window_ = MPI_WIN_NULL;
      return false;
    }
    std::memset(mine, 0, static_cast<size_t>(bytes));
    rows_.resize(static_cast<size_t>(node_size));
    for (int r = 0; r < node_size; ++r) {
      MPI_Aint size = 0;
      int unit = 0;
      void* base = nullptr;
      mpi_check(MPI_Win_shared_query(window_, r, &size, &unit, &base), "MPI_Win_shared_query");
      rows_[static_cast<size_t>(r)] = static_cast<CallRecord*>(base);
    }
    std::vector<int> world_of(static_cast<size_t>(node_size));
    mpi_check(MPI_Allgather(&world_rank, 1, MPI_INT, world_of.data(), 1, MPI_INT, node_), "MPI_Allgather");
    node_rank_.assign(static_cast<size_t>(world_size), -1);
    for (int r = 0; r < node_size; ++r) node_rank_[static_cast<size_t>(world_of[static_cast<size_t>(r)])] = r;
    return true;  // the allgather also orders every row's clearing before anyone posts
  }

  MPI_Comm node_ = MPI_COMM_NULL;
  MPI_Win window_ = MPI_WIN_NULL;
  std::vector<CallRecord*> rows_;  // each node rank's row, mapped into this process
  std::vector<int> node_rank_;     // per world rank: its node rank, -1 off this node
  int next_group_ = 0;
};

/// The runtime's board (null without one); communicators find it here when they are made.
inline CallBoard*& job_call_board() {
  static CallBoard* board = nullptr;
  return board;
}

}  // namespace dax::detail
