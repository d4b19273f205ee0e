// The checks every MPI collective of a group goes through: the group's calls are numbered and
// compared with the other members' (DAX_CHECK_COLLECTIVES=1: fingerprints before the call; by
// default, the light check: records posted as the call starts, compared as it ends), and each call
// is watched for a timeout or a member that left. MpiCommunicator runs its collectives under a
// Guard from here; NCCL takes one too for the same group (MpiCommunicator::guard), so its calls
// count in the same sequence. The staged device transport runs through MpiCommunicator's calls.
#pragma once

#include <dax/core/mpi.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <dax/comm/call_board.hpp>
#include <dax/comm/collective_checks.hpp>
#include <dax/comm/communicator.hpp>
#include <dax/comm/in_flight.hpp>
#include <dax/comm/mpi_check.hpp>
#include <dax/core/error.hpp>
#include <dax/core/hash.hpp>

namespace dax::detail {

/// Prints the report of a collective that did not finish and leaves with exit code 70.
///
/// Not MPI_Abort: when several ranks time out together they all call it at once, and Open MPI
/// 4.1's launcher was seen to hang there for good (ranks gone, mpirun wedged). Leaving without
/// finalizing ends the job just as surely: the launcher stops every other process when one exits
/// abnormally, and any rank it does not stop is itself waiting in a collective under its own
/// watchdog, so it leaves within the same timeout.
///
/// The abort hooks run first (ncclCommAbort on GPUs, so NCCL kernels waiting for a lost peer
/// stop), for at most 10 s: the job ends even if a broken device never lets them return.
inline void abort_job(const std::string& report, int code = 70) {
  std::fprintf(stderr, "%s\n", report.c_str());
  std::fflush(stderr);
  if (!abort_hooks().run(std::chrono::seconds(10)))
    std::fprintf(stderr, "dax: the abort hooks (ncclCommAbort) did not return within 10 s; exiting without them\n");
  std::_Exit(code);
}

/// The same for a call that can no longer finish (ranks diverged, a peer left): exit code 1, the
/// code of an uncaught dax::Error; a timeout keeps 70.
inline void fail_job(const std::string& report) { abort_job(report, 1); }
inline void abort_job_timed_out(const std::string& report) { abort_job(report, 70); }

/// The last collective this process called, for the notice it sends when it leaves.
struct LastCollective {
  const char* kind = nullptr;
  int64_t count = 0;
  DType type = DType::float32;
  int64_t number = 0;
  const std::string* group = nullptr;
};
inline LastCollective& last_collective() {
  static LastCollective last;
  return last;
}
/// "all_reduce of 1 float32", or the kind alone for a call without a count.
inline std::string call_text(const char* kind, int64_t count, DType type) {
  return count ? cat(kind, " of ", count, " ", to_string(type)) : std::string(kind);
}

inline std::string last_collective_text() {
  const LastCollective& l = last_collective();
  if (!l.kind) return "it had called no collective";
  return cat("its last collective was ", call_text(l.kind, l.count, l.type),
             " (call #", l.number, " on the group ", l.group ? *l.group : std::string("?"), ")");
}

/// Whether two records describe the same call (whoever sent them).
inline bool same_call(const CallRecord& a, const CallRecord& b) {
  return a.number == b.number && a.count == b.count && a.type == b.type && std::strcmp(a.kind, b.kind) == 0;
}

/// "all_reduce of 1 float32 (call #3 on this group)", from a record.
inline std::string call_record_text(const CallRecord& r) {
  std::string s = call_text(r.kind, r.count, static_cast<DType>(r.type));
  return s + " (call #" + std::to_string(r.number) + " on this group)";
}

class MpiCallChecks {
 public:
  /// The checks of the group over `comm` (not owned), of which this process is member `rank` of
  /// `size`; `name` and `world_ranks` describe the group in reports; `watchdog` (may be null)
  /// bounds every call's time. Collective over the group when the job has a node board, the light
  /// check is on and the group has more than one member (the group agrees on its id there).
  MpiCallChecks(MPI_Comm comm, int rank, int size, std::string name, std::vector<int> world_ranks,
                Watchdog* watchdog)
      : comm_(comm), name_(std::move(name)), world_ranks_(std::move(world_ranks)), watchdog_(watchdog), rank_(rank),
        size_(size) {
    if (world_ranks_.empty())
      for (int r = 0; r < size_; ++r) world_ranks_.push_back(r);
    // Under the light check, members on one node post their records on the node's board.
    if (CallBoard* board = job_call_board(); board && size_ > 1 && collective_checks().light) {
      board_group_ = board->agree_group_id(comm_);  // collective over the group, as its creation was
      board_rows_.assign(size_, -1);
      for (int j = 0; j < size_; ++j) board_rows_[j] = board->node_rank_of(world_ranks_[j]);
      if (board_group_ >= 0 && board_rows_[rank_] >= 0) board_ = board;
    }
  }
  ~MpiCallChecks() { free_requests(); }
  MpiCallChecks(const MpiCallChecks&) = delete;
  MpiCallChecks& operator=(const MpiCallChecks&) = delete;

  /// Frees the light check's persistent requests (before the communicator they use is freed).
  void free_requests() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      for (MPI_Request& r : records_) MPI_Request_free(&r);
    records_.clear();
  }

  const std::string& name() const { return name_; }
  /// The world rank of each member, in member order.
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  /// "x (world ranks 0, 2)": the group's name and members, for reports.
  std::string group_text() const {
    std::string s = name_ + " (world ranks ";
    for (size_t i = 0; i < world_ranks_.size(); ++i) s += (i ? ", " : "") + std::to_string(world_ranks_[i]);
    return s + ")";
  }

 private:
  /// One collective as the checks see it.
  struct Call {
    const MpiCallChecks* comm;
    const char* kind;
    int64_t count;
    DType type;
    int64_t number;            // calls on this communicator so far, this one included
    const std::string* label;  // the op making it, when fingerprints are checked
    std::string missing;       // who had not arrived, when known
  };

 public:
  /// Checks the call against the other members' and watches it. DAX_CHECK_COLLECTIVES=1: compares
  /// before the call runs. By default (the light check): sends each member a record of the call as
  /// it starts, and compares the records when it ends; if the call cannot end because the members
  /// called different things, the watchdog sees the records arrive while this rank waits.
  class Guard {
   public:
    Guard(MpiCallChecks& c, const char* kind, int64_t count, DType type, bool compare = true)
        // Calls that are not collective over the group (a local wait) take no number in its sequence.
        : call_{&c, kind, count, type, compare ? ++c.calls_ : c.calls_, current_op_label(), {}} {
      const auto& checks = collective_checks();
      if (compare) last_collective() = LastCollective{kind, count, type, call_.number, &c.name_};
      if (compare && checks.fingerprints && c.size_ > 1) c.compare(call_);
      light_ = compare && checks.light && c.size_ > 1;
      if (light_) c.start_records(call_);
      watched_.emplace(c.watchdog_, &call_, &MpiCallChecks::describe_timeout,
                       light_ ? &MpiCallChecks::poll_records
                              : (checks.fingerprints ? nullptr : &MpiCallChecks::poll_departure));
    }
    /// Under the light check: waits for the other members' records (still watched) and compares.
    /// A difference throws the divergence report on every member (or, while another exception is
    /// already leaving the call, ends the job with it: it is the cause).
    ~Guard() noexcept(false) {
      if (!light_) return;
      MpiCallChecks& c = *const_cast<MpiCallChecks*>(call_.comm);
      const int rc = c.records_.empty() ? MPI_SUCCESS
                                        : MPI_Waitall(static_cast<int>(c.records_.size()), c.records_.data(), MPI_STATUSES_IGNORE);
      std::string report = rc == MPI_SUCCESS ? c.records_report(false) : std::string();
      watched_.reset();
      if (report.empty()) return;
      if (std::uncaught_exceptions() > 0 || started_) fail_job(report);
      fail(report);
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

    const Call& call() const { return call_; }
    bool light() const { return light_; }

    /// check() for a nonblocking call: once it has started, a divergence the records show can no
    /// longer be thrown (the started request could never be completed or freed), so it ends the job.
    void check_started(int rc, const char* mpi_call) {
      check(rc, mpi_call);
      started_ = true;
    }

    /// The MPI call's return code: when it failed and the members' records differ, the
    /// divergence is the cause (MPI matched different calls), so that is what is thrown.
    void check(int rc, const char* mpi_call) {
      if (rc != MPI_SUCCESS && light_) {
        light_ = false;
        MpiCallChecks& c = *const_cast<MpiCallChecks*>(call_.comm);
        if (MPI_Waitall(static_cast<int>(c.records_.size()), c.records_.data(), MPI_STATUSES_IGNORE) == MPI_SUCCESS)
          if (std::string report = c.records_report(false); !report.empty()) fail(report);
      }
      mpi_check(rc, mpi_call);
    }

   private:
    Call call_;
    bool light_ = false;
    bool started_ = false;  // a nonblocking call is under way
    std::optional<Watched> watched_;
  };

  /// A nonblocking call in flight: its requests, the counts and displacements MPI reads until it
  /// finishes, and (under the light check) this member's record of it, which the watchdog compares
  /// with the other members' while wait() waits: on one node a member that reached a different
  /// call may post its record only after the start has looked.
  class Pending final : public PendingCollective {
   public:
    Pending(MpiCallChecks& c, const Guard& g) : call_(g.call()), record_(c.mine_), light_(g.light()) {
      in_flight().push_back(this);  // dax's ops progress it (comm/in_flight.hpp)
    }
    ~Pending() override {
      leave_in_flight(this);
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!done_ && !finalized) MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);  // MPI must not write freed memory
    }
    Pending(const Pending&) = delete;
    Pending& operator=(const Pending&) = delete;

    bool test() override {
      if (!done_) {
        int flag = 0;
        const int rc = MPI_Testall(2, requests, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) failed(rc, "MPI_Testall");
        if (flag) finished();
      }
      if (error_) std::rethrow_exception(error_);  // kept for the owner, however often it asks
      return done_;
    }
    void wait() override {
      if (!done_) {
        const MpiCallChecks& c = *call_.comm;
        Watched watched(c.watchdog_, this, &describe_pending,
                        light_ ? &poll_pending : (collective_checks().fingerprints ? nullptr : &poll_pending_departure));
        const int rc = MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) failed(rc, "MPI_Waitall");
        finished();
      }
      if (error_) std::rethrow_exception(error_);
    }
    /// Keeps `v` alive until the call finishes; returns its data (a deque: it never moves).
    const int* keep(std::vector<int> v) { return kept_.emplace_back(std::move(v)).data(); }

    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};

   private:
    void finished() {
      done_ = true;
      leave_in_flight(this);
    }
    void failed(int rc, const char* mpi_call) {
      try {
        mpi_check(rc, mpi_call);
      } catch (...) {
        error_ = std::current_exception();
      }
      finished();  // MPI reported the call over (with an error): nothing left to wait for
    }
    static std::string describe_pending(const void* p) {
      return describe_timeout(&static_cast<const Pending*>(p)->call_);
    }
    static std::string poll_pending(const void* p, double) {
      const Pending& pd = *static_cast<const Pending*>(p);
      const MpiCallChecks& c = *pd.call_.comm;
      if (std::string report = c.records_report(true, pd.record_); !report.empty()) return report;
      std::vector<bool> missing(c.size_, false);
      CallRecord r;
      for (int j = 0; j < c.size_; ++j) missing[j] = !c.peer_record(j, r, pd.record_);
      return departure_report(pd.call_, missing);
    }
    static std::string poll_pending_departure(const void* p, double armed_s) {
      return poll_departure(&static_cast<const Pending*>(p)->call_, armed_s);
    }

    Call call_;
    CallRecord record_;
    bool light_ = false, done_ = false;
    std::exception_ptr error_;
    std::deque<std::vector<int>> kept_;
  };

 private:
  /// Fills this member's record and posts it: on the node's board for the members there, as a
  /// message (persistent requests, made on the group's first call) to each member elsewhere.
  void start_records(const Call& call) {
    static constexpr int kRecordTag = 0x6468;
    if (!records_ready_) {
      records_ready_ = true;
      theirs_.assign(size_, CallRecord{});
      for (int j = 0; j < size_; ++j) {
        if (j == rank_ || on_board(j)) continue;
        records_.emplace_back();
        mpi_check(MPI_Recv_init(&theirs_[j], sizeof(CallRecord), MPI_BYTE, j, kRecordTag, comm_, &records_.back()),
                  "MPI_Recv_init");
      }
      for (int j = 0; j < size_; ++j) {
        if (j == rank_ || on_board(j)) continue;
        records_.emplace_back();
        mpi_check(MPI_Send_init(&mine_, sizeof(CallRecord), MPI_BYTE, j, kRecordTag, comm_, &records_.back()),
                  "MPI_Send_init");
      }
    }
    mine_.number = call.number;
    mine_.count = call.count;
    mine_.type = static_cast<int32_t>(call.type);
    mine_.world_rank = world_ranks_[rank_];
    std::strncpy(mine_.kind, call.kind, sizeof(mine_.kind) - 1);
    mine_.check = call_record_check(mine_);
    theirs_[rank_] = mine_;
    if (board_) post_call_record(board_->slot(board_rows_[rank_], board_group_, call.number), mine_);
    if (records_.empty()) return;
    for (int j = 0; j < size_; ++j)
      if (j != rank_ && !on_board(j)) __atomic_store_n(&theirs_[j].check, uint64_t{0}, __ATOMIC_RELEASE);
    mpi_check(MPI_Startall(static_cast<int>(records_.size()), records_.data()), "MPI_Startall");
  }

  /// Whether member j posts its records on this node's board (rather than sending them).
  bool on_board(int j) const { return board_ != nullptr && board_rows_[j] >= 0; }

  /// Member j's record of the call in progress, if it has posted or sent it.
  /// (`mine`: this member's record of the call asked about; by default the call in progress.)
  bool peer_record(int j, CallRecord& out) const { return peer_record(j, out, mine_); }
  bool peer_record(int j, CallRecord& out, const CallRecord& mine) const {
    if (j == rank_) {
      out = mine;
      return true;
    }
    // A slot may hold another call of this group (an older one, or a later one once a nonblocking
    // call is waited for after others): only this call's record counts.
    if (!on_board(j)) return read_call_record(theirs_[j], out) && out.number == mine.number;
    return read_call_record(board_->slot(board_rows_[j], board_group_, mine.number), out) &&
           out.number == mine.number && out.world_rank == world_ranks_[j];
  }

  /// The divergence report from the records that have arrived; empty if they all agree. Every
  /// member that has every record builds the same text. `waiting`: asked by the watchdog while this
  /// rank waits in the call (records may still be missing; those members are named as such).
  std::string records_report(bool waiting) const { return records_report(waiting, mine_); }
  std::string records_report(bool waiting, const CallRecord& mine) const {
    bool agree = true;  // the common case, without allocating
    CallRecord r;
    for (int j = 0; j < size_ && agree; ++j) agree = !peer_record(j, r, mine) || same_call(r, mine);
    if (agree) return {};
    std::vector<CallRecord> seen(size_);
    std::vector<bool> arrived(size_, false);
    bool differ = false;
    for (int j = 0; j < size_; ++j) {
      arrived[j] = peer_record(j, seen[j], mine);
      if (arrived[j] && !same_call(seen[j], mine)) differ = true;
    }
    if (!differ) return {};
    std::map<std::string, std::vector<int>> callers;
    for (int j = 0; j < size_; ++j)
      callers[arrived[j] ? "called " + call_record_text(seen[j]) : std::string("had not reached a call on this group yet")]
          .push_back(world_ranks_[j]);
    std::string report = "dax: ranks diverged on the group " + group_text() + ":";
    for (const auto& [t, ranks] : callers) {
      report += ranks.size() == 1 ? "\n  world rank " : "\n  world ranks ";
      for (size_t i = 0; i < ranks.size(); ++i) report += (i ? ", " : "") + std::to_string(ranks[i]);
      report += " " + t;
    }
    report += waiting ? "\n  (seen while world rank " + std::to_string(world_ranks_[rank_]) +
                            " waited in its call; DAX_CHECK_COLLECTIVES=1 also names the ops that made these calls)"
                      : "\n  (DAX_CHECK_COLLECTIVES=1 also names the ops that made these calls)";
    return report;
  }

  /// "world rank 1 left the program (...) while world rank 0 waited for it in ...", if a member
  /// that `missing` says has not reached the call sent a departure notice.
  static std::string departure_report(const Call& call, const std::vector<bool>& missing) {
    DepartureNotice d;
    if (!read_departure(d)) return {};
    const MpiCallChecks& c = *call.comm;
    for (int j = 0; j < c.size_; ++j) {
      if (!missing[j] || c.world_ranks_[j] != d.world_rank) continue;
      return cat("dax: world rank ", d.world_rank, " left the program (", departure_text(d), ") while world rank ",
                 c.world_ranks_[c.rank_], " waited for it in ", what(call), " on the group ", c.group_text(),
                 ". Aborting the job.");
    }
    return {};
  }

  /// The watchdog's question under the light check: did the records show a divergence, or did a
  /// member that has not sent its record leave?
  static std::string poll_records(const void* p, double) {
    const Call& call = *static_cast<const Call*>(p);
    const MpiCallChecks& c = *call.comm;
    std::string report = c.records_report(true);
    if (!report.empty()) return report;
    std::vector<bool> missing(c.size_, false);
    CallRecord r;
    for (int j = 0; j < c.size_; ++j) missing[j] = !c.peer_record(j, r);
    return departure_report(call, missing);
  }

  /// Without records (DAX_CHECK_COLLECTIVES=0): a member that left while this rank has waited for
  /// a second (a member that finished the call and left cannot keep it waiting that long).
  static std::string poll_departure(const void* p, double armed_s) {
    if (armed_s < 1.0) return {};
    const Call& call = *static_cast<const Call*>(p);
    std::vector<bool> missing(call.comm->size_, true);
    missing[call.comm->rank_] = false;
    return departure_report(call, missing);
  }

  static std::string what(const Call& call) {
    std::string s = call_text(call.kind, call.count, call.type);
    if (call.label) s += " in " + *call.label;
    return s + " (call #" + std::to_string(call.number) + " on this group)";
  }

  static std::string describe_timeout(const void* p) {
    const Call& call = *static_cast<const Call*>(p);
    const MpiCallChecks& c = *call.comm;
    std::string missing = call.missing;
    if (missing.empty() && collective_checks().light && c.records_ready_ && c.mine_.number == call.number) {
      std::string late;  // the light check's records say who has not arrived
      CallRecord r;
      for (int j = 0; j < c.size_; ++j)
        if (!c.peer_record(j, r))
          late += (late.empty() ? "" : ", ") + std::to_string(c.world_ranks_[j]);
      missing = late.empty() ? "every member had reached this call, so one may have died or stalled"
                       : "world rank(s) " + late + " had not reached this call";
    }
    return cat("dax: world rank ", c.world_ranks_[c.rank_], " timed out after ", c.timeout_s(), " s (DAX_TIMEOUT_S) in ",
               what(call), " on the group ", c.group_text(), "; ",
               missing.empty() ? (collective_checks().fingerprints
                                           ? "every member had reached this call, so one may have died or stalled"
                                           : "set DAX_CHECK_COLLECTIVES=1 to learn which peers had not arrived")
                                    : missing,
               ". Aborting the job.");
  }

  double timeout_s() const { return watchdog_ ? watchdog_->timeout_s() : collective_checks().timeout_s; }

  /// Every member sends every other its call's fingerprint (point to point, so a rank that never
  /// arrives is named); on any difference all members swap the calls' text and throw one report.
  void compare(Call& call) {
    static constexpr int kFingerprintTag = 0x6466, kTextTag = 0x6467;
    const std::string text = what(call);
    size_t h = 0x66696e67;
    hash_into(h, text);
    const int64_t mine[2] = {static_cast<int64_t>(h), static_cast<int64_t>(text.size())};
    std::vector<int64_t> theirs(2 * size_);
    theirs[2 * rank_] = mine[0];
    theirs[2 * rank_ + 1] = mine[1];
    std::vector<MPI_Request> recvs(size_, MPI_REQUEST_NULL), sends(size_, MPI_REQUEST_NULL);
    for (int j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      mpi_check(MPI_Irecv(&theirs[2 * j], 2, MPI_INT64_T, j, kFingerprintTag, comm_, &recvs[j]), "MPI_Irecv");
      mpi_check(MPI_Isend(mine, 2, MPI_INT64_T, j, kFingerprintTag, comm_, &sends[j]), "MPI_Isend");
    }
    wait_for_peers(recvs, call);
    mpi_check(MPI_Waitall(size_, sends.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    bool same = true;
    for (int j = 0; j < size_; ++j) same = same && theirs[2 * j] == mine[0];
    if (same) return;
    std::vector<std::string> texts(size_);
    texts[rank_] = text;
    for (int j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      texts[j].resize(static_cast<size_t>(theirs[2 * j + 1]));
      mpi_check(MPI_Irecv(texts[j].data(), mpi_count(theirs[2 * j + 1]), MPI_CHAR, j, kTextTag, comm_, &recvs[j]),
                "MPI_Irecv");
      mpi_check(MPI_Isend(text.data(), mpi_count(static_cast<int64_t>(text.size())), MPI_CHAR, j, kTextTag, comm_,
                          &sends[j]),
                "MPI_Isend");
    }
    wait_for_peers(recvs, call);
    mpi_check(MPI_Waitall(size_, sends.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    std::map<std::string, std::vector<int>> callers;  // the same text from every member, in one order
    for (int j = 0; j < size_; ++j) callers[texts[j]].push_back(world_ranks_[j]);
    std::string report = "dax: ranks diverged on the group " + group_text() + " (DAX_CHECK_COLLECTIVES=1):";
    for (const auto& [t, ranks] : callers) {
      report += ranks.size() == 1 ? "\n  world rank " : "\n  world ranks ";
      for (size_t i = 0; i < ranks.size(); ++i) report += (i ? ", " : "") + std::to_string(ranks[i]);
      report += " called " + t;
    }
    fail(report);
  }

  /// Completes the receives, or names the members that never sent and aborts after the timeout.
  void wait_for_peers(std::vector<MPI_Request>& recvs, Call& call) {
    const double timeout = timeout_s();
    const auto start = std::chrono::steady_clock::now();
    while (true) {
      int done = 0;
      mpi_check(MPI_Testall(size_, recvs.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (done) return;
      if (DepartureNotice d; read_departure(d)) {  // a member left: had it sent its fingerprint?
        std::vector<bool> late(size_, false);
        for (int j = 0; j < size_; ++j) {
          int arrived = 1;
          if (recvs[j] != MPI_REQUEST_NULL) MPI_Test(&recvs[j], &arrived, MPI_STATUS_IGNORE);
          late[j] = !arrived;
        }
        if (std::string report = departure_report(call, late); !report.empty()) fail_job(report);
      }
      if (timeout > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout) {
        std::string late;
        for (int j = 0; j < size_; ++j) {
          int arrived = 1;
          if (recvs[j] != MPI_REQUEST_NULL) MPI_Test(&recvs[j], &arrived, MPI_STATUS_IGNORE);
          if (!arrived) late += (late.empty() ? "" : ", ") + std::to_string(world_ranks_[j]);
        }
        call.missing = "world rank(s) " + late + " had not reached this call";
        abort_job(describe_timeout(&call));
      }
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  std::vector<int> world_ranks_;
  Watchdog* watchdog_ = nullptr;
  int rank_ = 0, size_ = 1;
  int64_t calls_ = 0;
  CallRecord mine_;                   // the light check's record of this member's call in progress
  std::vector<CallRecord> theirs_;    // records sent by members off this node (this member's own in its slot)
  std::vector<MPI_Request> records_;  // persistent receives from each member off the node, then sends to each
  bool records_ready_ = false;        // the light check has set up this group's records
  CallBoard* board_ = nullptr;        // the node's board, when this group has an id on it
  int board_group_ = -1;              // this group's id on the board
  std::vector<int> board_rows_;       // each member's row on the board, -1 off this node
};

}  // namespace dax::detail
