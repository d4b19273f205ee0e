// dax: eager distributed arrays with JAX's sharding model. The one header users include.
#pragma once

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
#include <dax/array/reshard_async.hpp>
#include <dax/array/prefetch.hpp>
#include <dax/comm/comm_stats.hpp>
#include <dax/debug/explain.hpp>
#include <dax/debug/visualize.hpp>
#include <dax/debug/profile.hpp>
#include <dax/ops/elementwise.hpp>
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
#include <dax/io/checkpoint.hpp>
#include <dax/autodiff/tree.hpp>
#include <dax/autodiff/tree_io.hpp>
#include <dax/autodiff/tape.hpp>
#include <dax/autodiff/grad.hpp>
#include <dax/autodiff/remat.hpp>
#include <dax/autodiff/custom_vjp.hpp>
#include <dax/optim/optim.hpp>
#include <dax/nn/nn.hpp>

// Compiled mode: a program built through CMake's dax::dax finds the ops for the common element types
// already compiled in dax's library (docs/building.md); nvcc builds (the CUDA backend) never do.
#if defined(DAX_COMPILED_LIBRARY) && !defined(DAX_HAS_CUDA)
#include <dax/compiled/extern_templates.hpp>
#endif
