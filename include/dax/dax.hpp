// dax: eager distributed arrays with JAX's sharding model. The one header users include: arrays and
// ops (array.hpp), files (io.hpp) and training (training.hpp). Through CMake's dax::dax the ops for
// the common element types come compiled in dax's library (docs/building.md, "Two modes").
#pragma once

#include <dax/array.hpp>
#include <dax/io.hpp>
#include <dax/training.hpp>
