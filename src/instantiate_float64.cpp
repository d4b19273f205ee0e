// The ops of compiled/instantiations.hpp for float64, compiled once into dax's library (dax::dax).
#include <dax/dax.hpp>
#include <dax/compiled/instantiations.hpp>

namespace dax {
DAX_INSTANTIATE_FLOATING_TYPE(double, )
DAX_INSTANTIATE_NN_TYPE(double, )
DAX_INSTANTIATE_CASTS_WITH_FLOAT(double, )
}  // namespace dax
