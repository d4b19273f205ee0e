// The GPU transports (NCCL; MPI with device buffers, staged or CUDA-aware) checked method by method
// on device buffers against values computed on the host: uneven counts, in-place variants, rings,
// prepared strided exchanges. Run under mpirun; exits 77 (skipped) where it cannot run.
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/memory.cuh>
#include <dax/backend/cuda/transport.cuh>

#include "skip_without_gpu.hpp"

namespace {

using dax::Box;
using dax::DType;
using dax::Slice;
using dax::detail::Communicator;
using dax::detail::ReduceOp;
namespace cu = dax::detail::cuda;

int failures = 0;
int world_rank = 0;
std::string where;  // the communicator and type under test

#define EXPECT(cond, ...)                                                                                    \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      ++failures;                                                                                            \
      std::fprintf(stderr, "[world rank %d] %s:%d (%s): %s\n", world_rank, __FILE__, __LINE__, where.c_str(), \
                   dax::detail::cat(__VA_ARGS__).c_str());                                                   \
    }                                                                                                        \
  } while (0)

cudaStream_t stream() { return cu::context().stream(); }

/// A device buffer with host-side upload and download, ordered on the device stream.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host)
      : size_(static_cast<int64_t>(host.size())), buffer_(cu::allocate(std::max<size_t>(host.size(), 1) * sizeof(T))) {
    upload(host);
  }
  T* data() { return static_cast<T*>(buffer_->data()); }
  void upload(const std::vector<T>& host) {
    if (size_ > 0)
      DAX_CUDA_CHECK(cudaMemcpyAsync(data(), host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice, stream()));
    DAX_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  std::vector<T> download() {
    std::vector<T> host(size_);
    if (size_ > 0)
      DAX_CUDA_CHECK(cudaMemcpyAsync(host.data(), data(), size_ * sizeof(T), cudaMemcpyDeviceToHost, stream()));
    DAX_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return host;
  }

 private:
  int64_t size_;
  std::shared_ptr<dax::detail::Buffer> buffer_;
};

/// Fresh non-zero values, exact in every type tested (small integers).
template <class T>
T value(int member, int64_t i, int salt) {
  return static_cast<T>((member + 1) * 1000 + (i % 500) + salt);
}
/// Values whose products over four members stay small and exact.
template <class T>
T small(int member, int64_t i, int salt) {
  return static_cast<T>(1 + (member + i + salt) % 3);
}
template <class T>
T sentinel() {
  return static_cast<T>(-7);
}

template <class T>
T reduce(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::sum: return static_cast<T>(a + b);
    case ReduceOp::prod: return static_cast<T>(a * b);
    case ReduceOp::max: return std::max(a, b);
    case ReduceOp::min: return std::min(a, b);
  }
  return a;
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

template <class T>
void check_all_gather(Communicator& c) {
  const int n = c.size(), me = c.rank();
  const DType type = dax::dtype_v<T>;
  // NCCL's layout: equal parts back to back in member order.
  {
    const int64_t k = 5;
    std::vector<int64_t> counts(n, k), displs(n);
    for (int j = 0; j < n; ++j) displs[j] = j * k;
    std::vector<T> mine(k);
    for (int64_t i = 0; i < k; ++i) mine[i] = value<T>(me, i, 1);
    for (bool in_place : {false, true}) {
      std::vector<T> init(n * k, sentinel<T>());
      if (in_place) std::copy(mine.begin(), mine.end(), init.begin() + me * k);
      DeviceArray<T> send(mine), recv(init);
      c.all_gatherv(in_place ? nullptr : send.data(), recv.data(), counts, displs, type);
      const auto got = recv.download();
      for (int j = 0; j < n; ++j)
        for (int64_t i = 0; i < k; ++i)
          EXPECT(got[j * k + i] == value<T>(j, i, 1), "all_gather (even", in_place ? ", in place" : "", ") part ", j,
                 " element ", i, ": got ", +got[j * k + i], ", expected ", +value<T>(j, i, 1));
    }
  }
  // Uneven parts (one empty), laid out in reverse member order with a gap before each.
  {
    std::vector<int64_t> counts(n), displs(n);
    for (int j = 0; j < n; ++j) counts[j] = j % 3 == 1 ? 0 : j + 2;
    int64_t end = 0;
    for (int j = n - 1; j >= 0; --j) {
      displs[j] = end + 1;
      end = displs[j] + counts[j];
    }
    std::vector<T> mine(counts[me]);
    for (int64_t i = 0; i < counts[me]; ++i) mine[i] = value<T>(me, i, 2);
    for (bool in_place : {false, true}) {
      std::vector<T> init(end, sentinel<T>());
      if (in_place) std::copy(mine.begin(), mine.end(), init.begin() + displs[me]);
      DeviceArray<T> send(mine), recv(init);
      c.all_gatherv(in_place ? nullptr : send.data(), recv.data(), counts, displs, type);
      const auto got = recv.download();
      std::vector<T> expected(end, sentinel<T>());
      for (int j = 0; j < n; ++j)
        for (int64_t i = 0; i < counts[j]; ++i) expected[displs[j] + i] = value<T>(j, i, 2);
      for (int64_t i = 0; i < end; ++i)
        EXPECT(got[i] == expected[i], "all_gather (uneven", in_place ? ", in place" : "", ") element ", i, ": got ",
               +got[i], ", expected ", +expected[i]);
    }
  }
}

template <class T>
void check_all_to_all(Communicator& c) {
  const int n = c.size(), me = c.rank();
  auto amount = [](int from, int to) { return static_cast<int64_t>((from + 2 * to + 1) % 4); };  // some zero
  std::vector<int64_t> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  int64_t send_end = 0, recv_end = 0;
  for (int j = 0; j < n; ++j) {  // sends in member order, receives in reverse, gaps between
    send_counts[j] = amount(me, j);
    send_displs[j] = send_end + 1;
    send_end = send_displs[j] + send_counts[j];
  }
  for (int j = n - 1; j >= 0; --j) {
    recv_counts[j] = amount(j, me);
    recv_displs[j] = recv_end + 2;
    recv_end = recv_displs[j] + recv_counts[j];
  }
  std::vector<T> out(send_end, sentinel<T>());
  for (int j = 0; j < n; ++j)
    for (int64_t i = 0; i < send_counts[j]; ++i) out[send_displs[j] + i] = value<T>(me, j * 10 + i, 3);
  DeviceArray<T> send(out), recv(std::vector<T>(recv_end, sentinel<T>()));
  c.all_to_allv(send.data(), send_counts, send_displs, recv.data(), recv_counts, recv_displs, dax::dtype_v<T>);
  const auto got = recv.download();
  std::vector<T> expected(recv_end, sentinel<T>());
  for (int j = 0; j < n; ++j)
    for (int64_t i = 0; i < recv_counts[j]; ++i) expected[recv_displs[j] + i] = value<T>(j, me * 10 + i, 3);
  for (int64_t i = 0; i < recv_end; ++i)
    EXPECT(got[i] == expected[i], "all_to_all element ", i, ": got ", +got[i], ", expected ", +expected[i]);
}

template <class T>
void check_reduce_scatter(Communicator& c) {
  const int n = c.size(), me = c.rank();
  auto run = [&](const std::vector<int64_t>& counts, ReduceOp op, const char* what) {
    int64_t total = 0;
    std::vector<int64_t> starts(n);
    for (int j = 0; j < n; ++j) {
      starts[j] = total;
      total += counts[j];
    }
    auto make = [&](int member, int64_t i) { return op == ReduceOp::prod ? small<T>(member, i, 4) : value<T>(member, i, 4); };
    std::vector<T> mine(total);
    for (int64_t i = 0; i < total; ++i) mine[i] = make(me, i);
    DeviceArray<T> send(mine), recv(std::vector<T>(std::max<int64_t>(counts[me], 1), sentinel<T>()));
    c.reduce_scatter(send.data(), recv.data(), counts, dax::dtype_v<T>, op);
    const auto got = recv.download();
    for (int64_t i = 0; i < counts[me]; ++i) {
      T expected = make(0, starts[me] + i);
      for (int r = 1; r < n; ++r) expected = reduce(op, expected, make(r, starts[me] + i));
      EXPECT(got[i] == expected, "reduce_scatter (", what, ", ", op_name(op), ") element ", i, ": got ", +got[i],
             ", expected ", +expected);
    }
    if (counts[me] == 0) EXPECT(got[0] == sentinel<T>(), "reduce_scatter (", what, ") wrote to an empty part");
  };
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) run(std::vector<int64_t>(n, 4), op, "even");
  std::vector<int64_t> uneven(n);
  for (int j = 0; j < n; ++j) uneven[j] = (j + 1) % 3;  // 1, 2, 0, 1, ...
  for (ReduceOp op : {ReduceOp::min, ReduceOp::prod}) run(uneven, op, "uneven");
}

template <class T>
void check_all_reduce(Communicator& c) {
  const int n = c.size(), me = c.rank();
  const int64_t count = 7;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min}) {
    auto make = [&](int member, int64_t i) { return op == ReduceOp::prod ? small<T>(member, i, 5) : value<T>(member, i, 5); };
    std::vector<T> mine(count), expected(count);
    for (int64_t i = 0; i < count; ++i) {
      mine[i] = make(me, i);
      expected[i] = make(0, i);
      for (int r = 1; r < n; ++r) expected[i] = reduce(op, expected[i], make(r, i));
    }
    for (bool in_place : {false, true}) {
      DeviceArray<T> send(mine), recv(in_place ? mine : std::vector<T>(count, sentinel<T>()));
      c.all_reduce(in_place ? nullptr : send.data(), recv.data(), count, dax::dtype_v<T>, op);
      const auto got = recv.download();
      for (int64_t i = 0; i < count; ++i)
        EXPECT(got[i] == expected[i], "all_reduce (", op_name(op), in_place ? ", in place" : "", ") element ", i,
               ": got ", +got[i], ", expected ", +expected[i]);
    }
  }
}

template <class T>
void check_broadcast(Communicator& c) {
  const int n = c.size(), me = c.rank(), root = n - 1;
  const int64_t count = 6;
  std::vector<T> data(count, sentinel<T>());
  if (me == root)
    for (int64_t i = 0; i < count; ++i) data[i] = value<T>(root, i, 6);
  DeviceArray<T> buffer(data);
  c.broadcast(buffer.data(), count, dax::dtype_v<T>, root);
  const auto got = buffer.download();
  for (int64_t i = 0; i < count; ++i)
    EXPECT(got[i] == value<T>(root, i, 6), "broadcast element ", i, ": got ", +got[i], ", expected ",
           +value<T>(root, i, 6));
}

template <class T>
void check_send_recv(Communicator& c) {
  const int n = c.size(), me = c.rank();
  const int64_t count = 3;
  std::vector<T> mine(count);
  for (int64_t i = 0; i < count; ++i) mine[i] = value<T>(me, i, 7);
  // A ring (to itself on one member), then an open chain whose ends send or receive nothing.
  for (bool ring : {true, false}) {
    const int dst = ring ? (me + 1) % n : (me + 1 < n ? me + 1 : -1);
    const int src = ring ? (me + n - 1) % n : (me > 0 ? me - 1 : -1);
    DeviceArray<T> send(mine), recv(std::vector<T>(count, sentinel<T>()));
    c.send_recv(send.data(), dst, recv.data(), src, count, dax::dtype_v<T>);
    const auto got = recv.download();
    for (int64_t i = 0; i < count; ++i) {
      const T expected = src >= 0 ? value<T>(src, i, 7) : sentinel<T>();
      EXPECT(got[i] == expected, "send_recv (", ring ? "ring" : "chain", ") element ", i, ": got ", +got[i],
             ", expected ", +expected);
    }
  }
}

/// Piece i of a dimension of `size` split `parts` ways (the chunk rule).
Slice piece(int64_t size, int parts, int i) {
  const int64_t chunk = (size + parts - 1) / parts;
  return {std::min<int64_t>(i * chunk, size), std::min<int64_t>((i + 1) * chunk, size)};
}

/// Runs a prepared exchange between two layouts of a (rows, cols) array (twice, with new values:
/// it is prepared once and run many times) and checks every element of the receiving piece: the
/// peers' regions hold the global values, the caller's own region is left alone.
template <class T>
void check_exchange_between(Communicator& c, const std::function<Box(int)>& from, const std::function<Box(int)>& to,
                            int64_t cols, const char* what) {
  const int n = c.size(), me = c.rank();
  const Box send_block = from(me), recv_block = to(me);
  std::vector<Box> send(n), recv(n);
  for (int j = 0; j < n; ++j) {
    send[j] = dax::intersect(send_block, to(j));
    recv[j] = dax::intersect(from(j), recv_block);
  }
  auto prepared = c.prepare_exchange(send_block, send, recv_block, recv, sizeof(T));
  auto global = [&](int64_t r, int64_t col, int salt) { return static_cast<T>(r * cols + col + 1 + salt); };
  for (int salt : {0, 50}) {
    std::vector<T> mine(dax::numel(send_block));
    int64_t k = 0;
    for (int64_t r = send_block[0].start; r < send_block[0].stop; ++r)
      for (int64_t col = send_block[1].start; col < send_block[1].stop; ++col) mine[k++] = global(r, col, salt);
    DeviceArray<T> in(mine), out(std::vector<T>(dax::numel(recv_block), sentinel<T>()));
    c.exchange(*prepared, in.data(), out.data());
    const auto got = out.download();
    k = 0;
    for (int64_t r = recv_block[0].start; r < recv_block[0].stop; ++r)
      for (int64_t col = recv_block[1].start; col < recv_block[1].stop; ++col, ++k) {
        const bool own = r >= send_block[0].start && r < send_block[0].stop && col >= send_block[1].start &&
                         col < send_block[1].stop;
        const T expected = own ? sentinel<T>() : global(r, col, salt);
        EXPECT(got[k] == expected, "exchange (", what, ", ", sizeof(T), "-byte items) at (", r, ", ", col, "): got ",
               +got[k], ", expected ", +expected);
      }
  }
}

template <class T>
void check_exchange(Communicator& c, int64_t rows, int64_t cols) {
  const int n = c.size();
  auto by_rows = [=](int j) { return Box{piece(rows, n, j), Slice{0, cols}}; };
  auto by_cols = [=](int j) { return Box{Slice{0, rows}, piece(cols, n, j)}; };
  auto by_rows_reversed = [=](int j) { return Box{piece(rows, n, n - 1 - j), Slice{0, cols}}; };
  check_exchange_between<T>(c, by_rows, by_cols, cols, "rows to columns: strided sends");
  check_exchange_between<T>(c, by_cols, by_rows, cols, "columns to rows: strided receives");
  check_exchange_between<T>(c, by_rows, by_rows_reversed, cols, "rows to reversed rows: contiguous");
}

template <class T>
void check_exchange(Communicator& c) {
  const int n = c.size();
  check_exchange<T>(c, 3 * n + 1, 2 * n + 3);  // uneven: trailing pieces short
  check_exchange<T>(c, n + 1, 3);              // on 4 members some pieces are empty
}

template <class T>
void check_collectives(Communicator& c, const std::string& name) {
  where = name + ", " + dax::to_string(dax::dtype_v<T>);
  check_all_gather<T>(c);
  check_all_to_all<T>(c);
  check_reduce_scatter<T>(c);
  check_all_reduce<T>(c);
  check_broadcast<T>(c);
  check_send_recv<T>(c);
}

void check_communicator(Communicator& c, const std::string& name) {
  check_collectives<float>(c, name);
  check_collectives<double>(c, name);
  check_collectives<int32_t>(c, name);
  check_collectives<int64_t>(c, name);
  where = name;
  check_exchange<float>(c);
  check_exchange<int64_t>(c);
  check_exchange<uint16_t>(c);
  check_exchange<uint8_t>(c);
  c.barrier();
  const std::vector<int64_t> all = c.all_gather_host({c.rank() + 10, -c.rank()});
  EXPECT(static_cast<int>(all.size()) == 2 * c.size(), "all_gather_host: ", all.size(), " values");
  for (int j = 0; j < c.size() && 2 * j + 1 < static_cast<int>(all.size()); ++j)
    EXPECT(all[2 * j] == j + 10 && all[2 * j + 1] == -j, "all_gather_host: member ", j, " sent ", all[2 * j], ", ",
           all[2 * j + 1]);
}

MPI_Comm dup_world() {
  MPI_Comm comm = MPI_COMM_NULL;
  dax::detail::mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  return comm;
}

/// Point-to-point transfers (a pipeline's): each member sends two device blocks to the next one
/// around the ring, told apart by their tags, and receives the previous member's, posting the
/// receives in the other tag's order first, all in flight together before any wait.
void check_point_to_point(Communicator& c, const std::string& name) {
  where = name + ", point-to-point";
  const int n = c.size(), me = c.rank();
  if (n < 2) return;
  const int next = (me + 1) % n, previous = (me + n - 1) % n;
  const int64_t count = 1000 + 37 * me, incoming = 1000 + 37 * previous;
  std::vector<float> first(count), second(count);
  for (int64_t i = 0; i < count; ++i) first[i] = value<float>(me, i, 1), second[i] = value<float>(me, i, 2);
  DeviceArray<float> a(first), b(second);
  DeviceArray<float> got_a(std::vector<float>(incoming, 0.f)), got_b(std::vector<float>(incoming, 0.f));
  auto recv_b = c.start_recv(got_b.data(), previous, incoming, DType::float32, 9);
  auto recv_a = c.start_recv(got_a.data(), previous, incoming, DType::float32, 5);
  auto send_a = c.start_send(a.data(), next, count, DType::float32, 5);
  auto send_b = c.start_send(b.data(), next, count, DType::float32, 9);
  recv_a->wait();
  recv_b->wait();
  send_a->wait();
  send_b->wait();
  const auto ra = got_a.download(), rb = got_b.download();
  for (int64_t i = 0; i < incoming; ++i) {
    EXPECT(ra[i] == value<float>(previous, i, 1), "tag 5 element ", i, ": ", ra[i]);
    EXPECT(rb[i] == value<float>(previous, i, 2), "tag 9 element ", i, ": ", rb[i]);
  }
}

/// DAX_TRANSPORT accepts nccl and mpi only, and says what it got.
void check_transport_choice() {
  where = "choose_transport";
  const char* old = std::getenv("DAX_TRANSPORT");
  const std::string saved = old ? old : "";
  setenv("DAX_TRANSPORT", "infiniband", 1);
  std::string message;
  try {
    cu::choose_transport();
  } catch (const dax::Error& e) {
    message = e.what();
  }
  EXPECT(message.find("'infiniband'") != std::string::npos, "DAX_TRANSPORT=infiniband: got '", message, "'");
  setenv("DAX_TRANSPORT", "mpi", 1);
  EXPECT(cu::choose_transport() == cu::Transport::mpi, "DAX_TRANSPORT=mpi");
  setenv("DAX_TRANSPORT", "nccl", 1);
  EXPECT(cu::choose_transport() == cu::Transport::nccl, "DAX_TRANSPORT=nccl");
  if (old)
    setenv("DAX_TRANSPORT", saved.c_str(), 1);
  else
    unsetenv("DAX_TRANSPORT");
}

int run(int gpus, int local_rank, int local_size) {
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const cu::Transport transport = cu::choose_transport();
  cu::context().init(local_rank % gpus);
  check_transport_choice();
  dax::detail::Watchdog watchdog(120, &dax::detail::abort_job_timed_out);  // the guards arm it on every call

  // A group of one member gets device copies whatever the transport; larger ones the transport.
  const auto expect_kind = [&](Communicator& c, const std::string& name) {
    const bool solo = dynamic_cast<cu::SoloDeviceCommunicator*>(&c) != nullptr;
    EXPECT(solo == (c.size() == 1), name, ": a group of ", c.size(), " member(s) got ",
           solo ? "the one-member communicator" : "a transport");
  };
  {
    auto world = cu::make_gpu_communicator(dup_world(), "world", {}, &watchdog);
    expect_kind(*world, "world");
    check_communicator(*world, "world over " + cu::to_string(transport));
  }
  if (world_size >= 2) {  // a group that is not the world: members of one parity
    MPI_Comm half = MPI_COMM_NULL;
    dax::detail::mpi_check(MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half), "MPI_Comm_split");
    std::vector<int> members;
    for (int r = world_rank % 2; r < world_size; r += 2) members.push_back(r);
    auto group = cu::make_gpu_communicator(half, "('half',)", members, &watchdog);
    expect_kind(*group, "('half',)");
    check_communicator(*group, "('half',) over " + cu::to_string(transport));
  }
  // Host memory handed to a device communicator is refused on every member, also at one rank,
  // where NCCL itself would copy nothing and so never notice (io/checkpoint.hpp once sent its
  // sizes that way).
  const auto check_refusals = [&](Communicator& c, const std::string& prefix) {
    int64_t host_values[2] = {7, 8};
    const auto refused = [&](const char* call, const std::function<void()>& f) {
      std::string message;
      try {
        f();
      } catch (const dax::Error& e) {
        message = e.what();
      }
      EXPECT(message.rfind(prefix + ": " + call + " was given host memory", 0) == 0, call,
             " of a host buffer: got '", message, "'");
    };
    refused("broadcast", [&] { c.broadcast(host_values, 2, dax::DType::int64, 0); });
    refused("all_reduce", [&] { c.all_reduce(nullptr, host_values, 2, dax::DType::int64, dax::detail::ReduceOp::sum); });
    refused("all_gatherv", [&] {
      c.all_gatherv(nullptr, host_values, std::vector<int64_t>(c.size(), 0), std::vector<int64_t>(c.size(), 0),
                    dax::DType::int64);
    });
    DeviceArray<int64_t> on_device(std::vector<int64_t>{7, 8});
    c.broadcast(on_device.data(), 2, dax::DType::int64, 0);  // device memory still passes
    EXPECT(on_device.download() == std::vector<int64_t>({7, 8}), "broadcast of device memory after the refusals");
  };
  {
    where = "host memory through the one-member communicator";
    MPI_Comm self = MPI_COMM_NULL;
    dax::detail::mpi_check(MPI_Comm_dup(MPI_COMM_SELF, &self), "MPI_Comm_dup");
    cu::SoloDeviceCommunicator solo(std::make_unique<dax::detail::MpiCommunicator>(self));
    check_refusals(solo, "GPU transport (a group of one member)");
  }
  if (transport == cu::Transport::nccl) {
    // NCCL itself, built directly: the factory gives a one-member world device copies instead.
    auto nccl = std::make_unique<cu::NcclCommunicator>(std::make_unique<dax::detail::MpiCommunicator>(dup_world()));
    if (world_size == 1) check_communicator(*nccl, "world over NCCL itself");
    where = "host memory through NCCL";
    check_refusals(*nccl, "NCCL transport");
  }
  if (transport == cu::Transport::mpi) {
    // The staged path whatever the MPI: the factory passes device pointers to a CUDA-aware one.
    cu::StagedMpiCommunicator staged(std::make_unique<dax::detail::MpiCommunicator>(dup_world()), false);
    check_communicator(staged, "world over mpi, staged");
    check_point_to_point(staged, "world over mpi, staged");
    if (cu::mpi_is_cuda_aware()) {  // and device pointers straight to MPI, at every rank count
      cu::StagedMpiCommunicator direct(std::make_unique<dax::detail::MpiCommunicator>(dup_world()), true);
      check_communicator(direct, "world over mpi, CUDA-aware");
      check_point_to_point(direct, "world over mpi, CUDA-aware");
    }
    if (local_size > gpus && local_size == world_size) {
      // Ranks sharing a GPU: NCCL is refused with the same advice on every member.
      where = "NCCL on a shared GPU";
      std::string message;
      try {
        cu::NcclCommunicator nccl(std::make_unique<dax::detail::MpiCommunicator>(dup_world()));
      } catch (const dax::Error& e) {
        message = e.what();
      }
      EXPECT(message.find("share one GPU") != std::string::npos && message.find("DAX_TRANSPORT=mpi") != std::string::npos,
             "expected the shared-GPU error, got '", message, "'");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int gpus = dax::test::gpus_or_skip("the transport tests");
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);

  bool nccl = true;
  try {
    nccl = cu::choose_transport() == cu::Transport::nccl;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[world rank %d] %s\n", world_rank, e.what());
    MPI_Finalize();
    return 1;
  }
  int short_of_gpus = nccl && local_size > gpus ? 1 : 0, any_short = 0;
  MPI_Allreduce(&short_of_gpus, &any_short, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_short) {
    if (world_rank == 0)
      std::printf("SKIPPED: NCCL needs a GPU per rank (%d ranks on a node with %d GPU(s)); use DAX_TRANSPORT=mpi\n",
                  local_size, gpus);
    MPI_Finalize();
    return 77;
  }

  try {
    run(gpus, local_rank, local_size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[world rank %d] error (%s): %s\n", world_rank, where.c_str(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) std::printf(total ? "FAILED: %d check(s)\n" : "transport tests passed\n", total);
  MPI_Finalize();
  return total ? 1 : 0;
}
