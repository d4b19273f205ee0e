// dax::Runtime: starts MPI (unless the program already did), picks the backend, binds meshes to
// ranks (device id = rank in the world) and owns one communicator per mesh-axis group, created on
// first use and cached. Shuts everything down in its destructor.
#pragma once

#include <dax/core/mpi.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include <dax/backend/choice.hpp>
#include <dax/backend/cpu/blas.hpp>  // dax::blas_info, public
#include <dax/comm/communicator.hpp>
#include <dax/core/compiled_mode.hpp>
#include <dax/core/error.hpp>
#include <dax/runtime/group_table.hpp>
#include <dax/sharding/mesh.hpp>
#if DAX_CUDA_BACKEND
#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/memory.cuh>
#include <dax/backend/cuda/transport.cuh>
#endif

namespace dax {

class Runtime;

namespace detail {
class MpiCommunicator;  // comm/mpi_communicator.hpp
class Watchdog;         // comm/collective_checks.hpp
class CallBoard;        // comm/call_board.hpp

inline Runtime*& current_runtime() {
  static Runtime* rt = nullptr;
  return rt;
}

/// This process's world rank, for reports written where MPI may no longer answer.
inline int& report_rank() {
  static int rank = -1;
  return rank;
}

/// The terminate handler the runtime installs: an uncaught exception becomes one line
/// ("dax: rank 1: <what>") on this rank, no backtrace, and the job ends with exit code 1 through
/// the abort path (abort hooks, then _Exit: the launcher stops the other ranks). A terminate with
/// no exception in flight goes to the handler that was installed before.
inline std::terminate_handler& previous_terminate() {
  static std::terminate_handler previous = nullptr;
  return previous;
}

[[noreturn]] DAX_OUTLINE void on_terminate();
}  // namespace detail

/// A simulated world for the meta backend (PyTorch's device="meta"): `count` devices, of which
/// this process plays `device`. A runtime made from it starts no MPI and touches no device: its
/// arrays carry shapes and shardings but no data, every op runs its rules, planning and autodiff
/// recording, kernels and collectives are counted and skipped, and dax::memory_stats /
/// dax::comm_stats say what the device would hold and receive (debug/simulate.hpp reports it).
/// It may be created while an ordinary runtime is alive: it stands in for that one until it is
/// destroyed. Values read back (to_host) are zeros.
struct MetaDevices {
  int count = 1;
  int device = 0;
};

class Runtime {
 public:
  Runtime() : Runtime(nullptr, nullptr) {}
  Runtime(int& argc, char**& argv) : Runtime(&argc, &argv) {}
  /// A meta runtime: `devices.count` simulated devices, this process being `devices.device`.
  /// (A program started with DAX_SIMULATE=N:D in its environment gets one from Runtime(argc, argv)
  /// too, without MPI: the whole program then runs as device D of N simulated devices.)
  explicit Runtime(MetaDevices devices);

  ~Runtime();

  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  /// Distinct for every runtime the process creates (caches tied to one runtime check it).
  uint64_t generation() const { return generation_; }
  int size() const { return size_; }
  Backend backend() const { return backend_; }
  /// What the GPU query found when the runtime started, e.g. "no usable CUDA device:
  /// cudaGetDeviceCount failed with cudaErrorInsufficientDriver (...)": why the backend is the CPU.
  std::string gpu_status() const {
    return detail::compiled_with_cuda() ? detail::describe_gpu_query(gpus_) : "compiled without CUDA: CPU only";
  }

  /// The runtime the program created.
  static Runtime& current() {
    Runtime* rt = detail::current_runtime();
    DAX_CHECK(rt != nullptr, "dax: no dax::Runtime is alive; create one first "
              "(dax::Runtime rt(argc, argv);)");
    return *rt;
  }

  /// Throws unless every device of `mesh` is a rank of the world. A meta runtime also keeps the
  /// largest mesh it was asked about (dax::simulate_classes varies the device over its coordinates).
  void check_mesh(const Mesh& mesh) const;

  /// On a meta runtime: the mesh of the most devices its step used so far (the first of equal
  /// ones), or null.
  const Mesh* largest_mesh_seen() const { return largest_mesh_seen_ ? &*largest_mesh_seen_ : nullptr; }

  /// This rank's communicator over the mesh axes `axes`: the devices that share its coordinates on
  /// every other axis, ranked by their coordinates on `axes`, axes[0] major (so a shard_map
  /// collective over ('model', 'data') ranks members in that order).
  /// Collective over those devices the first time; cached after.
  detail::Communicator& group(const Mesh& mesh, const std::vector<int>& axes);

  /// The communicator of every device of the mesh.
  detail::Communicator& mesh_group(const Mesh& mesh) {
    std::vector<int> all(mesh.num_axes());
    for (int a = 0; a < mesh.num_axes(); ++a) all[a] = a;
    return group(mesh, all);
  }

  /// Every rank of the job.
  detail::Communicator& world();

  /// Runs `hook` before the runtime shuts MPI down (caches holding communicators clear themselves).
  void at_shutdown(std::function<void()> hook) { shutdown_hooks_.push_back(std::move(hook)); }

 private:
  Runtime(int* argc, char*** argv);
  void start_meta(MetaDevices devices);

  /// The transport of a new group: MPI on CPU; on CUDA, NCCL or (DAX_TRANSPORT=mpi) MPI with
  /// device buffers staged through pinned host memory.
  std::unique_ptr<detail::Communicator> make_communicator(MPI_Comm comm, std::string name, std::vector<int> members);

  /// This rank's position among the ranks on its node (its GPU is this modulo the node's GPUs).
  static int node_local_rank(MPI_Comm world);

  struct Creation {
    std::string doing;
    std::vector<int> members;  // world ranks
  };

  static std::string describe_creation(const void* doing);

  /// A member that left while this rank has waited a second to create a communicator with it.
  static std::string poll_creation(const void* p, double armed_s);

  static constexpr int kDepartureTag = 0x6469;

  /// Tells every other rank that this one leaves (how, and its last collective), so a rank waiting
  /// for it fails with that instead of hanging; then withdraws this rank's own receive for such a
  /// notice. Once per runtime.
  void leave(const char* how);

  std::vector<int> members_of(const Mesh& mesh, const std::vector<int>& axes) const;

  /// A new generation number, for every runtime the process creates.
  static uint64_t next_generation();

  bool owns_mpi_ = false;
  bool left_ = false;
  bool previous_terminate_set_ = false;
  MPI_Request departure_recv_ = MPI_REQUEST_NULL;
  uint64_t generation_ = 0;
  int rank_ = 0, size_ = 1;
  Backend backend_ = Backend::cpu;
  detail::GpuQuery gpus_;
  std::unique_ptr<detail::Watchdog> watchdog_;  // declared first: outlives the communicators using it
  std::unique_ptr<detail::CallBoard> board_;     // likewise
  std::unique_ptr<detail::MpiCommunicator> world_;
  std::unique_ptr<detail::Communicator> meta_world_;  // a meta runtime's world (world_ is then empty)
  Runtime* outer_ = nullptr;                          // the runtime a meta one stands in for
  mutable std::optional<Mesh> largest_mesh_seen_;     // a meta runtime's (check_mesh)
  Backend outer_backend_ = Backend::cpu;
  detail::GroupTable<std::unique_ptr<detail::Communicator>> groups_;
  std::vector<std::function<void()>> shutdown_hooks_;
};

}  // namespace dax

#if DAX_HEADER_DEFINITIONS
#include <dax/runtime/runtime_inl.hpp>
#endif
