// Element types dax stores, as a runtime tag (dax::DType) and its compile-time mapping.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include <dax/core/float16.hpp>

namespace dax {

enum class DType { float32, float64, int32, int64, bfloat16, float16, boolean };

inline std::string to_string(DType t) {
  switch (t) {
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
    case DType::bfloat16: return "bfloat16";
    case DType::float16: return "float16";
    case DType::boolean: return "bool";
  }
  return "?";
}

inline int64_t itemsize(DType t) {
  switch (t) {
    case DType::float32: case DType::int32: return 4;
    case DType::float64: case DType::int64: return 8;
    case DType::bfloat16: case DType::float16: return 2;
    case DType::boolean: return 1;
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

template <class T>
inline constexpr DType dtype_v = dtype_of<T>::value;

template <class T>
concept Element = requires { dtype_of<T>::value; };

}  // namespace dax
