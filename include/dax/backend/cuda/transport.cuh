// How device data moves between ranks: DAX_TRANSPORT=nccl (the default) or mpi, and the factory
// the runtime calls for each group's communicator when the backend is CUDA.
#pragma once

#include <dax/core/mpi.hpp>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <dax/backend/cuda/nccl_communicator.cuh>
#include <dax/backend/cuda/solo_communicator.cuh>
#include <dax/backend/cuda/staged_mpi_communicator.cuh>
#include <dax/comm/collective_checks.hpp>
#include <dax/comm/communicator.hpp>
#include <dax/comm/mpi_communicator.hpp>
#include <dax/core/error.hpp>

namespace dax::detail::cuda {

enum class Transport { nccl, mpi };

inline std::string to_string(Transport t) { return t == Transport::nccl ? "nccl" : "mpi"; }

/// The transport DAX_TRANSPORT asks for ("nccl" or "mpi"); NCCL when unset or empty.
inline Transport choose_transport() {
  const char* env = std::getenv("DAX_TRANSPORT");
  const std::string wanted = env ? env : "";
  if (wanted.empty() || wanted == "nccl") return Transport::nccl;
  if (wanted == "mpi") return Transport::mpi;
  fail("DAX_TRANSPORT must be 'nccl' or 'mpi', got '", wanted, "'");
}

/// The communicator of one group for device buffers, by DAX_TRANSPORT; a group of one member
/// needs no transport and gets device copies (SoloDeviceCommunicator) whichever is asked for.
/// Takes ownership of `comm` (the group's MPI communicator, freed with the result or on error);
/// `name`, `world_members` and `watchdog` as for MpiCommunicator. Collective over the group (NCCL
/// bootstraps over `comm`).
inline std::unique_ptr<Communicator> make_gpu_communicator(MPI_Comm comm, std::string name,
                                                           std::vector<int> world_members, Watchdog* watchdog) {
  auto host = std::make_unique<MpiCommunicator>(comm, std::move(name), std::move(world_members), watchdog);
  // Read before anything collective: an invalid value then fails on every member alike.
  const Transport transport = choose_transport();
  if (host->size() == 1) return std::make_unique<SoloDeviceCommunicator>(std::move(host));
  if (transport == Transport::mpi) return std::make_unique<StagedMpiCommunicator>(std::move(host));
  return std::make_unique<NcclCommunicator>(std::move(host));
}

}  // namespace dax::detail::cuda
