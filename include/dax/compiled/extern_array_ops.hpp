// Compiled mode (DAX_COMPILED_LIBRARY, set by CMake's dax::dax): the array ops of
// compiled/instantiations.hpp for the common element types, declared here and defined once in dax's
// compiled library (src/instantiate_<type>.cpp), so a program's files do not instantiate them again.
#pragma once

#include <dax/array.hpp>  // the ops declared here (this file ends array.hpp in compiled mode)
#include <dax/compiled/instantiations.hpp>

namespace dax {
DAX_FOR_EACH_ARRAY_INSTANTIATION(extern)
}  // namespace dax
