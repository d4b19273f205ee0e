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

/// A region exchange made ready once (MPI: derived datatypes), run many times.
class PreparedExchange {
 public:
  virtual ~PreparedExchange() = default;
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
  /// buffers, strided or not (the caller's own entries are left out). Prepared once per plan.
  virtual std::unique_ptr<PreparedExchange> prepare_exchange(const Box& send_block, const std::vector<Box>& send,
                                                             const Box& recv_block, const std::vector<Box>& recv,
                                                             int64_t item_bytes) = 0;
  virtual void exchange(const PreparedExchange& prepared, const void* send, void* recv) = 0;
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
