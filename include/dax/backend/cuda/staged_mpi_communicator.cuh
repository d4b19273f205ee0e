// Communicator over MPI for device buffers (DAX_TRANSPORT=mpi): device pointers go straight to a
// CUDA-aware MPI, else each call stages its data through pinned host memory kept between calls.
// Unlike NCCL it lets several ranks share one GPU, which is how multi-rank tests run on one GPU.
#pragma once

#include <dax/core/mpi.hpp>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's MPIX_CUDA_AWARE_SUPPORT and MPIX_Query_cuda_support
#endif

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <dax/backend/buffer.hpp>
#include <dax/backend/cuda/box_copy.cuh>
#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/memory.cuh>
#include <dax/comm/communicator.hpp>
#include <dax/comm/mpi_communicator.hpp>
#include <dax/core/error.hpp>

namespace dax::detail::cuda {

/// Whether the MPI library reads and writes device memory itself: Open MPI built with CUDA and
/// running with it; any other MPI is assumed not to.
inline bool mpi_is_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

/// The inner MPI exchange over host copies of the two pieces, the pieces' sizes, and the regions
/// each member sends and receives (only those cross between the GPU and the host).
class StagedRegionExchange final : public PreparedExchange {
 public:
  std::unique_ptr<PreparedExchange> inner;
  int64_t send_bytes = 0, recv_bytes = 0, item_bytes = 0;
  Box send_block, recv_block;
  std::vector<Box> send, recv;
};

class StagedMpiCommunicator final : public Communicator {
 public:
  /// Wraps `inner` (which only knows host buffers). `pass_device_pointers`: hand device pointers
  /// to MPI as they are (a CUDA-aware MPI); false stages every buffer through host memory.
  explicit StagedMpiCommunicator(std::unique_ptr<MpiCommunicator> inner,
                                 bool pass_device_pointers = mpi_is_cuda_aware())
      : inner_(std::move(inner)), direct_(pass_device_pointers) {
    DAX_CHECK(inner_ != nullptr, "StagedMpiCommunicator: no MPI communicator given");
    // Device pointers handed to MPI are not readable by process_vm_readv: MPI's datatypes move them.
    if (direct_) inner_->allow_copies_by_cma(false);
  }
  ~StagedMpiCommunicator() override {
    // Copies out of the staging may still be running; the blocks must outlive them. Never throws
    // (the device may be shut down already, and then nothing is running).
    if ((send_stage_ || recv_stage_) && context().initialized()) (void)cudaStreamSynchronize(context().stream());
  }
  StagedMpiCommunicator(const StagedMpiCommunicator&) = delete;
  StagedMpiCommunicator& operator=(const StagedMpiCommunicator&) = delete;

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Communicator& host() override { return *inner_; }

  void all_gatherv(const void* send, void* recv, const std::vector<int64_t>& counts,
                   const std::vector<int64_t>& displs, DType type) override {
    check_per_member(size(), "all_gatherv", counts, displs);
    if (direct_) {
      wait_for_device();
      inner_->all_gatherv(send, recv, counts, displs, type);
      return;
    }
    const int64_t item = itemsize(type);
    const int me = rank();
    char* recv_h = reserve(recv_stage_, extent(counts, displs) * item);
    // MPI runs in place: the caller's part goes to its slot of the host block, where the others
    // read it, and reaches the device's result by a copy on the device (when not already there);
    // only the other members' parts come back from the host.
    char* const mine = static_cast<char*>(recv) + displs[me] * item;
    to_host(recv_h + displs[me] * item, send != nullptr ? send : mine, counts[me] * item);
    if (send != nullptr) copy_on_device(mine, send, counts[me] * item);
    wait_for_device();
    inner_->all_gatherv(nullptr, recv_h, counts, displs, type);
    std::vector<Run> parts;
    for (int j = 0; j < size(); ++j)
      if (j != me) parts.push_back({displs[j] * item, counts[j] * item});
    to_device(recv, recv_h, std::move(parts));
  }

  void all_to_allv(const void* send, const std::vector<int64_t>& send_counts,
                   const std::vector<int64_t>& send_displs, void* recv,
                   const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                   DType type) override {
    check_per_member(size(), "all_to_allv", send_counts, send_displs, recv_counts, recv_displs);
    if (direct_) {
      wait_for_device();
      inner_->all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs, type);
      return;
    }
    const int64_t item = itemsize(type);
    const int me = rank();
    // The block a member sends itself is copied on the device; MPI moves the others' blocks only.
    copy_on_device(static_cast<char*>(recv) + recv_displs[me] * item,
                   static_cast<const char*>(send) + send_displs[me] * item, send_counts[me] * item);
    std::vector<int64_t> sc = send_counts, rc = recv_counts;
    sc[me] = rc[me] = 0;
    char* send_h = reserve(send_stage_, extent(sc, send_displs) * item);
    char* recv_h = reserve(recv_stage_, extent(rc, recv_displs) * item);
    std::vector<Run> out, in;
    for (int j = 0; j < size(); ++j) {
      out.push_back({send_displs[j] * item, sc[j] * item});
      in.push_back({recv_displs[j] * item, rc[j] * item});
    }
    copy_runs(send_h, static_cast<const char*>(send), std::move(out), cudaMemcpyDeviceToHost);
    wait_for_device();
    inner_->all_to_allv(send_h, sc, send_displs, recv_h, rc, recv_displs, type);
    to_device(recv, recv_h, std::move(in));
  }

  void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType type,
                      ReduceOp op) override {
    check_per_member(size(), "reduce_scatter", counts);
    if (direct_) {
      wait_for_device();
      inner_->reduce_scatter(send, recv, counts, type, op);
      return;
    }
    const int64_t item = itemsize(type);
    const int64_t all = total(counts) * item, mine = counts[rank()] * item;
    char* send_h = reserve(send_stage_, all);
    char* recv_h = reserve(recv_stage_, mine);
    to_host(send_h, send, all);
    wait_for_device();
    inner_->reduce_scatter(send_h, recv_h, counts, type, op);
    to_device(recv, recv_h, {{0, mine}});
  }

  void all_reduce(const void* send, void* recv, int64_t count, DType type, ReduceOp op) override {
    if (direct_) {
      wait_for_device();
      inner_->all_reduce(send, recv, count, type, op);
      return;
    }
    const int64_t bytes = count * itemsize(type);
    char* recv_h = reserve(recv_stage_, bytes);
    char* send_h = send != nullptr ? reserve(send_stage_, bytes) : nullptr;
    if (send != nullptr)
      to_host(send_h, send, bytes);
    else
      to_host(recv_h, recv, bytes);
    wait_for_device();
    inner_->all_reduce(send_h, recv_h, count, type, op);
    to_device(recv, recv_h, {{0, bytes}});
  }

  void broadcast(void* data, int64_t count, DType type, int root) override {
    if (direct_) {
      wait_for_device();
      inner_->broadcast(data, count, type, root);
      return;
    }
    const int64_t bytes = count * itemsize(type);
    char* stage = reserve(recv_stage_, bytes);
    if (rank() == root) to_host(stage, data, bytes);
    wait_for_device();
    inner_->broadcast(stage, count, type, root);
    if (rank() != root) to_device(data, stage, {{0, bytes}});
  }

  void barrier() override {
    wait_for_device();
    inner_->barrier();
  }

  void send_recv(const void* send, int dst, void* recv, int src, int64_t count, DType type) override {
    if (direct_) {
      wait_for_device();
      inner_->send_recv(send, dst, recv, src, count, type);
      return;
    }
    const int64_t bytes = count * itemsize(type);
    char* send_h = reserve(send_stage_, dst >= 0 ? bytes : 0);
    char* recv_h = reserve(recv_stage_, src >= 0 ? bytes : 0);
    if (dst >= 0) to_host(send_h, send, bytes);
    wait_for_device();
    inner_->send_recv(send_h, dst, recv_h, src, count, type);
    if (src >= 0) to_device(recv, recv_h, {{0, bytes}});
  }

  std::unique_ptr<PreparedExchange> prepare_exchange(const Box& send_block, const std::vector<Box>& send,
                                                     const Box& recv_block, const std::vector<Box>& recv,
                                                     int64_t item_bytes) override {
    auto x = std::make_unique<StagedRegionExchange>();
    x->inner = inner_->prepare_exchange(send_block, send, recv_block, recv, item_bytes);
    x->send_bytes = numel(box_shape(send_block)) * item_bytes;
    x->recv_bytes = numel(box_shape(recv_block)) * item_bytes;
    x->item_bytes = item_bytes;
    x->send_block = send_block;
    x->recv_block = recv_block;
    x->send = send;
    x->recv = recv;
    return x;
  }

  /// Staged: the regions sent to the other members go to the host block at their own places, MPI
  /// moves them between the host blocks, and the regions received come back to the device; the
  /// rest of the receive piece (the caller's own entries, gaps) is never touched.
  void exchange(const PreparedExchange& prepared, const void* send, void* recv) override {
    const auto* x = dynamic_cast<const StagedRegionExchange*>(&prepared);
    DAX_CHECK(x != nullptr, "exchange: the prepared exchange was made by another kind of communicator");
    if (direct_) {
      wait_for_device();
      inner_->exchange(*x->inner, send, recv);
      return;
    }
    char* send_h = reserve(send_stage_, x->send_bytes);
    char* recv_h = reserve(recv_stage_, x->recv_bytes);
    const int me = rank();
    for (int j = 0; j < static_cast<int>(x->send.size()); ++j)
      if (j != me) copy_box(send_h, send, x->send_block, x->send[j], x->item_bytes, cudaMemcpyDeviceToHost);
    wait_for_device();
    inner_->exchange(*x->inner, send_h, recv_h);
    for (int j = 0; j < static_cast<int>(x->recv.size()); ++j)
      if (j != me) copy_box(recv, recv_h, x->recv_block, x->recv[j], x->item_bytes, cudaMemcpyHostToDevice);
  }

  std::vector<int64_t> all_gather_host(const std::vector<int64_t>& mine) override {
    return inner_->all_gather_host(mine);
  }

  /// One side of a point-to-point transfer (a pipeline's activations: parallel/pipeline.hpp). Each
  /// goes through a pinned host block of its own, held by the pending transfer, since several are
  /// in flight at once (and the receives are posted ahead); MPI's tag keeps them apart as on the CPU.
  std::unique_ptr<PendingCollective> start_send(const void* send, int dst, int64_t count, DType type,
                                                int tag) override {
    if (direct_) {
      wait_for_device();  // MPI reads what the device wrote
      return inner_->start_send(send, dst, count, type, tag);
    }
    const int64_t bytes = count * itemsize(type);
    auto stage = allocate_pinned(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
    to_host(stage->data(), send, bytes);
    wait_for_device();
    auto inner = inner_->start_send(stage->data(), dst, count, type, tag);
    return std::make_unique<StagedTransfer>(std::move(inner), std::move(stage), nullptr, 0);
  }

  std::unique_ptr<PendingCollective> start_recv(void* recv, int src, int64_t count, DType type, int tag) override {
    wait_for_device();  // nothing on the device may still touch the block MPI is to write
    if (direct_) return inner_->start_recv(recv, src, count, type, tag);
    const int64_t bytes = count * itemsize(type);
    auto stage = allocate_pinned(static_cast<size_t>(std::max<int64_t>(bytes, 1)));
    auto inner = inner_->start_recv(stage->data(), src, count, type, tag);
    return std::make_unique<StagedTransfer>(std::move(inner), std::move(stage), recv, bytes);
  }

 private:
  /// A staged point-to-point transfer: MPI's pending request and the host block it uses; a receive
  /// copies the block to the device once MPI has filled it (and waits for that copy, so the block
  /// can go).
  class StagedTransfer final : public PendingCollective {
   public:
    StagedTransfer(std::unique_ptr<PendingCollective> inner, std::shared_ptr<Buffer> stage, void* device_dst,
                   int64_t bytes)
        : inner_(std::move(inner)), stage_(std::move(stage)), device_dst_(device_dst), bytes_(bytes) {}
    bool test() override {
      if (!done_ && inner_->test()) finish();
      return done_;
    }
    void wait() override {
      if (done_) return;
      inner_->wait();
      finish();
    }

   private:
    void finish() {
      if (device_dst_ != nullptr && bytes_ > 0) {
        DAX_CUDA_CHECK(cudaMemcpyAsync(device_dst_, stage_->data(), static_cast<size_t>(bytes_), cudaMemcpyHostToDevice,
                                       stream()));
        wait_for_device();
      }
      stage_.reset();
      done_ = true;
    }
    std::unique_ptr<PendingCollective> inner_;
    std::shared_ptr<Buffer> stage_;
    void* device_dst_;
    int64_t bytes_;
    bool done_ = false;
  };

  struct Run {
    int64_t offset, bytes;
  };

  static cudaStream_t stream() { return context().stream(); }

  /// MPI reads device data (or its host copy) only once the device has written it.
  static void wait_for_device() { context().synchronize("a wait for the GPU before an MPI transfer"); }

  /// The staging block, grown to at least `bytes` (never null). Before a block is let go the
  /// stream is drained: the last call's copies to the device may still be reading it.
  static char* reserve(std::shared_ptr<Buffer>& stage, int64_t bytes) {
    const size_t wanted = static_cast<size_t>(std::max<int64_t>(bytes, 256));
    if (!stage || stage->bytes() < wanted) {
      if (stage) wait_for_device();
      stage.reset();
      stage = allocate_pinned(wanted);
    }
    return static_cast<char*>(stage->data());
  }

  static void to_host(void* dst, const void* src, int64_t bytes) {
    if (bytes > 0)
      DAX_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream()));
  }

  static void copy_on_device(void* dst, const void* src, int64_t bytes) {
    if (bytes > 0 && dst != src)
      DAX_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream()));
  }

  /// Copies the runs MPI wrote back to the device, touching runs merged into one copy; bytes
  /// between them (the caller's own part, gaps) are left alone.
  static void to_device(void* dst, const char* src, std::vector<Run> runs) {
    copy_runs(static_cast<char*>(dst), src, std::move(runs), cudaMemcpyHostToDevice);
  }

  /// Copies the byte runs [offset, offset + bytes) from src to dst at the same offsets, touching
  /// runs merged into one copy.
  static void copy_runs(char* dst, const char* src, std::vector<Run> runs, cudaMemcpyKind kind) {
    std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.offset < b.offset; });
    Run current{0, 0};
    auto flush = [&] {
      if (current.bytes > 0)
        DAX_CUDA_CHECK(cudaMemcpyAsync(dst + current.offset, src + current.offset, static_cast<size_t>(current.bytes),
                                       kind, stream()));
    };
    for (const Run& r : runs) {
      if (r.bytes <= 0) continue;
      if (current.bytes > 0 && r.offset <= current.offset + current.bytes) {
        current.bytes = std::max(current.bytes, r.offset + r.bytes - current.offset);
        continue;
      }
      flush();
      current = r;
    }
    flush();
  }

  /// Elements from the buffer's start to the end of its last nonempty part.
  static int64_t extent(const std::vector<int64_t>& counts, const std::vector<int64_t>& displs) {
    int64_t end = 0;
    for (size_t j = 0; j < counts.size(); ++j)
      if (counts[j] > 0) end = std::max(end, displs[j] + counts[j]);
    return end;
  }

  std::unique_ptr<MpiCommunicator> inner_;
  bool direct_;
  std::shared_ptr<Buffer> send_stage_, recv_stage_;  // pinned host blocks, kept between calls
};

}  // namespace dax::detail::cuda
