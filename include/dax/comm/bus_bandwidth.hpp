// Bandwidth of a collective as nccl-tests reports it (its doc/PERFORMANCE.md): the algorithm
// bandwidth is the collective's size S (the whole buffer: all_gather's output, reduce_scatter's
// input, all_reduce's array) over its time; the bus bandwidth scales it by the fraction of S each
// rank must move on the wire in a ring, so that it compares with the link's speed whatever the
// collective and the group size. dax counts each collective by the bytes a device receives, which
// is exactly S times that fraction: bus bandwidth = received bytes / time.
#pragma once

#include <string_view>

namespace dax::detail {

/// Bus bandwidth / algorithm bandwidth for a collective `kind` (as comm_stats names it) over `n`
/// devices: 2(n-1)/n for all_reduce; (n-1)/n for all_gather, reduce_scatter and the all-to-alls
/// (the general exchange too); 1 for point-to-point (ppermute, send_recv). 0 when n <= 1.
inline double bus_bandwidth_factor(std::string_view kind, int n) {
  if (n <= 1) return 0;
  const double f = double(n - 1) / n;
  if (kind == "all_reduce") return 2 * f;
  if (kind == "all_gather" || kind == "reduce_scatter" || kind == "all_to_all" || kind == "all_to_allv" ||
      kind == "general_exchange")
    return f;
  return 1;
}

}  // namespace dax::detail
