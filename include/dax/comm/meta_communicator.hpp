// The meta backend's communicator: one simulated device's view of a mesh-axis group that moves
// nothing. Every collective returns at once (the receive buffers hold no data either); what the
// collectives would move is counted above, where every transport's is (comm_stats, dax::profile),
// so a simulated step reports exactly the bytes a real one does. Host metadata from every member
// is this member's own, repeated: all simulated devices run the same program on the same metadata.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <dax/comm/communicator.hpp>

namespace dax::detail {

class MetaCommunicator final : public Communicator {
 public:
  MetaCommunicator(std::string name, int size, int rank) : name_(std::move(name)), size_(size), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const { return name_; }

  void all_gatherv(const void*, void*, const std::vector<int64_t>& counts, const std::vector<int64_t>& displs,
                   DType) override {
    check_per_member(size_, "all_gatherv", counts, displs);
  }
  void all_to_allv(const void*, const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_displs, void*,
                   const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs, DType) override {
    check_per_member(size_, "all_to_allv", send_counts, send_displs, recv_counts, recv_displs);
  }
  void reduce_scatter(const void*, void*, const std::vector<int64_t>& counts, DType, ReduceOp) override {
    check_per_member(size_, "reduce_scatter", counts);
  }
  void all_reduce(const void*, void*, int64_t, DType, ReduceOp) override {}
  void broadcast(void*, int64_t, DType, int) override {}
  void barrier() override {}
  void send_recv(const void*, int, void*, int, int64_t, DType) override {}
  std::unique_ptr<PreparedExchange> prepare_exchange(const Box&, const std::vector<Box>&, const Box&,
                                                     const std::vector<Box>&, int64_t) override {
    return std::make_unique<PreparedExchange>();
  }
  void exchange(const PreparedExchange&, const void*, void*) override {}
  std::unique_ptr<PendingCollective> start_send(const void*, int, int64_t, DType, int) override {
    return std::make_unique<FinishedCollective>();
  }
  std::unique_ptr<PendingCollective> start_recv(void*, int, int64_t, DType, int) override {
    return std::make_unique<FinishedCollective>();
  }
  std::vector<int64_t> all_gather_host(const std::vector<int64_t>& mine) override {
    std::vector<int64_t> all;
    all.reserve(mine.size() * static_cast<size_t>(size_));
    for (int m = 0; m < size_; ++m) all.insert(all.end(), mine.begin(), mine.end());
    return all;
  }

 private:
  std::string name_;
  int size_, rank_;
};

}  // namespace dax::detail
