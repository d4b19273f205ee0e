// Communicator over MPI for device buffers (DAX_TRANSPORT=mpi): device pointers go straight to a
// CUDA-aware MPI, else each call stages its data through pinned host memory kept between calls.
// Unlike NCCL it lets several ranks share one GPU, which is how multi-rank tests run on one GPU.
#pragma once

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's MPIX_CUDA_AWARE_SUPPORT and MPIX_Query_cuda_support
#endif

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <dax/backend/buffer.hpp>
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

/// The inner MPI exchange over host copies of the two pieces, and the pieces' sizes.
class StagedRegionExchange final : public PreparedExchange {
 public:
  StagedRegionExchange(std::unique_ptr<PreparedExchange> inner, int64_t send_bytes, int64_t recv_bytes)
      : inner(std::move(inner)), send_bytes(send_bytes), recv_bytes(recv_bytes) {}
  std::unique_ptr<PreparedExchange> inner;
  int64_t send_bytes, recv_bytes;
};

class StagedMpiCommunicator final : public Communicator {
 public:
  /// Wraps `inner` (which only knows host buffers). `pass_device_pointers`: hand device pointers
  /// to MPI as they are (a CUDA-aware MPI); false stages every buffer through host memory.
  explicit StagedMpiCommunicator(std::unique_ptr<MpiCommunicator> inner,
                                 bool pass_device_pointers = mpi_is_cuda_aware())
      : inner_(std::move(inner)), direct_(pass_device_pointers) {
    DAX_CHECK(inner_ != nullptr, "StagedMpiCommunicator: no MPI communicator given");
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
    char* send_h = send != nullptr ? reserve(send_stage_, counts[me] * item) : nullptr;
    if (send != nullptr)
      to_host(send_h, send, counts[me] * item);
    else  // in place: MPI_IN_PLACE finds the caller's part where it would receive it
      to_host(recv_h + displs[me] * item, static_cast<const char*>(recv) + displs[me] * item, counts[me] * item);
    wait_for_device();
    inner_->all_gatherv(send_h, recv_h, counts, displs, type);
    std::vector<Run> parts;
    for (int j = 0; j < size(); ++j)
      if (send != nullptr || j != me) parts.push_back({displs[j] * item, counts[j] * item});
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
    const int64_t send_bytes = extent(send_counts, send_displs) * item;
    char* send_h = reserve(send_stage_, send_bytes);
    char* recv_h = reserve(recv_stage_, extent(recv_counts, recv_displs) * item);
    to_host(send_h, send, send_bytes);
    wait_for_device();
    inner_->all_to_allv(send_h, send_counts, send_displs, recv_h, recv_counts, recv_displs, type);
    std::vector<Run> parts;
    for (int j = 0; j < size(); ++j) parts.push_back({recv_displs[j] * item, recv_counts[j] * item});
    to_device(recv, recv_h, std::move(parts));
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
    return std::make_unique<StagedRegionExchange>(inner_->prepare_exchange(send_block, send, recv_block, recv, item_bytes),
                                                  numel(send_block) * item_bytes, numel(recv_block) * item_bytes);
  }

  /// Staged: the whole send piece goes to the host, and the whole receive piece too, so that the
  /// parts MPI does not write (the caller's own, any gaps) come back unchanged.
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
    to_host(send_h, send, x->send_bytes);
    to_host(recv_h, recv, x->recv_bytes);
    wait_for_device();
    inner_->exchange(*x->inner, send_h, recv_h);
    to_device(recv, recv_h, {{0, x->recv_bytes}});
  }

  std::vector<int64_t> all_gather_host(const std::vector<int64_t>& mine) override {
    return inner_->all_gather_host(mine);
  }

 private:
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

  /// Copies the runs MPI wrote back to the device, touching runs merged into one copy; bytes
  /// between them (the caller's own part, gaps) are left alone.
  static void to_device(void* dst, const char* src, std::vector<Run> runs) {
    std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.offset < b.offset; });
    Run current{0, 0};
    auto flush = [&] {
      if (current.bytes > 0)
        DAX_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + current.offset, src + current.offset,
                                       static_cast<size_t>(current.bytes), cudaMemcpyHostToDevice, stream()));
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
