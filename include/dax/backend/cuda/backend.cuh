// The CUDA backend in one include: the device context, memory, and every local kernel. Included
// only by code that nvcc compiles (a g++ build never sees backend/cuda).
#pragma once

#include <dax/backend/cuda/adamw.cuh>
#include <dax/backend/cuda/arg_reduce.cuh>
#include <dax/backend/cuda/attention.cuh>
#include <dax/backend/cuda/copy.cuh>
#include <dax/backend/cuda/device.cuh>
#include <dax/backend/cuda/elementwise.cuh>
#include <dax/backend/cuda/gather.cuh>
#include <dax/backend/cuda/gemm.cuh>
#include <dax/backend/cuda/generate.cuh>
#include <dax/backend/cuda/layout.cuh>
#include <dax/backend/cuda/memory.cuh>
#include <dax/backend/cuda/norm.cuh>
#include <dax/backend/cuda/reduce.cuh>
#include <dax/backend/cuda/softmax.cuh>
#include <dax/backend/cuda/transpose.cuh>
