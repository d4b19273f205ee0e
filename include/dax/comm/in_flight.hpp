// The nonblocking collectives started and not yet seen to finish. Shared-memory MPI moves data only
// inside MPI calls, so a transfer started by reshard_async would sit still while the program
// computes; every dax op therefore calls progress_in_flight() as it starts: one MPI_Test on the
// oldest call in flight (which progresses them all), nothing when none is.
#pragma once

#include <algorithm>
#include <vector>

#include <dax/comm/communicator.hpp>

namespace dax::detail {

inline std::vector<PendingCollective*>& in_flight() {
  static std::vector<PendingCollective*> calls;  // dax's collectives run on the program's thread
  return calls;
}

inline void leave_in_flight(PendingCollective* call) {
  auto& calls = in_flight();
  calls.erase(std::remove(calls.begin(), calls.end(), call), calls.end());
}

/// Lets the transfers in flight progress (a finished one leaves the list as its test() sees it).
inline void progress_in_flight() {
  auto& calls = in_flight();
  if (!calls.empty()) calls.front()->test();
}

}  // namespace dax::detail
