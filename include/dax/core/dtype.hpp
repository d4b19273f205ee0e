// Element types dax stores, as a runtime tag (dax::DType) and its compile-time mapping.
#pragma once

#include <complex>
#include <cstdint>
#include <string>
#include <type_traits>

#include <dax/core/float16.hpp>

namespace dax {

enum class DType { float32, float64, int32, int64, bfloat16, float16, boolean, complex64, complex128 };

inline std::string to_string(DType t) {
  switch (t) {
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
    case DType::bfloat16: return "bfloat16";
    case DType::float16: return "float16";
    case DType::boolean: return "bool";
    case DType::complex64: return "complex64";
    case DType::complex128: return "complex128";
  }
  return "?";
}

inline int64_t itemsize(DType t) {
  switch (t) {
    case DType::float32: case DType::int32: return 4;
    case DType::float64: case DType::int64: return 8;
    case DType::bfloat16: case DType::float16: return 2;
    case DType::boolean: return 1;
    case DType::complex64: return 8;
    case DType::complex128: return 16;
  }
  return 0;
}

template <class T>
struct dtype_of;  // defined for the element types dax supports; others fail to compile
template <> struct dtype_of<float> { static constexpr DType value = DType::float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::float64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::int32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::int64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <> struct dtype_of<half> { static constexpr DType value = DType::float16; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::bfloat16; };
template <> struct dtype_of<std::complex<float>> { static constexpr DType value = DType::complex64; };
template <> struct dtype_of<std::complex<double>> { static constexpr DType value = DType::complex128; };

/// NumPy's names for the complex element types: a pair of float32 or float64 (real, imaginary),
/// laid out as C's and Fortran's complex types are, which is what BLAS, FFTW and MPI read.
using complex64 = std::complex<float>;
using complex128 = std::complex<double>;

namespace detail {

template <class T>
inline constexpr bool is_complex_v = false;
template <class R>
inline constexpr bool is_complex_v<std::complex<R>> = true;

/// The element types gradients flow through: the floating ones and the complex ones (JAX's
/// convention for complex cotangents: docs/autodiff.md).
template <class T>
inline constexpr bool is_differentiable_v = is_floating_v<T> || is_complex_v<T>;

/// The real type of an element: R for std::complex<R>, T itself otherwise.
template <class T>
struct real_of { using type = T; };
template <class R>
struct real_of<std::complex<R>> { using type = R; };
template <class T>
using real_t = typename real_of<T>::type;

}  // namespace detail

template <class T>
inline constexpr DType dtype_v = dtype_of<T>::value;

template <class T>
concept Element = requires { dtype_of<T>::value; };

}  // namespace dax
