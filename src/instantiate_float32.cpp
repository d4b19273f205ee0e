// The ops of compiled/instantiations.hpp for float32, compiled once into dax's library (dax::dax).
#include <dax/dax.hpp>
#include <dax/compiled/instantiations.hpp>

namespace dax {
DAX_INSTANTIATE_FLOATING_TYPE(float, )
DAX_INSTANTIATE_NN_TYPE(float, )
}  // namespace dax
