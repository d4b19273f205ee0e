// dax's files: checkpoints (dax::save / dax::load), .npy, .npz and safetensors, directories of named
// arrays. dax.hpp includes it.
#pragma once

#include <dax/array.hpp>
#include <dax/io/checkpoint.hpp>
