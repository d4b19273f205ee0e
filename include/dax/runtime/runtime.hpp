// dax::Runtime: starts MPI (unless the program already did), picks the backend, binds meshes to
// ranks (device id = rank in the world) and owns one communicator per mesh-axis group, created on
// first use and cached. Shuts everything down in its destructor.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include <dax/backend/choice.hpp>
#include <dax/backend/cpu/blas.hpp>
#include <dax/comm/mpi_communicator.hpp>
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
inline Runtime*& current_runtime() {
  static Runtime* rt = nullptr;
  return rt;
}
}  // namespace detail

class Runtime {
 public:
  Runtime() : Runtime(nullptr, nullptr) {}
  Runtime(int& argc, char**& argv) : Runtime(&argc, &argv) {}

  ~Runtime() {
    for (auto& hook : shutdown_hooks_) hook();
    groups_.clear();
#if DAX_CUDA_BACKEND
    if (backend_ == Backend::cuda) {  // device memory and the stream go before the context does
      try {
        detail::cuda::device_allocator()->release_cached();
        detail::cuda::pinned_allocator()->release_cached();
        detail::cuda::context().shutdown();
      } catch (const std::exception& e) {  // a destructor must not throw: report a faulted device
        std::fprintf(stderr, "dax: shutting the CUDA backend down failed: %s\n", e.what());
      }
    }
#endif
    detail::active_backend() = Backend::cpu;
    world_.reset();
    detail::job_watchdog() = nullptr;
    watchdog_.reset();
    if (owns_mpi_) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    }
    detail::current_runtime() = nullptr;
  }

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

  /// Throws unless every device of `mesh` is a rank of the world.
  void check_mesh(const Mesh& mesh) const {
    const int largest = mesh.largest_device();
    DAX_CHECK(largest < size_, to_string(mesh), " needs ", mesh.size(), " devices (ids up to ",
              largest, ") but the world has ", size_, " rank", size_ == 1 ? "" : "s",
              ": launch with mpirun -np ", largest + 1, " or use a smaller mesh");
  }

  /// This rank's communicator over the mesh axes `axes`: the devices that share its coordinates on
  /// every other axis, ranked by their coordinates on `axes`, axes[0] major (so a shard_map
  /// collective over ('model', 'data') ranks members in that order).
  /// Collective over those devices the first time; cached after.
  detail::Communicator& group(const Mesh& mesh, const std::vector<int>& axes) {
    if (auto* found = groups_.find(mesh, axes)) return **found;
    check_mesh(mesh);
    std::vector<int> members = members_of(mesh, axes);
    MPI_Group world_group = MPI_GROUP_NULL, sub_group = MPI_GROUP_NULL;
    detail::mpi_check(MPI_Comm_group(world_->native(), &world_group), "MPI_Comm_group");
    detail::mpi_check(MPI_Group_incl(world_group, static_cast<int>(members.size()), members.data(), &sub_group),
                      "MPI_Group_incl");
    std::string name = "(";
    for (size_t i = 0; i < axes.size(); ++i) name += (i ? ", '" : "'") + mesh.axis_names()[axes[i]] + "'";
    name += axes.size() == 1 ? ",)" : ")";
    MPI_Comm comm = MPI_COMM_NULL;
    int rc = MPI_SUCCESS;
    {
      const std::string doing = "creating the communicator of the group " + name + " (MPI_Comm_create_group)";
      const detail::Watched watched(watchdog_.get(), &doing, &describe_creation);
      rc = MPI_Comm_create_group(world_->native(), sub_group, 0, &comm);
    }
    MPI_Group_free(&sub_group);
    MPI_Group_free(&world_group);
    detail::mpi_check(rc, "MPI_Comm_create_group");
    return *groups_.insert(mesh, axes, make_communicator(comm, std::move(name), members));
  }

  /// The communicator of every device of the mesh.
  detail::Communicator& mesh_group(const Mesh& mesh) {
    std::vector<int> all(mesh.num_axes());
    for (int a = 0; a < mesh.num_axes(); ++a) all[a] = a;
    return group(mesh, all);
  }

  /// Every rank of the job.
  detail::Communicator& world() { return *world_; }

  /// Runs `hook` before the runtime shuts MPI down (caches holding communicators clear themselves).
  void at_shutdown(std::function<void()> hook) { shutdown_hooks_.push_back(std::move(hook)); }

 private:
  Runtime(int* argc, char*** argv) {
    DAX_CHECK(detail::current_runtime() == nullptr, "dax: a dax::Runtime is already alive; create one per process");
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      detail::mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owns_mpi_ = true;
    }
    MPI_Comm world = MPI_COMM_NULL;
    detail::mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
    const auto& checks = detail::collective_checks();
    if (checks.timeout_s > 0) watchdog_ = std::make_unique<detail::Watchdog>(checks.timeout_s, &detail::abort_job);
    detail::job_watchdog() = watchdog_.get();
    world_ = std::make_unique<detail::MpiCommunicator>(world, "world", std::vector<int>{}, watchdog_.get());
    rank_ = world_->rank();
    size_ = world_->size();
#if DAX_CUDA_BACKEND
    gpus_ = detail::cuda::query_gpus();
    backend_ = detail::choose_backend(gpus_);
    if (backend_ == Backend::cuda) detail::cuda::context().init(node_local_rank(world));
#else
    backend_ = detail::choose_backend(gpus_);
#endif
    detail::active_backend() = backend_;
    detail::set_default_blas_threads();
    static uint64_t created = 0;
    generation_ = ++created;
    detail::current_runtime() = this;
  }

  /// The transport of a new group: MPI on CPU; on CUDA, NCCL or (DAX_TRANSPORT=mpi) MPI with
  /// device buffers staged through pinned host memory.
  std::unique_ptr<detail::Communicator> make_communicator(MPI_Comm comm, std::string name, std::vector<int> members) {
#if DAX_CUDA_BACKEND
    if (backend_ == Backend::cuda)
      return detail::cuda::make_gpu_communicator(comm, std::move(name), std::move(members), watchdog_.get());
#endif
    return std::make_unique<detail::MpiCommunicator>(comm, std::move(name), std::move(members), watchdog_.get());
  }

  /// This rank's position among the ranks on its node (its GPU is this modulo the node's GPUs).
  static int node_local_rank(MPI_Comm world) {
    MPI_Comm node = MPI_COMM_NULL;
    detail::mpi_check(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                      "MPI_Comm_split_type");
    int rank = 0;
    MPI_Comm_rank(node, &rank);
    MPI_Comm_free(&node);
    return rank;
  }

  static std::string describe_creation(const void* doing) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return detail::cat("dax: world rank ", rank, " timed out after ", detail::collective_checks().timeout_s,
                       " s (DAX_TIMEOUT_S) ", *static_cast<const std::string*>(doing), ". Aborting the job.");
  }

  std::vector<int> members_of(const Mesh& mesh, const std::vector<int>& axes) const {
    DAX_CHECK(mesh.contains(rank_), "dax: rank ", rank_, " is not a device of ", to_string(mesh),
              " and cannot take part in its collectives");
    return detail::group_members(mesh, axes, rank_);
  }

  bool owns_mpi_ = false;
  uint64_t generation_ = 0;
  int rank_ = 0, size_ = 1;
  Backend backend_ = Backend::cpu;
  detail::GpuQuery gpus_;
  std::unique_ptr<detail::Watchdog> watchdog_;  // declared first: outlives the communicators using it
  std::unique_ptr<detail::MpiCommunicator> world_;
  detail::GroupTable<std::unique_ptr<detail::Communicator>> groups_;
  std::vector<std::function<void()>> shutdown_hooks_;
};

}  // namespace dax
