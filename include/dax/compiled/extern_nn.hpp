// Compiled mode (DAX_COMPILED_LIBRARY): the layers of nn/ for the floating element types, declared
// here and defined once in dax's compiled library (src/instantiate_<type>.cpp).
#pragma once

#include <dax/compiled/instantiations.hpp>
#include <dax/nn/nn.hpp>

namespace dax {
DAX_FOR_EACH_NN_INSTANTIATION(extern)
}  // namespace dax
