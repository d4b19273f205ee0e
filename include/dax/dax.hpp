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
#include <dax/array/dist_array.hpp>
#include <dax/array/creation.hpp>
#include <dax/array/reshard.hpp>
#include <dax/comm/comm_stats.hpp>
#include <dax/debug/explain.hpp>
#include <dax/debug/visualize.hpp>
#include <dax/ops/elementwise.hpp>
#include <dax/ops/reduction.hpp>
#include <dax/ops/matmul.hpp>
#include <dax/ops/shape.hpp>
#include <dax/ops/random.hpp>
#include <dax/ops/arg_reduction.hpp>
#include <dax/ops/reshape.hpp>
#include <dax/ops/join.hpp>
#include <dax/manual/shard_map.hpp>
#include <dax/debug/explain_ops.hpp>
#include <dax/io/checkpoint.hpp>
