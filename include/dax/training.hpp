// dax's training: parameter trees (and their checkpoints), value_and_grad / grad / vjp, remat and
// custom_vjp, the optimizers, the layers of nn/, and parallel/: the pipeline schedules and ring
// attention. dax.hpp includes it.
#pragma once

#include <dax/array.hpp>
#include <dax/io.hpp>
#include <dax/autodiff/tree.hpp>
#include <dax/autodiff/tree_io.hpp>
#include <dax/autodiff/label_memory.hpp>
#include <dax/autodiff/checkpoint_manager.hpp>
#include <dax/autodiff/tape.hpp>
#include <dax/autodiff/grad.hpp>
#include <dax/autodiff/remat.hpp>
#include <dax/autodiff/custom_vjp.hpp>
#include <dax/optim/optim.hpp>
#include <dax/nn/nn.hpp>
#include <dax/parallel/moe.hpp>
#include <dax/parallel/pipeline.hpp>
#include <dax/parallel/ring_attention.hpp>
#include <dax/parallel/schedule.hpp>

// Compiled mode: the layers for the common element types are already compiled in dax's library.
#if defined(DAX_COMPILED_LIBRARY) && !defined(DAX_HAS_CUDA)
#include <dax/compiled/extern_nn.hpp>
#endif
