// Communicator over an MPI communicator (host buffers). Errors come back as dax::Error naming the
// MPI call: dax's communicators use MPI_ERRORS_RETURN. Every collective runs under a Guard of the
// group's MpiCallChecks (comm/mpi_call_checks.hpp): numbered, compared with the other members' calls
// and watched, so ranks that diverge or stall are reported instead of hanging.
#pragma once

#include <dax/core/mpi.hpp>

#if defined(__linux__)
#include <sys/uio.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <dax/comm/cma_exchange.hpp>
#include <dax/comm/mpi_call_checks.hpp>
#include <dax/comm/communicator.hpp>
#include <dax/comm/mpi_check.hpp>
#include <dax/comm/mpi_float16.hpp>
#include <dax/comm/node_shared_memory.hpp>
#include <dax/core/env.hpp>
#include <dax/core/error.hpp>

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
    case DType::complex64: return MPI_C_FLOAT_COMPLEX;  // MPI_SUM and MPI_PROD are defined on them
    case DType::complex128: return MPI_C_DOUBLE_COMPLEX;
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

/// One strided exchange, as runs per member and direction; and, unless the group copies it by
/// cross-memory attach, as one derived datatype per member and direction for MPI_Alltoallw.
class MpiRegionExchange final : public PreparedExchange {
 public:
  MpiRegionExchange(const Box& send_block, const std::vector<Box>& send, const Box& recv_block,
                    const std::vector<Box>& recv, int self) {
    for (size_t j = 0; j < send.size(); ++j) {
      const bool own = static_cast<int>(j) == self;
      send_runs.push_back(own ? RegionRuns() : RegionRuns(send_block, send[j]));
      recv_runs.push_back(own ? RegionRuns() : RegionRuns(recv_block, recv[j]));
    }
  }
  /// The datatypes, for an exchange that goes through MPI (the same regions as the constructor's).
  void build_types(const Box& send_block, const std::vector<Box>& send, const Box& recv_block,
                   const std::vector<Box>& recv, int self, int64_t item_bytes) {
    mpi_check(MPI_Type_contiguous(mpi_count(item_bytes), MPI_BYTE, &element_), "MPI_Type_contiguous");
    mpi_check(MPI_Type_commit(&element_), "MPI_Type_commit");
    for (size_t j = 0; j < send.size(); ++j) {
      const bool own = static_cast<int>(j) == self;
      add(send_block, own ? Box{} : send[j], send_types, send_counts, own);
      add(recv_block, own ? Box{} : recv[j], recv_types, recv_counts, own);
    }
    displs.assign(send.size(), 0);  // the types carry the offsets
  }
  ~MpiRegionExchange() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Datatype t : owned_) MPI_Type_free(&t);
    if (element_ != MPI_DATATYPE_NULL) MPI_Type_free(&element_);
  }

  std::vector<MPI_Datatype> send_types, recv_types;
  std::vector<int> send_counts, recv_counts, displs;
  // The same regions as runs; and, when the group agreed to copy them itself (peer writes or
  // cross-memory attach), per member: `writes`, the segments of what this member sends it, paired
  // with its receive region. Where the receiver published its piece (a shareable block), the
  // sender writes them: through its mapping of the piece, or by process_vm_writev where it cannot
  // map it. Otherwise the kernel copies them, written by the sender where `pushed` (its side has
  // more runs) or read by the receiver with process_vm_readv (`pulls`, the same pairing seen from
  // the receiver).
  std::vector<RegionRuns> send_runs, recv_runs;
  bool by_cma = false;
  bool peer_writes = false;  // this member's receive piece is to be mappable, for the senders to write
  int64_t recv_bytes = 0;    // the receive piece's size
  std::vector<std::vector<CopySegment>> pulls, writes;
  std::vector<char> pushed;
  // The caller's own region, when the exchange copies it (empty: the caller does); and the copies
  // it makes itself in the order of their sources: (0, k) is own[k], (j + 1, k) writes[j][k].
  std::vector<CopySegment> own;
  std::vector<std::pair<int, int64_t>> order;
  int64_t id = 0;  // its number among the exchanges prepared on the communicator (the same on every member)

  bool receives_from_peer_writes() const override { return peer_writes; }
  bool copies_own_part() const override { return !own.empty(); }

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

class MpiCommunicator final : public Communicator {
  using Guard = MpiCallChecks::Guard;
  using Pending = MpiCallChecks::Pending;

  static MPI_Comm returning_errors(MPI_Comm comm) {
    mpi_check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    return comm;
  }
  static int rank_in(MPI_Comm comm) {
    int rank = 0;
    mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    return rank;
  }
  static int size_of(MPI_Comm comm) {
    int size = 0;
    mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    return size;
  }

 public:
  /// Takes ownership of `comm` (freed on destruction). `name` and `world_ranks` describe the group
  /// in reports; `watchdog` (may be null) bounds every collective's time.
  explicit MpiCommunicator(MPI_Comm comm, std::string name = "world", std::vector<int> world_ranks = {},
                           Watchdog* watchdog = nullptr)
      : comm_(returning_errors(comm)),
        rank_(rank_in(comm_)),
        size_(size_of(comm_)),
        checks_(comm_, rank_, size_, std::move(name), std::move(world_ranks), watchdog) {}
  ~MpiCommunicator() override {
    checks_.free_requests();  // they use the communicator
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
    Guard guard(checks_, "all_gather", total(counts), type);  // the same on every member
    guard.check(MPI_Allgatherv(send ? send : MPI_IN_PLACE, send ? c[rank_] : 0, t, recv, c.data(),
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
    Guard guard(checks_, "all_to_all", 0, type);  // members send different amounts
    guard.check(MPI_Alltoallv(send, sc.data(), sd.data(), t, recv, rc.data(), rd.data(), t, comm_),
              "MPI_Alltoallv");
  }

  void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType type,
                      ReduceOp op) override {
    const auto c = mpi_counts(counts);
    Guard guard(checks_, "reduce_scatter", total(counts), type);
    if (use_ring(total(counts), type)) {
      std::vector<int64_t> displs(counts.size(), 0);
      for (size_t j = 1; j < counts.size(); ++j) displs[j] = displs[j - 1] + counts[j - 1];
      guard.check(ring_reduce_scatter(static_cast<const char*>(send), static_cast<char*>(recv), counts, displs, type, op),
                  "MPI_Sendrecv (ring reduce-scatter)");
      return;
    }
    // Equal parts take the block variant, which MPI libraries tune better.
    if (std::all_of(c.begin(), c.end(), [&](int x) { return x == c[0]; })) {
      guard.check(MPI_Reduce_scatter_block(send, recv, c[0], mpi_type(type), mpi_op(op, type), comm_),
                "MPI_Reduce_scatter_block");
      return;
    }
    guard.check(MPI_Reduce_scatter(send, recv, c.data(), mpi_type(type), mpi_op(op, type), comm_),
              "MPI_Reduce_scatter");
  }

  void all_reduce(const void* send, void* recv, int64_t count, DType type, ReduceOp op) override {
    Guard guard(checks_, "all_reduce", count, type);
    if (use_ring(count, type)) {  // a ring reduce-scatter, then every block to every member
      std::vector<int64_t> counts(size_), displs(size_);
      for (int j = 0; j < size_; ++j) {
        displs[j] = count * j / size_;
        counts[j] = count * (j + 1) / size_ - displs[j];
      }
      const auto c = mpi_counts(counts), d = mpi_counts(displs);  // refused before anything moves
      char* out = static_cast<char*>(recv);
      const char* contributions = send ? static_cast<const char*>(send) : out;
      guard.check(ring_reduce_scatter(contributions, out + displs[rank_] * itemsize(type), counts, displs, type, op),
                  "MPI_Sendrecv (ring reduce-scatter)");
      guard.check(MPI_Allgatherv(MPI_IN_PLACE, 0, mpi_type(type), recv, c.data(), d.data(), mpi_type(type), comm_),
                  "MPI_Allgatherv");
      return;
    }
    guard.check(MPI_Allreduce(send ? send : MPI_IN_PLACE, recv, mpi_count(count), mpi_type(type),
                            mpi_op(op, type), comm_),
              "MPI_Allreduce");
  }

  void broadcast(void* data, int64_t count, DType type, int root) override {
    Guard guard(checks_, "broadcast", count, type);
    guard.check(MPI_Bcast(data, mpi_count(count), mpi_type(type), root, comm_), "MPI_Bcast");
  }

  void barrier() override {
    Guard guard(checks_, "barrier", 0, DType::int64);
    guard.check(MPI_Barrier(comm_), "MPI_Barrier");
  }

  void send_recv(const void* send, int dst, void* recv, int src, int64_t count, DType type) override {
    const MPI_Datatype t = mpi_type(type);
    const int n = mpi_count(count);
    Guard guard(checks_, "send_recv", count, type);
    guard.check(MPI_Sendrecv(send, dst < 0 ? 0 : n, t, dst < 0 ? MPI_PROC_NULL : dst, 0, recv, src < 0 ? 0 : n, t,
                           src < 0 ? MPI_PROC_NULL : src, 0, comm_, MPI_STATUS_IGNORE),
              "MPI_Sendrecv");
  }

  std::unique_ptr<PreparedExchange> prepare_exchange(const Box& send_block, const std::vector<Box>& send,
                                                     const Box& recv_block, const std::vector<Box>& recv,
                                                     int64_t item_bytes) override {
    return prepare_exchange_keeping(send_block, send, recv_block, recv, Box{}, item_bytes);
  }

  /// Copied by this process itself (cross-memory attach, peer writes), the exchange copies `keep`
  /// too: in one pass with the parts written into peers' pieces, in the order of the source.
  std::unique_ptr<PreparedExchange> prepare_exchange_keeping(const Box& send_block, const std::vector<Box>& send,
                                                             const Box& recv_block, const std::vector<Box>& recv,
                                                             const Box& keep, int64_t item_bytes) override {
    auto x = std::make_unique<MpiRegionExchange>(send_block, send, recv_block, recv, rank_);
    x->recv_bytes = numel(recv_block) * item_bytes;
    prepare_cma(*x, item_bytes);
    if (!x->by_cma) {
      x->build_types(send_block, send, recv_block, recv, rank_, item_bytes);
      return x;
    }
    if (!keep.empty()) x->own = pair_runs(RegionRuns(send_block, keep), RegionRuns(recv_block, keep), item_bytes);
    std::vector<const std::vector<CopySegment>*> lists{&x->own};
    for (const auto& w : x->writes) lists.push_back(&w);
    x->order = in_source_order(lists);
    return x;
  }

  void exchange(const PreparedExchange& prepared, const void* send, void* recv) override {
    const auto& x = static_cast<const MpiRegionExchange&>(prepared);
    Guard guard(checks_, "exchange", 0, DType::int64);
    if (x.by_cma) return cma_exchange(x, send, recv, guard);
    ++cma_counts().mpi_exchanges;
    guard.check(MPI_Alltoallw(send, x.send_counts.data(), x.displs.data(), x.send_types.data(), recv,
                            x.recv_counts.data(), x.displs.data(), x.recv_types.data(), comm_),
              "MPI_Alltoallw");
  }

  // The nonblocking calls. Checked as they start, exactly like the blocking ones (their records
  // name them "... (async)": a member that starts one while another calls the blocking form is a
  // divergence MPI could not match); only the wait is watched for a timeout, so work done between
  // start and wait never counts against DAX_TIMEOUT_S.
  std::unique_ptr<PendingCollective> start_all_gatherv(const void* send, void* recv, const std::vector<int64_t>& counts,
                                                       const std::vector<int64_t>& displs, DType type) override {
    const MPI_Datatype t = mpi_type(type);
    auto c = mpi_counts(counts), d = mpi_counts(displs);  // refused before the call is numbered
    Guard guard(checks_, "all_gather (async)", total(counts), type);
    auto p = std::make_unique<Pending>(checks_, guard);
    const int* cs = p->keep(std::move(c));
    const int* ds = p->keep(std::move(d));
    guard.check_started(MPI_Iallgatherv(send ? send : MPI_IN_PLACE, send ? cs[rank_] : 0, t, recv, cs, ds, t, comm_,
                                        &p->requests[0]),
                        "MPI_Iallgatherv");
    return p;
  }

  std::unique_ptr<PendingCollective> start_all_to_allv(const void* send, const std::vector<int64_t>& send_counts,
                                                       const std::vector<int64_t>& send_displs, void* recv,
                                                       const std::vector<int64_t>& recv_counts,
                                                       const std::vector<int64_t>& recv_displs, DType type) override {
    const MPI_Datatype t = mpi_type(type);
    auto sc = mpi_counts(send_counts), sd = mpi_counts(send_displs);
    auto rc = mpi_counts(recv_counts), rd = mpi_counts(recv_displs);
    Guard guard(checks_, "all_to_all (async)", 0, type);  // members send different amounts
    auto p = std::make_unique<Pending>(checks_, guard);
    const int *scs = p->keep(std::move(sc)), *sds = p->keep(std::move(sd));
    const int *rcs = p->keep(std::move(rc)), *rds = p->keep(std::move(rd));
    guard.check_started(MPI_Ialltoallv(send, scs, sds, t, recv, rcs, rds, t, comm_, &p->requests[0]), "MPI_Ialltoallv");
    return p;
  }

  std::unique_ptr<PendingCollective> start_reduce_scatter(const void* send, void* recv,
                                                          const std::vector<int64_t>& counts, DType type,
                                                          ReduceOp op) override {
    const MPI_Datatype t = mpi_type(type);
    const MPI_Op o = mpi_op(op, type);
    auto c = mpi_counts(counts);
    const bool equal = std::all_of(c.begin(), c.end(), [&](int x) { return x == c[0]; });
    Guard guard(checks_, "reduce_scatter (async)", total(counts), type);
    auto p = std::make_unique<Pending>(checks_, guard);
    const int* cs = p->keep(std::move(c));
    if (equal)  // the block variant, as in the blocking call
      guard.check_started(MPI_Ireduce_scatter_block(send, recv, cs[0], t, o, comm_, &p->requests[0]),
                          "MPI_Ireduce_scatter_block");
    else
      guard.check_started(MPI_Ireduce_scatter(send, recv, cs, t, o, comm_, &p->requests[0]), "MPI_Ireduce_scatter");
    return p;
  }

  std::unique_ptr<PendingCollective> start_all_reduce(const void* send, void* recv, int64_t count, DType type,
                                                      ReduceOp op) override {
    const int n = mpi_count(count);
    Guard guard(checks_, "all_reduce (async)", count, type);
    auto p = std::make_unique<Pending>(checks_, guard);
    guard.check_started(MPI_Iallreduce(send ? send : MPI_IN_PLACE, recv, n, mpi_type(type), mpi_op(op, type), comm_,
                                       &p->requests[0]),
                        "MPI_Iallreduce");
    return p;
  }

  std::unique_ptr<PendingCollective> start_send_recv(const void* send, int dst, void* recv, int src, int64_t count,
                                                     DType type) override {
    const MPI_Datatype t = mpi_type(type);
    const int n = mpi_count(count);
    Guard guard(checks_, "send_recv (async)", count, type);
    auto p = std::make_unique<Pending>(checks_, guard);
    guard.check_started(MPI_Irecv(recv, src < 0 ? 0 : n, t, src < 0 ? MPI_PROC_NULL : src, 0, comm_, &p->requests[0]),
                        "MPI_Irecv");
    guard.check_started(MPI_Isend(send, dst < 0 ? 0 : n, t, dst < 0 ? MPI_PROC_NULL : dst, 0, comm_, &p->requests[1]),
                        "MPI_Isend");
    return p;
  }

  std::unique_ptr<PendingCollective> start_send(const void* send, int dst, int64_t count, DType type,
                                                int tag) override {
    Guard guard(checks_, "send (point-to-point)", count, type, /*compare=*/false);
    auto p = std::make_unique<Pending>(checks_, guard);
    guard.check_started(MPI_Isend(send, mpi_count(count), mpi_type(type), dst, tag, comm_, &p->requests[0]),
                        "MPI_Isend");
    return p;
  }

  std::unique_ptr<PendingCollective> start_recv(void* recv, int src, int64_t count, DType type, int tag) override {
    Guard guard(checks_, "recv (point-to-point)", count, type, /*compare=*/false);
    auto p = std::make_unique<Pending>(checks_, guard);
    guard.check_started(MPI_Irecv(recv, mpi_count(count), mpi_type(type), src, tag, comm_, &p->requests[0]),
                        "MPI_Irecv");
    return p;
  }

  std::unique_ptr<PendingCollective> start_exchange(const PreparedExchange& prepared, const void* send,
                                                    void* recv) override {
    const auto& x = static_cast<const MpiRegionExchange&>(prepared);  // its arrays outlive the call (the plan holds it)
    Guard guard(checks_, "exchange (async)", 0, DType::int64);
    if (x.by_cma) {  // reads by the CPU that calls: nothing left to run in the background
      cma_exchange(x, send, recv, guard);
      return std::make_unique<FinishedCollective>();
    }
    auto p = std::make_unique<Pending>(checks_, guard);
    guard.check_started(MPI_Ialltoallw(send, x.send_counts.data(), x.displs.data(), x.send_types.data(), recv,
                                       x.recv_counts.data(), x.displs.data(), x.recv_types.data(), comm_,
                                       &p->requests[0]),
                        "MPI_Ialltoallw");
    return p;
  }

  std::vector<int64_t> all_gather_host(const std::vector<int64_t>& mine) override {
    Guard guard(checks_, "all_gather_host", static_cast<int64_t>(mine.size()), DType::int64);
    std::vector<int64_t> all(mine.size() * size_);
    guard.check(MPI_Allgather(mine.data(), mpi_count(mine.size()), MPI_INT64_T, all.data(),
                            mpi_count(mine.size()), MPI_INT64_T, comm_),
              "MPI_Allgather");
    return all;
  }

  /// Whether strided exchanges may copy by cross-memory attach (the CPU reads and writes the
  /// buffers itself). A transport that passes device pointers to MPI turns it off, on every member.
  void allow_copies_by_cma(bool allowed) { cma_allowed_ = allowed; }

  const std::string& name() const { return checks_.name(); }
  /// The world rank of each member, in member order.
  const std::vector<int>& world_ranks() const { return checks_.world_ranks(); }

  /// Guards one collective that another transport runs for this group (NCCL, device buffers staged
  /// through host memory) exactly like this communicator's own: compared with the other members'
  /// under DAX_CHECK_COLLECTIVES=1, numbered in the group's sequence and watched while the result
  /// lives (`compare` false: a wait that is not collective over the group, watched only). Keep it
  /// alive for the call's duration.
  [[nodiscard]] auto guard(const char* kind, int64_t count, DType type, bool compare = true) {
    return Guard(checks_, kind, count, type, compare);
  }

  /// "x (world ranks 0, 2)": the group's name and members, for reports.
  std::string group_text() const { return checks_.group_text(); }

 private:
  // ---- Strided exchanges by cross-memory attach (comm/cma_exchange.hpp) ----

  /// Exchanges at least this large (bytes a member sends or receives, the group's most) with runs
  /// at least this long on every member go by cross-memory attach: one iovec per run costs little
  /// next to its copy there, and the two small collectives around the reads are noise.
  static constexpr int64_t kCmaMinRunBytes = 1 << 10;
  static constexpr int64_t kCmaMinBytes = 1 << 18;
  static constexpr int64_t kCmaBatchBytes = int64_t(1) << 30;  // pair_runs cuts segments to this too

  /// Whether the members can read one another's memory: Linux, all on this node, DAX_CMA not
  /// "0", and a test read of each neighbour's memory worked on every member. Decided together
  /// once, on the group's first large strided exchange.
  bool cma_usable() {
    if (cma_usable_) return *cma_usable_;
    int ok = env_turned_off("DAX_CMA") ? 0 : 1;
#if !defined(__linux__)
    ok = 0;
#endif
    MPI_Comm node = MPI_COMM_NULL;
    {
      Guard guard(checks_, "exchange setup", 0, DType::int32);
      guard.check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    }
    int on_node = 0;
    mpi_check(MPI_Comm_size(node, &on_node), "MPI_Comm_size");
    MPI_Comm_free(&node);
    if (on_node != size_) {  // members on other nodes: plain MPI between them
      ok = 0;
      ++cma_counts().groups_across_nodes;
    }
    const bool tried = ok != 0;
    // Every member reads every other's probe word, a value drawn per process: a read that lands in
    // another process (a process id from another namespace) does not find it.
    static const int64_t probe = static_cast<int64_t>(std::random_device{}()) << 20 ^ getpid_();
    const int64_t mine[3] = {getpid_(), static_cast<int64_t>(reinterpret_cast<uintptr_t>(&probe)), probe};
    std::vector<int64_t> all(3 * static_cast<size_t>(size_));
    {
      Guard guard(checks_, "exchange setup", 3, DType::int64);
      guard.check(MPI_Allgather(mine, 3, MPI_INT64_T, all.data(), 3, MPI_INT64_T, comm_), "MPI_Allgather");
    }
    cma_pids_.assign(size_, 0);
    for (int j = 0; j < size_; ++j) cma_pids_[j] = all[3 * j];
#if defined(__linux__)
    for (int j = 0; j < size_ && ok; ++j) {
      if (j == rank_) continue;
      int64_t got = 0;
      iovec local{&got, sizeof got}, remote{reinterpret_cast<void*>(static_cast<uintptr_t>(all[3 * j + 1])), sizeof got};
      ok = process_vm_readv(static_cast<pid_t>(cma_pids_[j]), &local, 1, &remote, 1, 0) == sizeof got && got == all[3 * j + 2];
    }
#endif
    {
      Guard guard(checks_, "exchange setup", 1, DType::int32);
      guard.check(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
    }
    if (tried && !ok) ++cma_counts().groups_refused;
    cma_usable_ = ok != 0;
    return *cma_usable_;
  }

  static int64_t getpid_() {
#if defined(__linux__)
    return static_cast<int64_t>(::getpid());
#else
    return 0;
#endif
  }

  /// Decides, with the whole group (this runs where every member prepares the same exchange),
  /// whether `x` goes by cross-memory attach; if so, tells each member what the others send it
  /// and lists the segments it will read.
  void prepare_cma(MpiRegionExchange& x, int64_t item) {
    if (size_ == 1) return;
    bool describable = true;
    int64_t bytes_sent = 0, bytes_received = 0;
    for (size_t j = 0; j < x.send_runs.size(); ++j) {
      describable = describable && x.send_runs[j].fits_record() && x.recv_runs[j].fits_record();
      bytes_sent += x.send_runs[j].elements * item;
      bytes_received += x.recv_runs[j].elements * item;
    }
    const bool runs_long = shortest_run_bytes(x.send_runs, item) >= kCmaMinRunBytes &&
                           shortest_run_bytes(x.recv_runs, item) >= kCmaMinRunBytes;
    const auto all = all_gather_host({describable && runs_long && cma_allowed_ ? 1 : 0, std::max(bytes_sent, bytes_received)});
    bool want = true;
    int64_t most = 0;
    for (int j = 0; j < size_; ++j) want = want && all[2 * j] == 1, most = std::max(most, all[2 * j + 1]);
    if (!want || most < kCmaMinBytes || !cma_usable()) return;
    // Each member tells each other one what it sends it and what it receives from it.
    constexpr int R = RegionRuns::record_size;
    std::vector<int64_t> out(static_cast<size_t>(size_) * 2 * R), in(out.size());
    for (int j = 0; j < size_; ++j) {
      x.send_runs[j].write(&out[static_cast<size_t>(j) * 2 * R]);
      x.recv_runs[j].write(&out[static_cast<size_t>(j) * 2 * R + R]);
    }
    {
      Guard guard(checks_, "exchange setup", 2 * R, DType::int64);
      guard.check(MPI_Alltoall(out.data(), 2 * R, MPI_INT64_T, in.data(), 2 * R, MPI_INT64_T, comm_), "MPI_Alltoall");
    }
    // What each pair describes must be the same elements; otherwise (a bug, never expected) the
    // group keeps MPI's datatypes, which check their own sizes.
    int matched = 1;
    std::vector<RegionRuns> theirs_sent(size_), theirs_received(size_);
    for (int j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      theirs_sent[j] = RegionRuns::read(&in[static_cast<size_t>(j) * 2 * R]);
      theirs_received[j] = RegionRuns::read(&in[static_cast<size_t>(j) * 2 * R + R]);
      if (theirs_sent[j].elements != x.recv_runs[j].elements || theirs_received[j].elements != x.send_runs[j].elements)
        matched = 0;
    }
    {
      Guard guard(checks_, "exchange setup", 1, DType::int32);
      guard.check(MPI_Allreduce(MPI_IN_PLACE, &matched, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
    }
    if (!matched) return;
    x.pulls.assign(size_, {});
    x.writes.assign(size_, {});
    x.pushed.assign(size_, 0);
    bool receives = false;
    for (int j = 0; j < size_; ++j) {
      if (j == rank_) continue;
      receives = receives || x.recv_runs[j].elements > 0;
      if (x.recv_runs[j].elements && !pushed(theirs_sent[j], x.recv_runs[j]))
        x.pulls[j] = pair_runs(theirs_sent[j], x.recv_runs[j], item);
      if (x.send_runs[j].elements) {
        x.writes[j] = pair_runs(x.send_runs[j], theirs_received[j], item);
        x.pushed[j] = pushed(x.send_runs[j], theirs_received[j]);
      }
    }
    // Whether the senders write into this member's piece themselves is settled per call (each
    // member tells the others where its piece lies, shared or not); this only asks for the memory.
    x.peer_writes = receives && peer_writes_enabled();
    x.id = ++cma_prepared_;  // the same on every member: they prepare together, in the same order
    x.by_cma = true;
  }

  /// Runs `x` by this group's own copies: every member's buffers for this call go round (and where
  /// its receive piece can be mapped), each member copies its own part and writes into the pieces
  /// it maps in one pass, then makes its kernel reads and writes; an all-reduce both holds every
  /// buffer until all copies are done and tells every member whether they all went through.
  void cma_exchange(const MpiRegionExchange& x, const void* send, void* recv, Guard& guard) {
    // Per member: its buffers, the exchange's number, and where its receive piece lies if the
    // others can map it (block number, memfd, length, inode, offset; block -1 when they cannot).
    constexpr int F = 8;
    int64_t mine[F] = {static_cast<int64_t>(reinterpret_cast<uintptr_t>(send)),
                       static_cast<int64_t>(reinterpret_cast<uintptr_t>(recv)), x.id, -1, -1, 0, 0, 0};
    if (x.peer_writes)
      if (const auto place = NodeSharedBlocks::process().find(recv, static_cast<size_t>(x.recv_bytes))) {
        mine[3] = place->block, mine[4] = place->fd, mine[5] = place->length, mine[6] = place->inode;
        mine[7] = place->offset;
        ++cma_counts().published;
      }
    cma_bases_.resize(F * static_cast<size_t>(size_));
    guard.check(MPI_Allgather(mine, F, MPI_INT64_T, cma_bases_.data(), F, MPI_INT64_T, comm_),
                "MPI_Allgather (exchange addresses)");
    // Members that diverged could otherwise write with one exchange's geometry into another's
    // buffers: every member sees every id, so all of them refuse alike before anything is copied.
    for (int j = 0; j < size_; ++j)
      if (cma_bases_[F * j + 2] != x.id)
        fail("strided exchange on ", group_text(), ": the members are not running the same exchange (world rank ",
             world_ranks()[j], " runs the one prepared as number ", cma_bases_[F * j + 2], ", world rank ",
             world_ranks()[rank_], " number ", x.id, "); the ranks diverged");
    int failed = INT_MAX;  // the lowest world rank whose copy failed
    ++cma_counts().exchanges;
#if defined(__linux__)
    const auto mapped_by = [&](int j) { return cma_bases_[F * j + 3] >= 0; };  // j's piece is written by its senders
    static constexpr size_t kIov = 1024;  // IOV_MAX on Linux
    cma_local_.resize(kIov);
    cma_remote_.resize(kIov);
    auto at = [](int64_t base, int64_t offset) { return reinterpret_cast<void*>(static_cast<uintptr_t>(base + offset)); };
    // Copies `segments` with member j by the kernel: read out of its send buffer, or written into
    // its receive buffer.
    auto copy = [&](int j, const std::vector<CopySegment>& segments, bool push) {
      // Batches of at most kIov segments and kCmaBatchBytes (the kernel moves under 2 GiB a call).
      for (size_t first = 0, n = 0; first < segments.size() && failed == INT_MAX; first += n) {
        ssize_t expected = 0;
        n = 0;
        while (first + n < segments.size() && n < kIov &&
               (n == 0 || expected + segments[first + n].bytes <= kCmaBatchBytes))
          expected += segments[first + n++].bytes;
        // Segments that follow on from one another on a side are one iovec there: the kernel pins
        // and looks up the other process's memory once per remote iovec, which would otherwise cost
        // more than the copy for short runs.
        size_t locals = 0, remotes = 0;
        auto append = [](std::vector<iovec>& list, size_t& used, void* start, size_t bytes) {
          if (used > 0 && static_cast<char*>(list[used - 1].iov_base) + list[used - 1].iov_len == start)
            list[used - 1].iov_len += bytes;
          else
            list[used++] = {start, bytes};
        };
        for (size_t k = 0; k < n; ++k) {
          const CopySegment& g = segments[first + k];
          const size_t bytes = static_cast<size_t>(g.bytes);
          if (push) {
            append(cma_local_, locals, at(mine[0], g.from), bytes);
            append(cma_remote_, remotes, at(cma_bases_[F * j + 1], g.to), bytes);
          } else {
            append(cma_local_, locals, at(mine[1], g.to), bytes);
            append(cma_remote_, remotes, at(cma_bases_[F * j], g.from), bytes);
          }
        }
        cma_counts().segments += static_cast<int64_t>(n);
        cma_counts().remote_iovecs += static_cast<int64_t>(remotes);
        const pid_t pid = static_cast<pid_t>(cma_pids_[j]);
        const ssize_t got = push ? process_vm_writev(pid, cma_local_.data(), locals, cma_remote_.data(), remotes, 0)
                                 : process_vm_readv(pid, cma_local_.data(), locals, cma_remote_.data(), remotes, 0);
        if (got != expected) {
          std::fprintf(stderr, "dax: world rank %d: %s world rank %d moved %zd of %zd bytes (%s)\n",
                       world_ranks()[rank_], push ? "process_vm_writev to" : "process_vm_readv from", world_ranks()[j],
                       got, expected, got < 0 ? std::strerror(errno) : "short");
          failed = world_ranks()[rank_];
        }
      }
    };
    // In one pass, in the order of the source: the own part, and what this member sends each
    // member whose piece is mapped here. The others' parts go by the kernel: a published piece
    // this member cannot map (or will not: DAX_PEER_WRITES=0 here) is written by the kernel.
    copy_to_.assign(static_cast<size_t>(size_) + 1, nullptr);
    copy_to_[0] = static_cast<char*>(recv);
    size_t mapped = 0;
    for (int j = 0; j < size_ && peer_writes_enabled(); ++j) {
      const int64_t* b = &cma_bases_[F * static_cast<size_t>(j)];
      if (j == rank_ || x.writes[j].empty() || !mapped_by(j)) continue;
      if (char* piece = PeerMappings::process().map(cma_pids_[j], SharedPlace{b[3], b[4], b[5], b[6], 0}))
        copy_to_[j + 1] = piece + b[7], ++mapped;
    }
    copy_runs_.clear();
    const char* source = static_cast<const char*>(send);
    for (const auto& [d, k] : x.order) {
      if (!copy_to_[d]) continue;
      const CopySegment& g = d == 0 ? x.own[k] : x.writes[d - 1][k];
      copy_runs_.push_back({copy_to_[d] + g.to, source + g.from, static_cast<size_t>(g.bytes)});
      if (d > 0) ++cma_counts().peer_writes;
    }
    copy_runs(copy_runs_);
    PeerMappings::process().trim(mapped);  // this call's mappings are the most recent: kept
    for (int s = 1; s < size_ && failed == INT_MAX; ++s) {
      const int j = (rank_ + s) % size_;  // members work with different peers at once
      if (!mapped_by(rank_)) copy(j, x.pulls[j], false);
      if (x.writes[j].empty() || copy_to_[j + 1]) continue;
      if (mapped_by(j) || x.pushed[j]) copy(j, x.writes[j], true);  // not mapped here: the kernel writes
    }
    stream_fence();  // the streamed writes land before the all-reduce lets their owners read
#else
    (void)recv;
    failed = world_ranks()[rank_];
#endif
    guard.check(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce (exchange done)");
    if (failed != INT_MAX)
      fail("strided exchange on ", group_text(), ": world rank ", failed,
           " could not copy to or from another member's memory by cross-memory attach (process_vm_readv/writev; "
           "its error is on its stderr). Set DAX_CMA=0 to exchange through MPI datatypes instead");
  }

  /// Large reductions run as a ring over the members instead of the MPI library's collective: Open
  /// MPI reduces a reduce-scatter to one member and scatters it back, and its all-reduce allocates a
  /// temporary of the whole message on every call (fresh pages to fault in each time). The ring
  /// moves (n-1)/n of the data once, in n-1 exchanges with the neighbours, and stages one block in
  /// two buffers kept from call to call. Small messages keep the library's latency-tuned algorithms.
  bool use_ring(int64_t count, DType type) const {
    // Per block: n-1 exchanges pay off only while each moves enough to hide its latency (many
    // members with small blocks are better served by MPI's logarithmic algorithms).
    static constexpr int64_t kRingBlockBytes = 1 << 17;
    return size_ > 1 && count * itemsize(type) / size_ >= kRingBlockBytes;
  }

  /// Reduces block j of every member's `contributions` (counts[j] elements at displs[j]) onto
  /// member j, which finds its block in `out`. Step s passes the partial sum of block
  /// (rank - s - 1) to the right neighbour and adds this member's part to the one arriving from the
  /// left; after n-1 steps the block arriving is this member's own, complete. `out` may be
  /// this member's own block of `contributions` (an in-place all-reduce): that block is read
  /// before it is written.
  int ring_reduce_scatter(const char* contributions, char* out, const std::vector<int64_t>& counts,
                          const std::vector<int64_t>& displs, DType type, ReduceOp op) {
    static constexpr int kRingTag = 0x646a;  // apart from the runtime's departure notice (0x6469)
    const MPI_Datatype t = mpi_type(type);
    const MPI_Op o = mpi_op(op, type);
    const int64_t item = itemsize(type);
    const int64_t largest = *std::max_element(counts.begin(), counts.end());
    if (static_cast<int64_t>(ring_stage_[0].size()) < largest * item)
      for (auto& stage : ring_stage_) stage.resize(static_cast<size_t>(largest * item));
    const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
    const char* outgoing = nullptr;
    for (int s = 0; s + 1 < size_; ++s) {
      const int send_block = ((rank_ - s - 1) % size_ + size_) % size_;
      const int recv_block = ((rank_ - s - 2) % size_ + size_) % size_;
      if (s == 0) outgoing = contributions + displs[send_block] * item;
      char* incoming = ring_stage_[s % 2].data();
      int rc = MPI_Sendrecv(outgoing, mpi_count(counts[send_block]), t, right, kRingTag, incoming,
                            mpi_count(counts[recv_block]), t, left, kRingTag, comm_, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return rc;
      rc = MPI_Reduce_local(contributions + displs[recv_block] * item, incoming, mpi_count(counts[recv_block]), t, o);
      if (rc != MPI_SUCCESS) return rc;
      outgoing = incoming;
    }
    if (counts[rank_] > 0) std::memcpy(out, outgoing, static_cast<size_t>(counts[rank_] * item));
    return MPI_SUCCESS;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  MpiCallChecks checks_;  // numbers, compares and watches this group's calls
  std::vector<char> ring_stage_[2];   // the ring reduction's staging: one block each, kept
  std::optional<bool> cma_usable_;    // cross-memory attach between the members: decided once
  bool cma_allowed_ = true;           // false when buffers may be device memory
  int64_t cma_prepared_ = 0;          // exchanges prepared for it, numbering them
  std::vector<int64_t> cma_pids_, cma_bases_;  // each member's process id; its buffers this call
#if defined(__linux__)
  std::vector<iovec> cma_local_, cma_remote_;  // one batch of segments, kept
  std::vector<char*> copy_to_;        // this call: the own piece, then each member's piece mapped here (or null)
  std::vector<CopyRun> copy_runs_;    // this call's copies in this process, kept
#endif
};

}  // namespace dax::detail
