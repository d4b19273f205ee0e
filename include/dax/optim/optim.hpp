// Optimizers (SGD, AdamW) over parameter trees, gradient clipping, dynamic loss scaling, the
// mixed-precision policy, learning-rate schedules and the shardings of optimizer state (ZeRO-1/2/3).
#pragma once

#include <dax/optim/adamw.hpp>
#include <dax/optim/clip.hpp>
#include <dax/optim/loss_scale.hpp>
#include <dax/optim/precision.hpp>
#include <dax/optim/schedule.hpp>
#include <dax/optim/sgd.hpp>
#include <dax/optim/sharding.hpp>
