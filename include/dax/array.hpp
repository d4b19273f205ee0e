// dax's arrays without training or files: the sharding model, the runtime, DistArray, every op,
// shard_map, explain and the profile. dax.hpp includes it whole; a program that needs no gradients,
// optimizers or checkpoints can include this alone and compile faster (docs/building.md).
#pragma once

#include <dax/core/call_site.hpp>  // dax::NamedScope
#include <dax/core/dtype.hpp>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/sharding/mesh.hpp>
#include <dax/sharding/named_sharding.hpp>
#include <dax/sharding/partition_spec.hpp>
#include <dax/sharding/visualize.hpp>
#include <dax/runtime/runtime.hpp>
#include <dax/runtime/make_mesh.hpp>
#include <dax/runtime/memory.hpp>
#include <dax/backend/memory_stats.hpp>
#include <dax/backend/matmul_precision.hpp>
#include <dax/array/dist_array.hpp>
#include <dax/array/creation.hpp>
#include <dax/array/reshard.hpp>
#include <dax/array/explicit_sharding.hpp>
#include <dax/array/reshard_async.hpp>
#include <dax/array/prefetch.hpp>
#include <dax/comm/comm_stats.hpp>
#include <dax/debug/explain.hpp>
#include <dax/debug/visualize.hpp>
#include <dax/debug/profile.hpp>
#include <dax/debug/simulate.hpp>
#include <dax/ops/elementwise.hpp>
#include <dax/ops/complex.hpp>
#include <dax/ops/cast_reshard.hpp>
#include <dax/ops/reduction.hpp>
#include <dax/ops/matmul.hpp>
#include <dax/ops/collective_matmul.hpp>
#include <dax/ops/set_cost_model.hpp>
#include <dax/ops/shape.hpp>
#include <dax/ops/random.hpp>
#include <dax/ops/arg_reduction.hpp>
#include <dax/ops/reshape.hpp>
#include <dax/ops/join.hpp>
#include <dax/ops/take.hpp>
#include <dax/ops/einsum.hpp>
#include <dax/manual/shard_map.hpp>
#include <dax/debug/explain_ops.hpp>

// Compiled mode: the ops for the common element types are already compiled in dax's library.
#if defined(DAX_COMPILED_LIBRARY) && !defined(DAX_HAS_CUDA)
#include <dax/compiled/extern_array_ops.hpp>
#endif
