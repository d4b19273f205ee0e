// dax's compiled library: the one strong definition of every function marked DAX_OUTLINE (see
// core/compiled_mode.hpp). Programs built through CMake's dax::dax link it instead of compiling
// those bodies in each of their translation units.
#define DAX_LIBRARY_SOURCE 1
#include <dax/dax.hpp>
