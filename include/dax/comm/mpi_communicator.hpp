// Communicator over an MPI communicator (host buffers). Errors come back as dax::Error naming the
// MPI call: dax's communicators use MPI_ERRORS_RETURN. Every collective is guarded: with
// DAX_CHECK_COLLECTIVES=1 the members first compare what each is about to call, and a watchdog
// aborts the job when a call outlives DAX_TIMEOUT_S.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <dax/comm/collective_checks.hpp>
#include <dax/comm/communicator.hpp>
#include <dax/comm/mpi_check.hpp>
#include <dax/comm/mpi_float16.hpp>
#include <dax/core/error.hpp>
#include <dax/core/hash.hpp>

namespace dax::detail {

inline MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::float32: return MPI_FLOAT;
    case DType::float64: return MPI_DOUBLE;
    case DType::int32: return MPI_INT32_T;
    case DType::int64: return MPI_INT64_T;
    case DType::boolean: return MPI_C_BOOL;
    case DType::bfloat16: return MpiFloat16::get().bfloat16;
    case DType::float16: return MpiFloat16::get().half;
  }
  fail("MPI transport: no MPI type for ", to_string(t));
}

inline MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::float16 || t == DType::bfloat16) return MpiFloat16::get().ops[static_cast<int>(op)];
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::prod: return MPI_PROD;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

/// MPI counts are ints: larger pieces are refused rather than truncated.
inline int mpi_count(int64_t n) {
  DAX_CHECK(n >= 0 && n <= INT_MAX, "MPI transport: a count of ", n,
            " elements exceeds MPI's int limit (", INT_MAX, ")");
  return static_cast<int>(n);
}

inline std::vector<int> mpi_counts(const std::vector<int64_t>& v) {
  std::vector<int> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = mpi_count(v[i]);
  return out;
}

/// One derived datatype per member and direction, describing a region inside a row-major piece.
class MpiRegionExchange final : public PreparedExchange {
 public:
  MpiRegionExchange(const Box& send_block, const std::vector<Box>& send, const Box& recv_block,
                    const std::vector<Box>& recv, int self, int64_t item_bytes) {
    mpi_check(MPI_Type_contiguous(mpi_count(item_bytes), MPI_BYTE, &element_), "MPI_Type_contiguous");
    mpi_check(MPI_Type_commit(&element_), "MPI_Type_commit");
    for (size_t j = 0; j < send.size(); ++j) {
      add(send_block, static_cast<int>(j) == self ? Box{} : send[j], send_types, send_counts, static_cast<int>(j) == self);
      add(recv_block, static_cast<int>(j) == self ? Box{} : recv[j], recv_types, recv_counts, static_cast<int>(j) == self);
    }
    displs.assign(send.size(), 0);  // the types carry the offsets
  }
  ~MpiRegionExchange() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Datatype t : owned_) MPI_Type_free(&t);
    MPI_Type_free(&element_);
  }

  std::vector<MPI_Datatype> send_types, recv_types;
  std::vector<int> send_counts, recv_counts, displs;

 private:
  void add(const Box& block, const Box& region, std::vector<MPI_Datatype>& types, std::vector<int>& counts,
           bool skip) {
    if (skip || numel(region) == 0) {
      types.push_back(MPI_BYTE);
      counts.push_back(0);
      return;
    }
    MPI_Datatype t = MPI_DATATYPE_NULL;
    if (region.empty()) {
      mpi_check(MPI_Type_contiguous(1, element_, &t), "MPI_Type_contiguous");
    } else {
      std::vector<int> sizes, subsizes, starts;
      for (size_t i = 0; i < region.size(); ++i) {
        sizes.push_back(mpi_count(block[i].size()));
        subsizes.push_back(mpi_count(region[i].size()));
        starts.push_back(mpi_count(region[i].start - block[i].start));
      }
      mpi_check(MPI_Type_create_subarray(static_cast<int>(region.size()), sizes.data(), subsizes.data(),
                                         starts.data(), MPI_ORDER_C, element_, &t),
                "MPI_Type_create_subarray");
    }
    mpi_check(MPI_Type_commit(&t), "MPI_Type_commit");
    owned_.push_back(t);
    types.push_back(t);
    counts.push_back(1);
  }

  MPI_Datatype element_ = MPI_DATATYPE_NULL;
  std::vector<MPI_Datatype> owned_;
};

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
inline void abort_job(const std::string& report) {
  std::fprintf(stderr, "%s\n", report.c_str());
  std::fflush(stderr);
  if (!abort_hooks().run(std::chrono::seconds(10)))
    std::fprintf(stderr, "dax: the abort hooks (ncclCommAbort) did not return within 10 s; exiting without them\n");
  std::_Exit(70);
}

class MpiCommunicator final : public Communicator {
 public:
  /// Takes ownership of `comm` (freed on destruction). `name` and `world_ranks` describe the group
  /// in reports; `watchdog` (may be null) bounds every collective's time.
  explicit MpiCommunicator(MPI_Comm comm, std::string name = "world", std::vector<int> world_ranks = {},
                           Watchdog* watchdog = nullptr)
      : comm_(comm), name_(std::move(name)), world_ranks_(std::move(world_ranks)), watchdog_(watchdog) {
    mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    if (world_ranks_.empty())
      for (int r = 0; r < size_; ++r) world_ranks_.push_back(r);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  MPI_Comm native() const { return comm_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_gatherv(const void* send, void* recv, const std::vector<int64_t>& counts,
                   const std::vector<int64_t>& displs, DType type) override {
    const MPI_Datatype t = mpi_type(type);
    const auto c = mpi_counts(counts), d = mpi_counts(displs);
    const Guard guard(*this, "all_gather", total(counts), type);  // the same on every member
    mpi_check(MPI_Allgatherv(send ? send : MPI_IN_PLACE, send ? c[rank_] : 0, t, recv, c.data(),
                             d.data(), t, comm_),
              "MPI_Allgatherv");
  }

  void all_to_allv(const void* send, const std::vector<int64_t>& send_counts,
                   const std::vector<int64_t>& send_displs, void* recv,
                   const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                   DType type) override {
    const MPI_Datatype t = mpi_type(type);
    const auto sc = mpi_counts(send_counts), sd = mpi_counts(send_displs);
    const auto rc = mpi_counts(recv_counts), rd = mpi_counts(recv_displs);
    const Guard guard(*this, "all_to_all", 0, type);  // members send different amounts
    mpi_check(MPI_Alltoallv(send, sc.data(), sd.data(), t, recv, rc.data(), rd.data(), t, comm_),
              "MPI_Alltoallv");
  }

  void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType type,
                      ReduceOp op) override {
    const auto c = mpi_counts(counts);
    const Guard guard(*this, "reduce_scatter", total(counts), type);
    // Equal parts take the block variant, which MPI libraries tune better.
    if (std::all_of(c.begin(), c.end(), [&](int x) { return x == c[0]; })) {
      mpi_check(MPI_Reduce_scatter_block(send, recv, c[0], mpi_type(type), mpi_op(op, type), comm_),
                "MPI_Reduce_scatter_block");
      return;
    }
    mpi_check(MPI_Reduce_scatter(send, recv, c.data(), mpi_type(type), mpi_op(op, type), comm_),
              "MPI_Reduce_scatter");
  }

  void all_reduce(const void* send, void* recv, int64_t count, DType type, ReduceOp op) override {
    const Guard guard(*this, "all_reduce", count, type);
    mpi_check(MPI_Allreduce(send ? send : MPI_IN_PLACE, recv, mpi_count(count), mpi_type(type),
                            mpi_op(op, type), comm_),
              "MPI_Allreduce");
  }

  void broadcast(void* data, int64_t count, DType type, int root) override {
    const Guard guard(*this, "broadcast", count, type);
    mpi_check(MPI_Bcast(data, mpi_count(count), mpi_type(type), root, comm_), "MPI_Bcast");
  }

  void barrier() override {
    const Guard guard(*this, "barrier", 0, DType::int64);
    mpi_check(MPI_Barrier(comm_), "MPI_Barrier");
  }

  void send_recv(const void* send, int dst, void* recv, int src, int64_t count, DType type) override {
    const MPI_Datatype t = mpi_type(type);
    const int n = mpi_count(count);
    const Guard guard(*this, "send_recv", count, type);
    mpi_check(MPI_Sendrecv(send, dst < 0 ? 0 : n, t, dst < 0 ? MPI_PROC_NULL : dst, 0, recv, src < 0 ? 0 : n, t,
                           src < 0 ? MPI_PROC_NULL : src, 0, comm_, MPI_STATUS_IGNORE),
              "MPI_Sendrecv");
  }

  std::unique_ptr<PreparedExchange> prepare_exchange(const Box& send_block, const std::vector<Box>& send,
                                                     const Box& recv_block, const std::vector<Box>& recv,
                                                     int64_t item_bytes) override {
    return std::make_unique<MpiRegionExchange>(send_block, send, recv_block, recv, rank_, item_bytes);
  }

  void exchange(const PreparedExchange& prepared, const void* send, void* recv) override {
    const auto& x = static_cast<const MpiRegionExchange&>(prepared);
    const Guard guard(*this, "exchange", 0, DType::int64);
    mpi_check(MPI_Alltoallw(send, x.send_counts.data(), x.displs.data(), x.send_types.data(), recv,
                            x.recv_counts.data(), x.displs.data(), x.recv_types.data(), comm_),
              "MPI_Alltoallw");
  }

  std::vector<int64_t> all_gather_host(const std::vector<int64_t>& mine) override {
    const Guard guard(*this, "all_gather_host", static_cast<int64_t>(mine.size()), DType::int64);
    std::vector<int64_t> all(mine.size() * size_);
    mpi_check(MPI_Allgather(mine.data(), mpi_count(mine.size()), MPI_INT64_T, all.data(),
                            mpi_count(mine.size()), MPI_INT64_T, comm_),
              "MPI_Allgather");
    return all;
  }

  const std::string& name() const { return name_; }
  /// The world rank of each member, in member order.
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  /// Guards one collective that another transport runs for this group (NCCL, device buffers staged
  /// through host memory) exactly like this communicator's own: compared with the other members'
  /// under DAX_CHECK_COLLECTIVES=1, numbered in the group's sequence and watched while the result
  /// lives (`compare` false: a wait that is not collective over the group, watched only). Keep it
  /// alive for the call's duration.
  [[nodiscard]] auto guard(const char* kind, int64_t count, DType type, bool compare = true) {
    return Guard(*this, kind, count, type, compare);
  }

  /// "x (world ranks 0, 2)": the group's name and members, for reports.
  std::string group_text() const {
    std::string s = name_ + " (world ranks ";
    for (size_t i = 0; i < world_ranks_.size(); ++i) s += (i ? ", " : "") + std::to_string(world_ranks_[i]);
    return s + ")";
  }

 private:
  /// One collective as the checks see it.
  struct Call {
    const MpiCommunicator* comm;
    const char* kind;
    int64_t count;
    DType type;
    int64_t number;            // calls on this communicator so far, this one included
    const std::string* label;  // the op making it, when fingerprints are checked
    std::string missing;       // who had not arrived, when known
  };

  /// Compares the call with the other members' (DAX_CHECK_COLLECTIVES=1) and watches it.
  class Guard {
   public:
    Guard(MpiCommunicator& c, const char* kind, int64_t count, DType type, bool compare = true)
        // Calls that are not collective over the group (a local wait) take no number in its sequence.
        : call_{&c, kind, count, type, compare ? ++c.calls_ : c.calls_, current_op_label(), {}} {
      if (compare && collective_checks().fingerprints && c.size_ > 1) c.compare(call_);
      watched_.emplace(c.watchdog_, &call_, &MpiCommunicator::describe_timeout);
    }

   private:
    Call call_;
    std::optional<Watched> watched_;
  };

  static std::string what(const Call& call) {
    std::string s = call.count ? cat(call.kind, " of ", call.count, " ", to_string(call.type)) : std::string(call.kind);
    if (call.label) s += " in " + *call.label;
    return s + " (call #" + std::to_string(call.number) + " on this group)";
  }

  static std::string describe_timeout(const void* p) {
    const Call& call = *static_cast<const Call*>(p);
    const MpiCommunicator& c = *call.comm;
    return cat("dax: world rank ", c.world_ranks_[c.rank_], " timed out after ", c.timeout_s(), " s (DAX_TIMEOUT_S) in ",
               what(call), " on the group ", c.group_text(), "; ",
               call.missing.empty() ? (collective_checks().fingerprints
                                           ? "every member had reached this call, so one may have died or stalled"
                                           : "set DAX_CHECK_COLLECTIVES=1 to learn which peers had not arrived")
                                    : call.missing,
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
};

}  // namespace dax::detail
