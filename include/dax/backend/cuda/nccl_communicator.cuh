// Communicator over NCCL for device buffers: every collective is enqueued on the device's stream
// and the host waits only where the interface hands it values (barrier, all_gather_host). The
// group's MPI communicator stays beside it for host metadata and the collective checks.
#pragma once

#include <dax/core/mpi.hpp>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <dax/backend/copy_mode.hpp>
#include <dax/backend/cuda/copy.cuh>
#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/memory.cuh>
#include <dax/comm/communicator.hpp>
#include <dax/comm/mpi_communicator.hpp>
#include <dax/core/error.hpp>

namespace dax::detail::cuda {

/// Throws dax::Error naming the NCCL call, with NCCL's text for the code and its last error.
inline void nccl_check(ncclResult_t code, const char* call) {
  if (code == ncclSuccess) return;
  const char* last = ncclGetLastError(nullptr);  // thread-local text; the argument is unused
  fail(call, " failed: ", ncclGetErrorString(code),
       last != nullptr && *last != 0 ? std::string(" (") + last + ")" : std::string());
}

#define DAX_NCCL_CHECK(call) ::dax::detail::cuda::nccl_check((call), #call)

inline ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::float32: return ncclFloat32;
    case DType::float64: return ncclFloat64;
    case DType::int32: return ncclInt32;
    case DType::int64: return ncclInt64;
    case DType::float16: return ncclFloat16;
    case DType::bfloat16: return ncclBfloat16;
    case DType::boolean: return ncclUint8;
    case DType::complex64: case DType::complex128: break;  // complex arrays run on the CPU backend so far
  }
  fail("NCCL transport: no NCCL type for ", dax::to_string(t));
}

inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::prod: return ncclProd;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

/// Runs `f(T{})` with T an unsigned integer of `item_bytes` bytes: region copies move items as
/// opaque words whatever the element type.
template <class F>
void with_item_type(int64_t item_bytes, F&& f) {
  switch (item_bytes) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
    default: break;
  }
  fail("region exchange: items of ", item_bytes, " bytes are not supported on the GPU (1, 2, 4 or 8)");
}

/// A region exchange over NCCL: each peer's region is sent straight from (or received straight
/// into) its piece when it is one contiguous run there, else packed into (unpacked from) a device
/// staging buffer by one copy kernel.
class NcclRegionExchange final : public PreparedExchange {
 public:
  struct Part {
    Box region;
    int64_t count = 0;    // items
    bool direct = false;  // a contiguous run of the piece: no staging
    int64_t offset = 0;   // items: inside the piece when direct, inside the staging when not
  };

  NcclRegionExchange(const Box& send_block, const std::vector<Box>& send, const Box& recv_block,
                     const std::vector<Box>& recv, int self, int64_t item_bytes)
      : send_block(send_block), recv_block(recv_block), item_bytes(item_bytes) {
    DAX_CHECK(send.size() == recv.size(), "region exchange: ", send.size(), " send regions but ", recv.size(),
              " receive regions");
    with_item_type(item_bytes, [](auto) {});  // refuses unsupported item sizes now, not at the first run
    for (size_t j = 0; j < send.size(); ++j) {
      const bool own = static_cast<int>(j) == self;
      sends.push_back(part(send_block, own ? Box{} : send[j], own, send_staging));
      recvs.push_back(part(recv_block, own ? Box{} : recv[j], own, recv_staging));
    }
  }

  Box send_block, recv_block;
  int64_t item_bytes;
  std::vector<Part> sends, recvs;  // one per member; empty (count 0) for the caller's own
  int64_t send_staging = 0, recv_staging = 0;  // items

 private:
  static Part part(const Box& block, const Box& region, bool own, int64_t& staging) {
    Part p;
    if (own || numel(region) == 0) return p;
    p.region = region;
    p.count = numel(region);
    p.direct = is_contiguous_in(block, region);
    if (p.direct) {
      p.offset = offset_in(block, region);
    } else {
      p.offset = staging;
      staging += p.count;
    }
    return p;
  }
};

/// NCCL's communicator for one group.
///
/// Bootstrap: member 0 calls ncclGetUniqueId, the id goes to the group by MPI_Bcast over the
/// group's own MPI communicator, and every member calls ncclCommInitRank. DESIGN.md names
/// ncclCommSplit of a world communicator; that call is collective over the whole parent, while
/// dax creates a group's communicator only among the group's members (Runtime::group runs on the
/// devices of one mesh, on first use), so the per-group bootstrap is the one that fits.
///
/// Checks: each call is guarded by the MPI communicator's guard (fingerprints with
/// DAX_CHECK_COLLECTIVES=1, the watchdog while the host is inside the call). NCCL calls return
/// once enqueued, so a collective that never completes on the device shows up in the next host
/// wait for the GPU (barrier, a copy to the host), which is watched too and names the last call
/// queued; on a timeout the job's abort calls ncclCommAbort (an abort hook) before it exits. The
/// destructor aborts instead of destroying after an error, since destroying waits for work that
/// may never finish.
class NcclCommunicator final : public Communicator {
 private:
  // Defined before its callers: a deduced return type must be known where it is used.
  /// The MPI communicator's guard (fingerprints, numbering, the watchdog while the host is in the
  /// call), noting the call as the last one queued on the GPU for reports of a stuck device wait.
  [[nodiscard]] auto guard_queued(const char* call, int64_t count, DType type, bool compare = true) {
    QueuedCollective& last = last_queued_collective();
    last.call.store(call, std::memory_order_relaxed);
    last.group.store(&group_text_, std::memory_order_relaxed);
    last.world_rank.store(world_rank_, std::memory_order_relaxed);
    return host_->guard(call, count, type, compare);
  }

 public:
  /// Collective over the group of `host` (which it keeps). The device must be selected already
  /// (cuda::context().init). Throws the same error on every member when two share a GPU.
  explicit NcclCommunicator(std::unique_ptr<MpiCommunicator> host) : host_(std::move(host)) {
    DAX_CHECK(host_ != nullptr, "NcclCommunicator: no MPI communicator given");
    check_distinct_gpus();
    // The id, then whether member 0 got one: a failure there must not leave the others waiting.
    constexpr int64_t id_words = sizeof(ncclUniqueId) / sizeof(int64_t);
    static_assert(id_words * sizeof(int64_t) == sizeof(ncclUniqueId), "ncclUniqueId is not a whole number of words");
    int64_t words[id_words + 1] = {};
    ncclUniqueId id;
    std::string trouble;
    if (host_->rank() == 0) {
      try {
        DAX_NCCL_CHECK(ncclGetUniqueId(&id));
        std::memcpy(words, &id, sizeof id);
      } catch (const Error& e) {
        trouble = e.what();
        words[id_words] = 1;
      }
    }
    host_->broadcast(words, id_words + 1, DType::int64, 0);
    if (words[id_words] != 0)
      fail("NCCL transport: member 0 of the group ", host_->name(), " could not create NCCL's unique id",
           trouble.empty() ? std::string() : ": " + trouble);
    std::memcpy(&id, words, sizeof id);
    ncclComm_t comm = nullptr;
    {
      // Blocks until every member joins: watched, so a member that never comes is reported.
      const auto guard = host_->guard("ncclCommInitRank", 0, DType::int64, false);
      DAX_NCCL_CHECK(ncclCommInitRank(&comm, host_->size(), id, host_->rank()));
    }
    comm_ = comm;
    group_text_ = host_->group_text();
    const std::vector<int>& world = host_->world_ranks();
    world_rank_ = world.empty() ? -1 : world[host_->rank()];
    // A job that times out aborts the communicator before it exits: NCCL kernels waiting for a
    // peer that will never come stop, rather than hold the GPU.
    abort_hooks().add(this, [comm] { (void)ncclCommAbort(comm); });
  }

  ~NcclCommunicator() override {
    ncclComm_t comm = comm_;
    if (comm == nullptr) return;
    abort_hooks().remove(this);
    const std::string* mine = &group_text_;
    last_queued_collective().group.compare_exchange_strong(mine, nullptr);
    ncclResult_t state = ncclSuccess;
    const bool broken = failed_ || ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != ncclSuccess;
    // Destroying waits for the communicator's work; after an error that work may never finish.
    const ncclResult_t rc = broken ? ncclCommAbort(comm) : ncclCommDestroy(comm);
    if (rc != ncclSuccess)
      std::fprintf(stderr, "dax: %s of the NCCL communicator of %s failed: %s\n",
                   broken ? "ncclCommAbort" : "ncclCommDestroy", host_->name().c_str(), ncclGetErrorString(rc));
  }

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  Communicator& host() override { return *host_; }

  void all_gatherv(const void* send, void* recv, const std::vector<int64_t>& counts,
                   const std::vector<int64_t>& displs, DType type) override {
    check_per_member(size(), "all_gatherv", counts, displs);
    require_device_memory(send, "all_gatherv");
    require_device_memory(recv, "all_gatherv");
    const auto guard = guard_queued("all_gather", total(counts), type);
    const ncclComm_t comm = comm_;
    const ncclDataType_t t = nccl_type(type);
    const int64_t item = itemsize(type);
    const int me = rank();
    char* out = static_cast<char*>(recv);
    if (is_block_layout(counts, displs)) {  // NCCL's own all-gather; in place when the part is there
      const int64_t c = counts[0];
      if (c == 0) return;
      const void* mine = send != nullptr ? send : out + me * c * item;
      check(ncclAllGather(mine, recv, static_cast<size_t>(c), t, comm, stream()), "ncclAllGather");
      return;
    }
    // Uneven or reordered parts: one broadcast per member, run together as one group. The root's
    // own part is copied by NCCL unless it is already in place.
    Group group(*this);
    for (int j = 0; j < size(); ++j) {
      if (counts[j] == 0) continue;
      void* part = out + displs[j] * item;
      const void* from = j == me && send != nullptr ? send : part;
      check(ncclBroadcast(from, part, static_cast<size_t>(counts[j]), t, j, comm, stream()), "ncclBroadcast");
    }
    group.end();
  }

  void all_to_allv(const void* send, const std::vector<int64_t>& send_counts,
                   const std::vector<int64_t>& send_displs, void* recv,
                   const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                   DType type) override {
    check_per_member(size(), "all_to_allv", send_counts, send_displs, recv_counts, recv_displs);
    const int me = rank();
    DAX_CHECK(send_counts[me] == recv_counts[me], "all_to_allv: member ", me, " sends itself ", send_counts[me],
              " elements but receives ", recv_counts[me]);
    require_device_memory(send, "all_to_allv");
    require_device_memory(recv, "all_to_allv");
    const auto guard = guard_queued("all_to_all", 0, type);  // members send different amounts
    const ncclComm_t comm = comm_;
    const ncclDataType_t t = nccl_type(type);
    const int64_t item = itemsize(type);
    const char* in = static_cast<const char*>(send);
    char* out = static_cast<char*>(recv);
    if (out + recv_displs[me] * item != in + send_displs[me] * item)
      copy_device(out + recv_displs[me] * item, in + send_displs[me] * item, recv_counts[me] * item);
    Group group(*this);
    for (int j = 0; j < size(); ++j) {
      if (j == me) continue;
      if (send_counts[j] > 0)
        check(ncclSend(in + send_displs[j] * item, static_cast<size_t>(send_counts[j]), t, j, comm, stream()),
              "ncclSend");
      if (recv_counts[j] > 0)
        check(ncclRecv(out + recv_displs[j] * item, static_cast<size_t>(recv_counts[j]), t, j, comm, stream()),
              "ncclRecv");
    }
    group.end();
  }

  void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType type,
                      ReduceOp op) override {
    check_per_member(size(), "reduce_scatter", counts);
    require_device_memory(send, "reduce_scatter");
    require_device_memory(recv, "reduce_scatter");
    const auto guard = guard_queued("reduce_scatter", total(counts), type);
    const ncclComm_t comm = comm_;
    const ncclDataType_t t = nccl_type(type);
    const ncclRedOp_t o = nccl_op(op);
    const int64_t item = itemsize(type);
    if (std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; })) {
      if (counts[0] == 0) return;
      check(ncclReduceScatter(send, recv, static_cast<size_t>(counts[0]), t, o, comm, stream()),
            "ncclReduceScatter");
      return;
    }
    // Uneven parts: part j reduced onto member j, all parts as one group.
    const char* in = static_cast<const char*>(send);
    int64_t offset = 0;
    Group group(*this);
    for (int j = 0; j < size(); ++j) {
      if (counts[j] > 0)
        check(ncclReduce(in + offset * item, j == rank() ? recv : nullptr, static_cast<size_t>(counts[j]), t, o, j,
                         comm, stream()),
              "ncclReduce");
      offset += counts[j];
    }
    group.end();
  }

  void all_reduce(const void* send, void* recv, int64_t count, DType type, ReduceOp op) override {
    require_device_memory(send, "all_reduce");
    require_device_memory(recv, "all_reduce");
    const auto guard = guard_queued("all_reduce", count, type);
    const ncclComm_t comm = comm_;
    if (count == 0) return;
    check(ncclAllReduce(send != nullptr ? send : recv, recv, static_cast<size_t>(count), nccl_type(type),
                        nccl_op(op), comm, stream()),
          "ncclAllReduce");
  }

  void broadcast(void* data, int64_t count, DType type, int root) override {
    DAX_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a member of a group of ", size());
    require_device_memory(data, "broadcast");
    const auto guard = guard_queued("broadcast", count, type);
    const ncclComm_t comm = comm_;
    if (count == 0) return;
    check(ncclBroadcast(data, data, static_cast<size_t>(count), nccl_type(type), root, comm, stream()),
          "ncclBroadcast");
  }

  /// Waits for this member's device work (its collectives included), then for every member.
  void barrier() override {
    context().synchronize("a barrier's wait for this GPU's collectives");
    host_->barrier();
  }

  void send_recv(const void* send, int dst, void* recv, int src, int64_t count, DType type) override {
    const int n = size(), me = rank();
    DAX_CHECK(dst >= -1 && dst < n && src >= -1 && src < n, "send_recv: peers ", dst, " and ", src,
              " are not members of a group of ", n, " (or -1)");
    require_device_memory(send, "send_recv");
    require_device_memory(recv, "send_recv");
    const auto guard = guard_queued("send_recv", count, type);
    const ncclComm_t comm = comm_;
    if (count == 0) return;
    const int64_t item = itemsize(type);
    if (dst == me || src == me) {  // a member paired with itself sends to itself only
      DAX_CHECK(dst == me && src == me, "send_recv: member ", me, " sends to ", dst, " but receives from ", src,
                "; a member that sends to itself must receive from itself");
      if (recv != send) copy_device(recv, send, count * item);
      return;
    }
    const ncclDataType_t t = nccl_type(type);
    Group group(*this);
    if (dst >= 0) check(ncclSend(send, static_cast<size_t>(count), t, dst, comm, stream()), "ncclSend");
    if (src >= 0) check(ncclRecv(recv, static_cast<size_t>(count), t, src, comm, stream()), "ncclRecv");
    group.end();
  }

  std::unique_ptr<PreparedExchange> prepare_exchange(const Box& send_block, const std::vector<Box>& send,
                                                     const Box& recv_block, const std::vector<Box>& recv,
                                                     int64_t item_bytes) override {
    DAX_CHECK(static_cast<int>(send.size()) == size() && static_cast<int>(recv.size()) == size(),
              "region exchange: expected one region per member (", size(), "), got ", send.size(), " and ",
              recv.size());
    return std::make_unique<NcclRegionExchange>(send_block, send, recv_block, recv, rank(), item_bytes);
  }

  void exchange(const PreparedExchange& prepared, const void* send, void* recv) override {
    const auto* x = dynamic_cast<const NcclRegionExchange*>(&prepared);
    DAX_CHECK(x != nullptr, "exchange: the prepared exchange was made by another kind of communicator");
    const auto guard = guard_queued("exchange", 0, DType::int64);
    const ncclComm_t comm = comm_;
    with_item_type(x->item_bytes, [&](auto word) {
      using Word = decltype(word);
      const Word* in = static_cast<const Word*>(send);
      Word* out = static_cast<Word*>(recv);
      std::shared_ptr<Buffer> send_stage, recv_stage;  // stream-ordered: safe to hand back early
      if (x->send_staging > 0) send_stage = allocate(static_cast<size_t>(x->send_staging) * sizeof(Word));
      if (x->recv_staging > 0) recv_stage = allocate(static_cast<size_t>(x->recv_staging) * sizeof(Word));
      Word* packed = send_stage ? static_cast<Word*>(send_stage->data()) : nullptr;
      Word* unpacked = recv_stage ? static_cast<Word*>(recv_stage->data()) : nullptr;
      for (const auto& p : x->sends)
        if (p.count > 0 && !p.direct)
          copy_region<Word>(in, x->send_block, packed + p.offset, p.region, p.region, CopyMode::assign);
      Group group(*this);
      for (int j = 0; j < size(); ++j) {
        const auto& s = x->sends[j];
        const auto& r = x->recvs[j];
        if (s.count > 0)
          check(ncclSend((s.direct ? in : packed) + s.offset, static_cast<size_t>(s.count * sizeof(Word)), ncclUint8,
                         j, comm, stream()),
                "ncclSend");
        if (r.count > 0)
          check(ncclRecv((r.direct ? out : unpacked) + r.offset, static_cast<size_t>(r.count * sizeof(Word)),
                         ncclUint8, j, comm, stream()),
                "ncclRecv");
      }
      group.end();
      for (const auto& p : x->recvs)
        if (p.count > 0 && !p.direct)
          copy_region<Word>(unpacked + p.offset, p.region, out, x->recv_block, p.region, CopyMode::assign);
    });
  }

  std::vector<int64_t> all_gather_host(const std::vector<int64_t>& mine) override {
    return host_->all_gather_host(mine);
  }

 private:
  /// ncclGroupStart .. ncclGroupEnd; the end also runs on the way out of an error, so NCCL's
  /// per-thread group depth never stays raised.
  class Group {
   public:
    explicit Group(NcclCommunicator& c) : comm_(c) { comm_.check(ncclGroupStart(), "ncclGroupStart"); }
    ~Group() {
      if (open_) ncclGroupEnd();
    }
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;
    void end() {
      open_ = false;
      comm_.check(ncclGroupEnd(), "ncclGroupEnd");
    }

   private:
    NcclCommunicator& comm_;
    bool open_ = true;
  };

  static cudaStream_t stream() { return context().stream(); }

  /// Like DAX_NCCL_CHECK, and remembers the failure: the destructor then aborts instead of
  /// waiting for work that may never finish.
  void check(ncclResult_t code, const char* call) {
    if (code == ncclSuccess) return;
    failed_ = true;
    nccl_check(code, cat(call, " on the group ", host_->name()).c_str());
  }

  /// Equal parts laid out in member order, back to back: NCCL's all-gather layout.
  static bool is_block_layout(const std::vector<int64_t>& counts, const std::vector<int64_t>& displs) {
    for (size_t j = 0; j < counts.size(); ++j)
      if (counts[j] != counts[0] || displs[j] != static_cast<int64_t>(j) * counts[0]) return false;
    return true;
  }

  /// NCCL refuses two ranks on one GPU ("Duplicate GPU detected") from inside ncclCommInitRank,
  /// on some ranks only; checking the GPUs' UUIDs first fails every member alike, with advice.
  void check_distinct_gpus() {
    int device = 0;
    DAX_CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    DAX_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    int64_t uuid[2] = {};
    static_assert(sizeof(prop.uuid) == sizeof(uuid), "a CUDA UUID is 16 bytes");
    std::memcpy(uuid, &prop.uuid, sizeof uuid);
    const std::vector<int64_t> all = host_->all_gather_host({uuid[0], uuid[1]});
    std::map<std::pair<int64_t, int64_t>, std::vector<int>> holders;
    for (int j = 0; j < size(); ++j) holders[{all[2 * j], all[2 * j + 1]}].push_back(host_->world_ranks()[j]);
    for (const auto& [gpu, ranks] : holders) {
      if (ranks.size() < 2) continue;
      std::string list;
      for (size_t i = 0; i < ranks.size(); ++i) list += (i ? ", " : "") + std::to_string(ranks[i]);
      fail("NCCL transport: world ranks ", list, " of the group ", host_->name(),
           " share one GPU, which NCCL does not allow; give each rank its own GPU, or set "
           "DAX_TRANSPORT=mpi to move device data through MPI instead");
    }
  }

  std::unique_ptr<MpiCommunicator> host_;
  ncclComm_t comm_ = nullptr;
  bool failed_ = false;
  std::string group_text_;  // for reports; its address is what last_queued_collective() keeps
  int world_rank_ = -1;
};

}  // namespace dax::detail::cuda
