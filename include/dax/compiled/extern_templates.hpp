// Compiled mode (DAX_COMPILED_LIBRARY, set by CMake's dax::dax): the ops of
// compiled/instantiations.hpp for the common element types are declared here and defined once in
// dax's compiled library, so a program's translation units do not instantiate them again.
#pragma once

#include <dax/compiled/instantiations.hpp>
#include <dax/dax.hpp>  // the ops declared here (this file ends dax.hpp in compiled mode)

namespace dax {
DAX_FOR_EACH_INSTANTIATION(extern)
}  // namespace dax
