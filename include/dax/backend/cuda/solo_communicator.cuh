// The communicator of a group with one member on the GPU: every collective is the member's own
// part, so each call is at most one device-to-device copy queued on the stream. A single-GPU
// program, and every mesh axis of size one in a larger one (a psum over it, a reduction's rule),
// then starts no NCCL communicator: no bootstrap, no buffers NCCL keeps on the device.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/memory.cuh>
#include <dax/comm/communicator.hpp>
#include <dax/comm/mpi_communicator.hpp>
#include <dax/core/error.hpp>

namespace dax::detail::cuda {

/// Nothing to prepare: an exchange leaves the caller's own entries out, and there is no one else.
class SoloExchange final : public PreparedExchange {};

/// One member's device communicator. The arguments are checked as the other transports check them,
/// host memory included: code that passes here at one GPU passes NCCL's checks at more.
class SoloDeviceCommunicator final : public Communicator {
 public:
  /// `host`: the group's MPI communicator, of one member (kept for host() and the call checks).
  explicit SoloDeviceCommunicator(std::unique_ptr<MpiCommunicator> host) : host_(std::move(host)) {
    DAX_CHECK(host_ != nullptr && host_->size() == 1, "SoloDeviceCommunicator: needs a group of one member, got ",
              host_ ? host_->size() : 0);
  }

  int rank() const override { return 0; }
  int size() const override { return 1; }
  Communicator& host() override { return *host_; }

  void all_gatherv(const void* send, void* recv, const std::vector<int64_t>& counts,
                   const std::vector<int64_t>& displs, DType type) override {
    check_per_member(1, "all_gatherv", counts, displs);
    device_only(send, recv, "all_gatherv");
    const auto guard = host_->guard("all_gather", total(counts), type);
    if (send != nullptr) move(static_cast<char*>(recv) + displs[0] * itemsize(type), send, counts[0] * itemsize(type));
  }

  void all_to_allv(const void* send, const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_displs,
                   void* recv, const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                   DType type) override {
    check_per_member(1, "all_to_allv", send_counts, send_displs, recv_counts, recv_displs);
    DAX_CHECK(send_counts[0] == recv_counts[0], "all_to_allv: member 0 sends itself ", send_counts[0],
              " elements but receives ", recv_counts[0]);
    device_only(send, recv, "all_to_allv");
    const auto guard = host_->guard("all_to_all", 0, type);
    const int64_t item = itemsize(type);
    move(static_cast<char*>(recv) + recv_displs[0] * item, static_cast<const char*>(send) + send_displs[0] * item,
         recv_counts[0] * item);
  }

  void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType type,
                      ReduceOp) override {
    check_per_member(1, "reduce_scatter", counts);
    device_only(send, recv, "reduce_scatter");
    const auto guard = host_->guard("reduce_scatter", total(counts), type);
    move(recv, send, counts[0] * itemsize(type));  // a reduction of one part is that part
  }

  void all_reduce(const void* send, void* recv, int64_t count, DType type, ReduceOp) override {
    device_only(send, recv, "all_reduce");
    const auto guard = host_->guard("all_reduce", count, type);
    if (send != nullptr) move(recv, send, count * itemsize(type));
  }

  void broadcast(void* data, int64_t count, DType type, int root) override {
    DAX_CHECK(root == 0, "broadcast: root ", root, " is not a member of a group of 1");
    device_only(data, nullptr, "broadcast");
    const auto guard = host_->guard("broadcast", count, type);
  }

  /// As NCCL's: returns once this member's queued device work has finished (the host barrier,
  /// of one member, keeps the group's call numbering as on the other transports).
  void barrier() override {
    context().synchronize("a barrier's wait for this GPU's collectives");
    host_->barrier();
  }

  void send_recv(const void* send, int dst, void* recv, int src, int64_t count, DType type) override {
    DAX_CHECK(dst >= -1 && dst < 1 && src >= -1 && src < 1, "send_recv: peers ", dst, " and ", src,
              " are not members of a group of 1 (or -1)");
    device_only(send, recv, "send_recv");
    const auto guard = host_->guard("send_recv", count, type);
    if (count == 0) return;
    DAX_CHECK(dst == src, "send_recv: member 0 sends to ", dst, " but receives from ", src,
              "; a member that sends to itself must receive from itself");
    if (dst == 0) move(recv, send, count * itemsize(type));
  }

  std::unique_ptr<PreparedExchange> prepare_exchange(const Box&, const std::vector<Box>& send, const Box&,
                                                     const std::vector<Box>& recv, int64_t item_bytes) override {
    DAX_CHECK(send.size() == 1 && recv.size() == 1, "region exchange: expected one region per member (1), got ",
              send.size(), " and ", recv.size());
    DAX_CHECK(item_bytes == 1 || item_bytes == 2 || item_bytes == 4 || item_bytes == 8, "region exchange: items of ",
              item_bytes, " bytes are not supported on the GPU (1, 2, 4 or 8)");
    return std::make_unique<SoloExchange>();
  }

  void exchange(const PreparedExchange& prepared, const void* send, void* recv) override {
    DAX_CHECK(dynamic_cast<const SoloExchange*>(&prepared) != nullptr,
              "exchange: the prepared exchange was made by another kind of communicator");
    device_only(send, recv, "exchange");
    const auto guard = host_->guard("exchange", 0, DType::int64);
  }

  std::vector<int64_t> all_gather_host(const std::vector<int64_t>& mine) override {
    return host_->all_gather_host(mine);
  }

 private:
  static void device_only(const void* a, const void* b, const char* call) {
    require_device_memory(a, call, "GPU transport (a group of one member)");
    require_device_memory(b, call, "GPU transport (a group of one member)");
  }

  /// `bytes` from `src` to `dst` on the stream, unless the part is already in place.
  static void move(void* dst, const void* src, int64_t bytes) {
    if (dst != src && bytes > 0) copy_device(dst, src, static_cast<size_t>(bytes));
  }

  std::unique_ptr<MpiCommunicator> host_;
};

}  // namespace dax::detail::cuda
