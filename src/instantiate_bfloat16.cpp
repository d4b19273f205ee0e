// The ops of compiled/instantiations.hpp for bfloat16, compiled once into dax's library (dax::dax).
#include <dax/dax.hpp>
#include <dax/compiled/instantiations.hpp>

namespace dax {
DAX_INSTANTIATE_FLOATING_TYPE(::dax::bfloat16, )
DAX_INSTANTIATE_NN_TYPE(::dax::bfloat16, )
DAX_INSTANTIATE_CASTS_WITH_FLOAT(::dax::bfloat16, )
}  // namespace dax
