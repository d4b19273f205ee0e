// How a region copy lands in its destination: replacing what is there, or added to it (the
// unpack of a reduce step). Shared by every backend's copy kernels.
#pragma once

namespace dax::detail {

enum class CopyMode { assign, add };

}  // namespace dax::detail
