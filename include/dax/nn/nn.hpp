// nn/: layer-level functions over ops/ and autodiff/ (DESIGN §4.11), with hand-written backwards
// through dax::custom_vjp where they pay: layer_norm, rms_norm, dropout, causal / masked softmax,
// fused dot-product attention, cross_entropy (vocab-parallel when the vocabulary is split).
#pragma once

#include <dax/nn/attention.hpp>
#include <dax/nn/attention_mask.hpp>
#include <dax/nn/cross_entropy.hpp>
#include <dax/nn/dropout.hpp>
#include <dax/nn/normalization.hpp>
