// The ops that dax's compiled library instantiates once per element type (src/instantiate_*.cpp),
// as lists of explicit instantiations. A program built through CMake's dax::dax sees them as
// `extern template` declarations (DAX_COMPILED_LIBRARY: compiled/extern_array_ops.hpp and
// extern_nn.hpp), so its own translation units instantiate and optimize none of them again;
// header-only use never sees this.
// Each macro takes the element type T and EXTERN: `extern` to declare, nothing to instantiate.
#pragma once

// Every element type: creation, movement, shape ops, the arithmetic and the reductions that need
// no floating point.
#define DAX_INSTANTIATE_ANY_TYPE(T, EXTERN)                                                                 \
  EXTERN template class DistArray<T>;                                                                       \
  EXTERN template DistArray<T> device_put<T>(std::span<const T>, const Shape&, const NamedSharding&);      \
  EXTERN template DistArray<T> device_put<T>(const std::vector<T>&, const Shape&, const NamedSharding&);    \
  EXTERN template DistArray<T> device_put<T>(const DistArray<T>&, const NamedSharding&);                   \
  EXTERN template DistArray<T> from_local<T>(std::span<const T>, const Shape&, const NamedSharding&);      \
  EXTERN template DistArray<T> from_local<T>(const std::vector<T>&, const Shape&, const NamedSharding&);   \
  EXTERN template DistArray<T> full<T>(const Shape&, T, const NamedSharding&);                             \
  EXTERN template DistArray<T> zeros<T>(const Shape&, const NamedSharding&);                               \
  EXTERN template DistArray<T> ones<T>(const Shape&, const NamedSharding&);                                \
  EXTERN template DistArray<T> arange<T>(const Shape&, const NamedSharding&);                              \
  EXTERN template DistArray<T> arange<T>(int64_t, const NamedSharding&);                                   \
  EXTERN template DistArray<T> reshard<T>(const DistArray<T>&, const NamedSharding&, SourceLine);           \
  EXTERN template DistArray<T> detail::reshard_untraced<T>(const DistArray<T>&, const NamedSharding&);     \
  EXTERN template DistArray<T> detail::moved_to<T>(const DistArray<T>&, const NamedSharding&);             \
  EXTERN template std::vector<T> detail::gather_to_host<T>(const DistArray<T>&);                           \
  EXTERN template DistArray<T> with_sharding_constraint<T>(const DistArray<T>&, const NamedSharding&);     \
  EXTERN template DistArray<T> transpose<T>(const DistArray<T>&, std::vector<int>);                        \
  EXTERN template DistArray<T> reshape<T>(const DistArray<T>&, Shape);                                     \
  EXTERN template DistArray<T> expand_dims<T>(const DistArray<T>&, int);                                   \
  EXTERN template DistArray<T> squeeze<T>(const DistArray<T>&, std::vector<int>);                          \
  EXTERN template DistArray<T> broadcast_to<T>(const DistArray<T>&, const Shape&);                         \
  EXTERN template DistArray<T> slice<T>(const DistArray<T>&, const std::vector<int64_t>&,                  \
                                        const std::vector<int64_t>&, std::vector<int64_t>);                \
  EXTERN template DistArray<T> concatenate<T>(const std::vector<DistArray<T>>&, int);                      \
  EXTERN template DistArray<T> stack<T>(const std::vector<DistArray<T>>&, int);                            \
  EXTERN template DistArray<T> add<T>(const DistArray<T>&, const DistArray<T>&);                           \
  EXTERN template DistArray<T> subtract<T>(const DistArray<T>&, const DistArray<T>&);                      \
  EXTERN template DistArray<T> multiply<T>(const DistArray<T>&, const DistArray<T>&);                      \
  EXTERN template DistArray<T> divide<T>(const DistArray<T>&, const DistArray<T>&);                        \
  EXTERN template DistArray<T> maximum<T>(const DistArray<T>&, const DistArray<T>&);                       \
  EXTERN template DistArray<T> minimum<T>(const DistArray<T>&, const DistArray<T>&);                       \
  EXTERN template DistArray<T> where<T>(const DistArray<bool>&, const DistArray<T>&, const DistArray<T>&); \
  EXTERN template DistArray<T> neg<T>(const DistArray<T>&);                                                \
  EXTERN template DistArray<T> abs<T>(const DistArray<T>&);                                                \
  EXTERN template DistArray<T> square<T>(const DistArray<T>&);                                             \
  EXTERN template DistArray<T> relu<T>(const DistArray<T>&);                                               \
  EXTERN template DistArray<T> detail::add_scalar<T>(const DistArray<T>&, T);                              \
  EXTERN template DistArray<T> detail::subtract_scalar<T>(const DistArray<T>&, T);                         \
  EXTERN template DistArray<T> detail::scalar_subtract<T>(T, const DistArray<T>&);                         \
  EXTERN template DistArray<T> detail::multiply_scalar<T>(const DistArray<T>&, T);                         \
  EXTERN template DistArray<T> detail::divide_scalar<T>(const DistArray<T>&, T);                           \
  EXTERN template DistArray<T> detail::scalar_divide<T>(T, const DistArray<T>&);                           \
  EXTERN template DistArray<T> detail::maximum_scalar<T>(const DistArray<T>&, T);                          \
  EXTERN template DistArray<T> detail::minimum_scalar<T>(const DistArray<T>&, T);                          \
  EXTERN template DistArray<T> sum<T>(const DistArray<T>&, const std::vector<int>&, bool,                  \
                                      const std::optional<NamedSharding>&);                                \
  EXTERN template DistArray<T> mean<T>(const DistArray<T>&, const std::vector<int>&, bool,                 \
                                       const std::optional<NamedSharding>&);                               \
  EXTERN template DistArray<T> max<T>(const DistArray<T>&, const std::vector<int>&, bool);                 \
  EXTERN template DistArray<T> min<T>(const DistArray<T>&, const std::vector<int>&, bool);                 \
  EXTERN template DistArray<T> detail::sum_to<T>(const DistArray<T>&, const Shape&);                       \
  EXTERN template DistArray<int64_t> argmax<T>(const DistArray<T>&, int, bool);                            \
  EXTERN template DistArray<int64_t> argmin<T>(const DistArray<T>&, int, bool);                            \
  EXTERN template DistArray<T> matmul<T>(const DistArray<T>&, const DistArray<T>&,                         \
                                         const std::optional<NamedSharding>&);                             \
  EXTERN template DistArray<T> einsum<T>(const std::string&, const DistArray<T>&, const DistArray<T>&);    \
  EXTERN template DistArray<T>& operator+= <T>(DistArray<T>&, const DistArray<T>&);                        \
  EXTERN template DistArray<T>& operator-= <T>(DistArray<T>&, const DistArray<T>&);                        \
  EXTERN template DistArray<T>& operator*= <T>(DistArray<T>&, const DistArray<T>&);                        \
  EXTERN template DistArray<T>& operator/= <T>(DistArray<T>&, const DistArray<T>&);

// Floating types only: the transcendental functions and their reductions.
#define DAX_INSTANTIATE_FLOATING_TYPE(T, EXTERN)                                                            \
  DAX_INSTANTIATE_ANY_TYPE(T, EXTERN)                                                                       \
  EXTERN template DistArray<T> exp<T>(const DistArray<T>&);                                                 \
  EXTERN template DistArray<T> log<T>(const DistArray<T>&);                                                 \
  EXTERN template DistArray<T> sqrt<T>(const DistArray<T>&);                                                \
  EXTERN template DistArray<T> rsqrt<T>(const DistArray<T>&);                                               \
  EXTERN template DistArray<T> tanh<T>(const DistArray<T>&);                                                \
  EXTERN template DistArray<T> sigmoid<T>(const DistArray<T>&);                                             \
  EXTERN template DistArray<T> gelu<T>(const DistArray<T>&);                                                \
  EXTERN template DistArray<T> gelu<T>(const DistArray<T>&, bool);                                          \
  EXTERN template DistArray<T> silu<T>(const DistArray<T>&);                                                \
  EXTERN template DistArray<T> logsumexp<T>(const DistArray<T>&, const std::vector<int>&, bool);            \
  EXTERN template DistArray<T> softmax<T>(const DistArray<T>&, int);                                        \
  EXTERN template DistArray<T> log_softmax<T>(const DistArray<T>&, int);                                    \
  EXTERN template DistArray<T> random::uniform<T>(const random::Key&, const Shape&, const NamedSharding&,   \
                                                  T, T);                                                    \
  EXTERN template DistArray<T> random::normal<T>(const random::Key&, const Shape&, const NamedSharding&,    \
                                                 T, T);

// The layers of nn/ (floating types).
#define DAX_INSTANTIATE_NN_TYPE(T, EXTERN)                                                                  \
  EXTERN template DistArray<T> layer_norm<T>(const DistArray<T>&, const DistArray<T>&, const DistArray<T>&, \
                                             double);                                                       \
  EXTERN template DistArray<T> rms_norm<T>(const DistArray<T>&, const DistArray<T>&, double);               \
  EXTERN template DistArray<T> cross_entropy<T, int32_t>(const DistArray<T>&, const DistArray<int32_t>&);   \
  EXTERN template DistArray<T> cross_entropy<T, int64_t>(const DistArray<T>&, const DistArray<int64_t>&);   \
  EXTERN template DistArray<T> dropout<T>(const random::Key&, const DistArray<T>&, double);                 \
  EXTERN template DistArray<T> masked_softmax<T>(const DistArray<T>&, const DistArray<bool>&);               \
  EXTERN template DistArray<T> causal_softmax<T>(const DistArray<T>&, double);                              \
  EXTERN template DistArray<T> dot_product_attention<T>(const DistArray<T>&, const DistArray<T>&,           \
                                                        const DistArray<T>&, const AttentionOptions&);

// Mixed precision (a float32 master copy and a 16-bit or float64 type T): the conversions both
// ways, and the moves in T's bytes (cast_reshard, reshard_in; ops/cast_reshard.hpp).
#define DAX_INSTANTIATE_CASTS_WITH_FLOAT(T, EXTERN)                                                         \
  EXTERN template DistArray<T> astype<T, float>(const DistArray<float>&);                                   \
  EXTERN template DistArray<float> astype<float, T>(const DistArray<T>&);                                   \
  EXTERN template DistArray<T> cast_reshard<T, float>(const DistArray<float>&, const NamedSharding&);       \
  EXTERN template DistArray<float> reshard_in<T, void, float>(const DistArray<float>&, const NamedSharding&); \
  EXTERN template DistArray<float> reshard_in<T, T, float>(const DistArray<float>&, const NamedSharding&);

// The element types of DESIGN.md: the array ops (array.hpp) and the layers (nn/nn.hpp).
#define DAX_FOR_EACH_ARRAY_INSTANTIATION(EXTERN)         \
  DAX_INSTANTIATE_FLOATING_TYPE(float, EXTERN)           \
  DAX_INSTANTIATE_FLOATING_TYPE(double, EXTERN)          \
  DAX_INSTANTIATE_FLOATING_TYPE(::dax::bfloat16, EXTERN) \
  DAX_INSTANTIATE_FLOATING_TYPE(::dax::half, EXTERN)     \
  DAX_INSTANTIATE_ANY_TYPE(int32_t, EXTERN)              \
  DAX_INSTANTIATE_ANY_TYPE(int64_t, EXTERN)              \
  DAX_INSTANTIATE_CASTS_WITH_FLOAT(double, EXTERN)       \
  DAX_INSTANTIATE_CASTS_WITH_FLOAT(::dax::bfloat16, EXTERN) \
  DAX_INSTANTIATE_CASTS_WITH_FLOAT(::dax::half, EXTERN)
#define DAX_FOR_EACH_NN_INSTANTIATION(EXTERN)      \
  DAX_INSTANTIATE_NN_TYPE(float, EXTERN)           \
  DAX_INSTANTIATE_NN_TYPE(double, EXTERN)          \
  DAX_INSTANTIATE_NN_TYPE(::dax::bfloat16, EXTERN) \
  DAX_INSTANTIATE_NN_TYPE(::dax::half, EXTERN)
