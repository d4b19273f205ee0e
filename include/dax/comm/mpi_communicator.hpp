// Communicator over an MPI communicator (host buffers). Errors come back as dax::Error naming the
// MPI call: dax's communicators use MPI_ERRORS_RETURN.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include <dax/comm/communicator.hpp>
#include <dax/core/error.hpp>

namespace dax::detail {

inline void mpi_check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail(call, " failed: ", std::string(text, length));
}

inline MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::float32: return MPI_FLOAT;
    case DType::float64: return MPI_DOUBLE;
    case DType::int32: return MPI_INT32_T;
    case DType::int64: return MPI_INT64_T;
    case DType::boolean: return MPI_C_BOOL;
    case DType::bfloat16:
    case DType::float16: break;
  }
  fail("MPI transport: no MPI type for ", to_string(t));
}

inline MPI_Op mpi_op(ReduceOp op) {
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

class MpiCommunicator final : public Communicator {
 public:
  /// Takes ownership of `comm` (freed on destruction).
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
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
    mpi_check(MPI_Alltoallv(send, sc.data(), sd.data(), t, recv, rc.data(), rd.data(), t, comm_),
              "MPI_Alltoallv");
  }

  void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType type,
                      ReduceOp op) override {
    const auto c = mpi_counts(counts);
    // Equal parts take the block variant, which MPI libraries tune better.
    if (std::all_of(c.begin(), c.end(), [&](int x) { return x == c[0]; })) {
      mpi_check(MPI_Reduce_scatter_block(send, recv, c[0], mpi_type(type), mpi_op(op), comm_),
                "MPI_Reduce_scatter_block");
      return;
    }
    mpi_check(MPI_Reduce_scatter(send, recv, c.data(), mpi_type(type), mpi_op(op), comm_),
              "MPI_Reduce_scatter");
  }

  void all_reduce(const void* send, void* recv, int64_t count, DType type, ReduceOp op) override {
    mpi_check(MPI_Allreduce(send ? send : MPI_IN_PLACE, recv, mpi_count(count), mpi_type(type),
                            mpi_op(op), comm_),
              "MPI_Allreduce");
  }

  void broadcast(void* data, int64_t count, DType type, int root) override {
    mpi_check(MPI_Bcast(data, mpi_count(count), mpi_type(type), root, comm_), "MPI_Bcast");
  }

  void barrier() override { mpi_check(MPI_Barrier(comm_), "MPI_Barrier"); }

  void send_recv(const void* send, int dst, void* recv, int src, int64_t count, DType type) override {
    const MPI_Datatype t = mpi_type(type);
    const int n = mpi_count(count);
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
    mpi_check(MPI_Alltoallw(send, x.send_counts.data(), x.displs.data(), x.send_types.data(), recv,
                            x.recv_counts.data(), x.displs.data(), x.recv_types.data(), comm_),
              "MPI_Alltoallw");
  }

  std::vector<int64_t> all_gather_host(const std::vector<int64_t>& mine) override {
    std::vector<int64_t> all(mine.size() * size_);
    mpi_check(MPI_Allgather(mine.data(), mpi_count(mine.size()), MPI_INT64_T, all.data(),
                            mpi_count(mine.size()), MPI_INT64_T, comm_),
              "MPI_Allgather");
    return all;
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace dax::detail
