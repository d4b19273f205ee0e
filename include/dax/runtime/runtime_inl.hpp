// The bodies of dax::Runtime's functions (runtime/runtime.hpp): inline in header-only use, compiled
// once into dax's library in compiled mode (core/compiled_mode.hpp).
#pragma once

#include <cxxabi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <dax/backend/meta/memory.hpp>
#include <dax/comm/meta_communicator.hpp>
#include <dax/comm/mpi_communicator.hpp>
#include <dax/runtime/runtime.hpp>
#include <dax/runtime/stats_file.hpp>

namespace dax {
namespace detail {

[[noreturn]] DAX_OUTLINE void on_terminate() {
  if (std::exception_ptr e = std::current_exception()) {
    std::string what;
    try {
      std::rethrow_exception(e);
    } catch (const Error& error) {
      what = error.what();
      if (what.rfind("dax: ", 0) == 0) what.erase(0, 5);
    } catch (const std::exception& error) {
      const std::type_info* type = abi::__cxa_current_exception_type();
      int status = 0;
      char* name = type ? abi::__cxa_demangle(type->name(), nullptr, nullptr, &status) : nullptr;
      what = cat("uncaught ", name && status == 0 ? name : (type ? type->name() : "exception"), ": ", error.what());
      std::free(name);
    } catch (...) {
      const std::type_info* type = abi::__cxa_current_exception_type();
      what = cat("uncaught exception of type ", type ? type->name() : "unknown", " (not a std::exception)");
    }
    abort_job(cat("dax: rank ", report_rank(), ": ", what), 1);
  }
  if (std::terminate_handler previous = previous_terminate()) previous();
  std::abort();
}

/// DAX_SIMULATE=N:D (or N, device 0): the world a program started that way simulates, if set.
DAX_OUTLINE std::optional<MetaDevices> simulated_world_from_env() {
  const char* text = std::getenv("DAX_SIMULATE");
  if (!text || !*text) return std::nullopt;
  MetaDevices devices;
  char* end = nullptr;
  const long count = std::strtol(text, &end, 10);
  long device = 0;
  bool ok = end != text && count >= 1 && count <= (1 << 30);
  if (ok && *end == ':') {
    const char* d = end + 1;
    device = std::strtol(d, &end, 10);
    ok = end != d && device >= 0 && device < count;
  }
  DAX_CHECK(ok && *end == '\0', "DAX_SIMULATE: expected N or N:D (N simulated devices, this process device D, ",
            "0 <= D < N), got '", text, "'");
  devices.count = static_cast<int>(count);
  devices.device = static_cast<int>(device);
  return devices;
}

}  // namespace detail

DAX_OUTLINE Runtime::Runtime(int* argc, char*** argv) {
  DAX_CHECK(detail::current_runtime() == nullptr, "dax: a dax::Runtime is already alive; create one per process");
  const std::optional<MetaDevices> simulated = detail::simulated_world_from_env();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {  // simulated too, as a world of one: a program may call MPI itself (its own checks)
    int provided = 0;
    detail::mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    owns_mpi_ = true;
  }
  if (simulated) {  // DAX_SIMULATE: the whole program as one simulated device
    start_meta(*simulated);
    return;
  }
  MPI_Comm world = MPI_COMM_NULL;
  detail::mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
  const auto& checks = detail::collective_checks();
  if (checks.timeout_s > 0 || checks.light)
    watchdog_ = std::make_unique<detail::Watchdog>(checks.timeout_s, &detail::abort_job_timed_out, &detail::fail_job);
  detail::job_watchdog() = watchdog_.get();
  if (int n = 1; checks.light && checks.board && MPI_Comm_size(world, &n) == MPI_SUCCESS && n > 1) {
    board_ = detail::CallBoard::create(world);  // the light check's records on this node
    detail::job_call_board() = board_.get();
  }
  world_ = std::make_unique<detail::MpiCommunicator>(world, "world", std::vector<int>{}, watchdog_.get());
  rank_ = world_->rank();
  size_ = world_->size();
  detail::report_rank() = rank_;
  detail::previous_terminate() = std::set_terminate(&detail::on_terminate);
  previous_terminate_set_ = true;
  // A notice from a rank that leaves lands in departure_buffer() while this rank waits in MPI.
  detail::departure_buffer() = detail::DepartureNotice{};
  if (size_ > 1)
    detail::mpi_check(MPI_Irecv(&detail::departure_buffer(), sizeof(detail::DepartureNotice), MPI_BYTE,
                                MPI_ANY_SOURCE, kDepartureTag, world_->native(), &departure_recv_),
                      "MPI_Irecv");
  static bool at_exit_registered = false;
  if (!at_exit_registered) {
    at_exit_registered = true;
    std::atexit([] {
      if (Runtime* rt = detail::current_runtime()) {
        rt->leave("called exit() while its dax::Runtime was alive");
        if (rt->owns_mpi_) {  // what the destructor would have done; others may be waiting for it
          int finalized = 0;
          MPI_Finalized(&finalized);
          if (!finalized) MPI_Finalize();
        }
      }
    });
  }
#if DAX_CUDA_BACKEND
  gpus_ = detail::cuda::query_gpus();
  backend_ = detail::choose_backend(gpus_);
  if (backend_ == Backend::cuda) detail::cuda::context().init(node_local_rank(world));
#else
  backend_ = detail::choose_backend(gpus_);
#endif
  detail::active_backend() = backend_;
  detail::set_default_blas_threads();
  generation_ = next_generation();
  detail::current_runtime() = this;
}

DAX_OUTLINE uint64_t Runtime::next_generation() {
  static uint64_t created = 0;
  return ++created;
}

DAX_OUTLINE Runtime::Runtime(MetaDevices devices) { start_meta(devices); }

DAX_OUTLINE void Runtime::start_meta(MetaDevices devices) {
  DAX_CHECK(devices.count >= 1 && devices.device >= 0 && devices.device < devices.count,
            "dax::MetaDevices: expected count >= 1 and 0 <= device < count, got count ", devices.count,
            " and device ", devices.device);
  outer_ = detail::current_runtime();
  DAX_CHECK(outer_ == nullptr || outer_->backend_ != Backend::meta,
            "dax: a meta runtime is already alive; simulate one world at a time");
  rank_ = devices.device;
  size_ = devices.count;
  backend_ = Backend::meta;
  meta_world_ = std::make_unique<detail::MetaCommunicator>("world", size_, rank_);
  outer_backend_ = detail::active_backend();
  detail::active_backend() = Backend::meta;
  detail::meta::reset_allocator();
  detail::meta::kernel_counts() = {};
  generation_ = next_generation();
  detail::current_runtime() = this;
}

DAX_OUTLINE Runtime::~Runtime() {
  if (!outer_) detail::write_stats_file(rank_, size_, to_string(backend_).c_str());  // DAX_STATS_FILE
  if (backend_ == Backend::meta) {  // nothing to shut down: give the world back to the outer runtime
    detail::finish_in_flight();
    for (auto& hook : shutdown_hooks_) hook();
    groups_.clear();
    detail::active_backend() = outer_backend_;
    detail::current_runtime() = outer_;
    if (owns_mpi_) {  // a program simulated as a whole (DAX_SIMULATE)
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    }
    return;
  }
  leave("returned from main: its dax::Runtime was destroyed");
  detail::finish_in_flight();  // before the communicators and plans those calls use go
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
  detail::job_call_board() = nullptr;
  board_.reset();
  detail::job_watchdog() = nullptr;
  watchdog_.reset();
  if (previous_terminate_set_) std::set_terminate(detail::previous_terminate());
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  detail::current_runtime() = nullptr;
}

DAX_OUTLINE void Runtime::check_mesh(const Mesh& mesh) const {
  const int largest = mesh.largest_device();
  DAX_CHECK(largest < size_, to_string(mesh), " needs ", mesh.size(), " devices (ids up to ",
            largest, ") but the world has ", size_, " rank", size_ == 1 ? "" : "s",
            ": launch with mpirun -np ", largest + 1, " or use a smaller mesh");
  if (backend_ == Backend::meta && (!largest_mesh_seen_ || mesh.size() > largest_mesh_seen_->size()))
    largest_mesh_seen_ = mesh;
}

DAX_OUTLINE detail::Communicator& Runtime::group(const Mesh& mesh, const std::vector<int>& axes) {
  if (auto* found = groups_.find(mesh, axes)) return **found;
  check_mesh(mesh);
  std::vector<int> members = members_of(mesh, axes);
  std::string name = "(";
  for (size_t i = 0; i < axes.size(); ++i) name += (i ? ", '" : "'") + mesh.axis_names()[axes[i]] + "'";
  name += axes.size() == 1 ? ",)" : ")";
  if (backend_ == Backend::meta) {
    const int position = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    return *groups_.insert(mesh, axes, std::make_unique<detail::MetaCommunicator>(std::move(name),
                                                                                 static_cast<int>(members.size()), position));
  }
  MPI_Group world_group = MPI_GROUP_NULL, sub_group = MPI_GROUP_NULL;
  detail::mpi_check(MPI_Comm_group(world_->native(), &world_group), "MPI_Comm_group");
  detail::mpi_check(MPI_Group_incl(world_group, static_cast<int>(members.size()), members.data(), &sub_group),
                    "MPI_Group_incl");
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_SUCCESS;
  {
    const Creation doing{"creating the communicator of the group " + name + " (MPI_Comm_create_group)", members};
    const detail::Watched watched(watchdog_.get(), &doing, &describe_creation, &poll_creation);
    rc = MPI_Comm_create_group(world_->native(), sub_group, 0, &comm);
  }
  MPI_Group_free(&sub_group);
  MPI_Group_free(&world_group);
  detail::mpi_check(rc, "MPI_Comm_create_group");
  return *groups_.insert(mesh, axes, make_communicator(comm, std::move(name), members));
}

DAX_OUTLINE std::unique_ptr<detail::Communicator> Runtime::make_communicator(MPI_Comm comm, std::string name, std::vector<int> members) {
#if DAX_CUDA_BACKEND
  if (backend_ == Backend::cuda)
    return detail::cuda::make_gpu_communicator(comm, std::move(name), std::move(members), watchdog_.get());
#endif
  return std::make_unique<detail::MpiCommunicator>(comm, std::move(name), std::move(members), watchdog_.get());
}

DAX_OUTLINE int Runtime::node_local_rank(MPI_Comm world) {
  MPI_Comm node = MPI_COMM_NULL;
  detail::mpi_check(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                    "MPI_Comm_split_type");
  int rank = 0;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  return rank;
}

DAX_OUTLINE std::string Runtime::describe_creation(const void* doing) {
  return detail::cat("dax: world rank ", detail::report_rank(), " timed out after ", detail::collective_checks().timeout_s,
                     " s (DAX_TIMEOUT_S) ", static_cast<const Creation*>(doing)->doing, ". Aborting the job.");
}

DAX_OUTLINE std::string Runtime::poll_creation(const void* p, double armed_s) {
  const auto& creation = *static_cast<const Creation*>(p);
  detail::DepartureNotice d;
  if (armed_s < 1.0 || !detail::read_departure(d)) return {};
  for (int m : creation.members)
    if (m == d.world_rank && m != detail::report_rank())
      return detail::cat("dax: world rank ", d.world_rank, " left the program (", detail::departure_text(d),
                         ") while world rank ", detail::report_rank(), " waited for it ", creation.doing,
                         ". Aborting the job.");
  return {};
}

DAX_OUTLINE void Runtime::leave(const char* how) {
  if (left_ || size_ == 1 || backend_ == Backend::meta) return;
  left_ = true;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  detail::DepartureNotice notice;
  notice.world_rank = rank_;
  const std::string text = detail::cat(how, "; ", detail::last_collective_text());
  notice.length = static_cast<int64_t>(std::min(text.size(), sizeof(notice.text)));
  std::memcpy(notice.text, text.data(), static_cast<size_t>(notice.length));
  notice.check = detail::departure_check(notice.world_rank, notice.length, notice.text);
  std::vector<MPI_Request> sends;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    sends.emplace_back();
    MPI_Isend(&notice, sizeof(notice), MPI_BYTE, r, kDepartureTag, world_->native(), &sends.back());
  }
  // Small messages leave at once; give them two seconds at most (a peer that is gone must not
  // keep this rank here).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int done = 0;
  while (!done && std::chrono::steady_clock::now() < give_up)
    MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE);
  if (!done)
    for (MPI_Request& r : sends)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  if (departure_recv_ != MPI_REQUEST_NULL) {
    int arrived = 0;
    MPI_Test(&departure_recv_, &arrived, MPI_STATUS_IGNORE);
    if (!arrived) {
      MPI_Cancel(&departure_recv_);
      MPI_Wait(&departure_recv_, MPI_STATUS_IGNORE);
    }
  }
}

DAX_OUTLINE std::vector<int> Runtime::members_of(const Mesh& mesh, const std::vector<int>& axes) const {
  DAX_CHECK(mesh.contains(rank_), "dax: rank ", rank_, " is not a device of ", to_string(mesh),
            " and cannot take part in its collectives");
  return detail::group_members(mesh, axes, rank_);
}
DAX_OUTLINE detail::Communicator& Runtime::world() {
  if (meta_world_) return *meta_world_;
  return *world_;
}

}  // namespace dax
