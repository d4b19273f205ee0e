// Communicator over an MPI communicator (host buffers). Errors come back as dax::Error naming the
// MPI call: dax's communicators use MPI_ERRORS_RETURN.
#pragma once

#include <mpi.h>

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
