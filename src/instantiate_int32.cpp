// The ops of compiled/instantiations.hpp for int32, compiled once into dax's library (dax::dax).
#include <dax/dax.hpp>
#include <dax/compiled/instantiations.hpp>

namespace dax {
DAX_INSTANTIATE_ANY_TYPE(int32_t, )
}  // namespace dax
