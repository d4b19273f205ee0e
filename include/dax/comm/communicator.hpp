// The collective interface dax moves data through, one instance per mesh-axis group. Buffers are
// in the backend's memory; counts and displacements are in elements. Implementations: MPI (here)
// and NCCL (backend/cuda, later), chosen by the runtime.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <dax/core/dtype.hpp>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail {

enum class ReduceOp { sum, prod, max, min };

/// A collective started without waiting for it (MPI's nonblocking collectives). `test()` lets it
/// progress and says whether it has finished; `wait()` finishes it (watched like a blocking call).
/// Its buffers, in and out, must stay alive and untouched until it has finished; destroying an
/// unfinished one waits for it first. Every member starts the same calls in the same order.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
};

/// One that had finished when it was returned: what transports without nonblocking calls give.
class FinishedCollective final : public PendingCollective {
 public:
  bool test() override { return true; }
  void wait() override {}
};

/// A region exchange made ready once (MPI: derived datatypes), run many times.
class PreparedExchange {
 public:
  virtual ~PreparedExchange() = default;
  /// Whether this member's receive piece should be memory the node's other members can map
  /// (the backend's allocate_for_peers): they then write their parts into it directly.
  virtual bool receives_from_peer_writes() const { return false; }
  /// Whether running it also copies the caller's own region (see prepare_exchange_keeping).
  virtual bool copies_own_part() const { return false; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// Every member's `counts[j]` elements land at `recv + displs[j]`; `send` == nullptr means the
  /// caller's own part is already in place in `recv`.
  virtual void all_gatherv(const void* send, void* recv, const std::vector<int64_t>& counts,
                           const std::vector<int64_t>& displs, DType type) = 0;
  virtual void all_to_allv(const void* send, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& send_displs, void* recv,
                           const std::vector<int64_t>& recv_counts,
                           const std::vector<int64_t>& recv_displs, DType type) = 0;
  /// `send` holds every member's part in member order; member j keeps the reduction of part j.
  virtual void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts,
                              DType type, ReduceOp op) = 0;
  virtual void all_reduce(const void* send, void* recv, int64_t count, DType type, ReduceOp op) = 0;
  virtual void broadcast(void* data, int64_t count, DType type, int root) = 0;
  virtual void barrier() = 0;
  /// Sends `count` elements to member `dst` while receiving `count` from member `src`; -1 for
  /// either means none (a ring shift's ends, a permutation's unmatched members). Collective: every
  /// member calls it, with -1 for both when it has no partner, so it is numbered and compared.
  virtual void send_recv(const void* send, int dst, void* recv, int src, int64_t count, DType type) = 0;
  /// Sends member j the region `send[j]` of the caller's piece `send_block` and receives region
  /// `recv[j]` of its piece `recv_block` from member j, straight between the two row-major
  /// buffers, strided or not (the caller's own entries are left out). Prepared once per plan, and
  /// collective: every member prepares the same exchange at the same point (the MPI transport
  /// agrees there on how to run it).
  virtual std::unique_ptr<PreparedExchange> prepare_exchange(const Box& send_block, const std::vector<Box>& send,
                                                             const Box& recv_block, const std::vector<Box>& recv,
                                                             int64_t item_bytes) = 0;
  /// The same, told the region `keep` the caller keeps (in both blocks): an exchange may copy it
  /// with the others' parts, in one pass over the source (copies_own_part() says it will); otherwise
  /// the caller copies it.
  virtual std::unique_ptr<PreparedExchange> prepare_exchange_keeping(const Box& send_block,
                                                                     const std::vector<Box>& send,
                                                                     const Box& recv_block,
                                                                     const std::vector<Box>& recv, const Box& keep,
                                                                     int64_t item_bytes) {
    (void)keep;
    return prepare_exchange(send_block, send, recv_block, recv, item_bytes);
  }
  virtual void exchange(const PreparedExchange& prepared, const void* send, void* recv) = 0;

  /// The same collectives started without waiting (`start_` + the blocking call's name). A
  /// transport that has no nonblocking calls runs the blocking one and returns it finished.
  virtual std::unique_ptr<PendingCollective> start_all_gatherv(const void* send, void* recv,
                                                               const std::vector<int64_t>& counts,
                                                               const std::vector<int64_t>& displs, DType type) {
    all_gatherv(send, recv, counts, displs, type);
    return std::make_unique<FinishedCollective>();
  }
  virtual std::unique_ptr<PendingCollective> start_all_to_allv(const void* send, const std::vector<int64_t>& send_counts,
                                                               const std::vector<int64_t>& send_displs, void* recv,
                                                               const std::vector<int64_t>& recv_counts,
                                                               const std::vector<int64_t>& recv_displs, DType type) {
    all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs, type);
    return std::make_unique<FinishedCollective>();
  }
  virtual std::unique_ptr<PendingCollective> start_reduce_scatter(const void* send, void* recv,
                                                                  const std::vector<int64_t>& counts, DType type,
                                                                  ReduceOp op) {
    reduce_scatter(send, recv, counts, type, op);
    return std::make_unique<FinishedCollective>();
  }
  virtual std::unique_ptr<PendingCollective> start_all_reduce(const void* send, void* recv, int64_t count, DType type,
                                                              ReduceOp op) {
    all_reduce(send, recv, count, type, op);
    return std::make_unique<FinishedCollective>();
  }
  virtual std::unique_ptr<PendingCollective> start_send_recv(const void* send, int dst, void* recv, int src,
                                                             int64_t count, DType type) {
    send_recv(send, dst, recv, src, count, type);
    return std::make_unique<FinishedCollective>();
  }
  virtual std::unique_ptr<PendingCollective> start_exchange(const PreparedExchange& prepared, const void* send,
                                                            void* recv) {
    exchange(prepared, send, recv);
    return std::make_unique<FinishedCollective>();
  }
  /// One side of a transfer between two members, started and left to finish (a pipeline's
  /// activations and their gradients: parallel/pipeline.hpp). Not collective over the group, so
  /// the call checks give it no number in the group's sequence. `tag` keeps apart the transfers in
  /// flight between the same two members; transports without tags match them in the order each
  /// side starts them, which the caller keeps the same on both. The staged MPI transport has them
  /// (through pinned host blocks); NCCL does not (its point-to-point calls match in the order
  /// they are posted, not by tag) and says so.
  virtual std::unique_ptr<PendingCollective> start_send(const void* send, int dst, int64_t count, DType type,
                                                        int tag) {
    (void)send, (void)dst, (void)count, (void)type, (void)tag;
    fail("point-to-point sends are not available on this transport yet (the MPI transports have them: "
         "DAX_TRANSPORT=mpi on the GPU)");
  }
  virtual std::unique_ptr<PendingCollective> start_recv(void* recv, int src, int64_t count, DType type, int tag) {
    (void)recv, (void)src, (void)count, (void)type, (void)tag;
    fail("point-to-point receives are not available on this transport yet (the MPI transports have them: "
         "DAX_TRANSPORT=mpi on the GPU)");
  }
  /// Small host-side metadata from every member (for checks that must fail on all ranks alike).
  virtual std::vector<int64_t> all_gather_host(const std::vector<int64_t>& mine) = 0;
  /// The communicator of the same members that moves host memory: this one for MPI, the MPI
  /// communicator underneath a GPU transport (what MPI-IO opens files on).
  virtual Communicator& host() { return *this; }
};

/// The sum of per-member counts.
inline int64_t total(const std::vector<int64_t>& counts) {
  int64_t sum = 0;
  for (int64_t c : counts) sum += c;
  return sum;
}

/// Throws unless each of `vectors` (counts, displacements) has one entry per member.
template <class... Vectors>
void check_per_member(int members, const char* call, const Vectors&... vectors) {
  const auto check = [&](const std::vector<int64_t>& v) {
    DAX_CHECK(static_cast<int>(v.size()) == members, call, ": expected one count or displacement per member (",
              members, "), got ", v.size());
  };
  (check(vectors), ...);
}

}  // namespace dax::detail
