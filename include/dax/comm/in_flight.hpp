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
/// An MPI error is kept by the call for its owner's wait(), not thrown into an unrelated op.
inline void progress_in_flight() {
  auto& calls = in_flight();
  if (calls.empty()) return;
  try {
    calls.front()->test();
  } catch (...) {
  }
}

/// Waits for every call still in flight: the runtime does before it frees its communicators, so
/// MPI never writes into memory released after it (a handle kept past the runtime finds its
/// call finished). Errors stay with the calls, as above.
inline void finish_in_flight() noexcept {
  const std::vector<PendingCollective*> calls = in_flight();  // waiting removes them from the list
  for (PendingCollective* call : calls) {
    try {
      call->wait();
    } catch (...) {
    }
  }
}

}  // namespace dax::detail
