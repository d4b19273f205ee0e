// The elementwise and reduction functions of dax's ops as small function objects. They are
// DAX_HOST_DEVICE so the same object runs in the CPU loops and in the CUDA kernels, and
// trivially copyable so a kernel can take it by value. Scalars bind with BindRight / BindLeft.
// Arithmetic runs in compute_t<T> (float for the 16-bit types), rounded once to the result.
#pragma once

#include <cmath>

#include <dax/core/float16.hpp>
#include <dax/core/macros.hpp>
#include <dax/core/float_math.hpp>

namespace dax::detail::fn {

#define DAX_BINARY_FN(Name, expr)                                      \
  struct Name {                                                        \
    template <class T>                                                 \
    DAX_HOST_DEVICE T operator()(T a, T b) const {                     \
      using C = compute_t<T>;                                          \
      const C x = static_cast<C>(a), y = static_cast<C>(b);            \
      return static_cast<T>(expr);                                     \
    }                                                                  \
  };
DAX_BINARY_FN(Add, x + y)
DAX_BINARY_FN(Subtract, x - y)
DAX_BINARY_FN(Multiply, x * y)
DAX_BINARY_FN(Divide, x / y)
DAX_BINARY_FN(Pow, std::pow(x, y))
DAX_BINARY_FN(Maximum, x > y ? x : y)
DAX_BINARY_FN(Minimum, x < y ? x : y)
#undef DAX_BINARY_FN

#define DAX_COMPARE_FN(Name, op)                                          \
  struct Name {                                                           \
    template <class T>                                                    \
    DAX_HOST_DEVICE bool operator()(T x, T y) const {                     \
      return static_cast<compute_t<T>>(x) op static_cast<compute_t<T>>(y); \
    }                                                                     \
  };
DAX_COMPARE_FN(Equal, ==)
DAX_COMPARE_FN(NotEqual, !=)
DAX_COMPARE_FN(Less, <)
DAX_COMPARE_FN(LessEqual, <=)
DAX_COMPARE_FN(Greater, >)
DAX_COMPARE_FN(GreaterEqual, >=)
#undef DAX_COMPARE_FN

#define DAX_UNARY_FN(Name, expr)                                  \
  struct Name {                                                   \
    template <class T>                                            \
    DAX_HOST_DEVICE T operator()(T value) const {                 \
      using C = compute_t<T>;                                     \
      const C v = static_cast<C>(value);                          \
      return static_cast<T>(expr);                                \
    }                                                             \
  };
DAX_UNARY_FN(Identity, v)
DAX_UNARY_FN(Negate, -v)
DAX_UNARY_FN(Abs, v < C(0) ? C(-v) : v)
DAX_UNARY_FN(Square, v * v)
DAX_UNARY_FN(Relu, v > C(0) ? v : C(0))
DAX_UNARY_FN(Exp, std::exp(v))
DAX_UNARY_FN(Log, std::log(v))
DAX_UNARY_FN(Sqrt, std::sqrt(v))
DAX_UNARY_FN(Rsqrt, C(1) / std::sqrt(v))
DAX_UNARY_FN(Sin, std::sin(v))
DAX_UNARY_FN(Cos, std::cos(v))
DAX_UNARY_FN(Tanh, fast_tanh(v))
DAX_UNARY_FN(Sigmoid, C(1) / (C(1) + std::exp(-v)))
// The tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
DAX_UNARY_FN(Gelu, C(0.5) * v * (C(1) + fast_tanh(C(0.7978845608028654) * (v + C(0.044715) * v * v * v))))
// The exact (erf) form, as jax.nn.gelu(x, approximate=False) and PyTorch's default: 0.5 x (1 + erf(x / sqrt 2)).
DAX_UNARY_FN(GeluErf, C(0.5) * v * (C(1) + std::erf(v * C(0.7071067811865476))))
// silu (swish): x sigmoid(x) = x / (1 + exp(-x)).
DAX_UNARY_FN(Silu, v / (C(1) + std::exp(-v)))
#undef DAX_UNARY_FN

/// cond ? x : y.
struct Where {
  template <class T>
  DAX_HOST_DEVICE T operator()(bool cond, T x, T y) const { return cond ? x : y; }
};

/// One-hot: U(1) where the id equals the column, else U(0) (ids and columns of one integer type).
template <class U>
struct OneHot {
  template <class I>
  DAX_HOST_DEVICE U operator()(I id, I column) const { return id == column ? U(1) : U(0); }
};

/// The value converted to U.
template <class U>
struct Cast {
  template <class T>
  DAX_HOST_DEVICE U operator()(T v) const { return static_cast<U>(v); }
};

/// f(x, value): an array op a scalar.
template <class F, class T>
struct BindRight {
  T value;
  DAX_HOST_DEVICE auto operator()(T x) const { return F{}(x, value); }
};

/// f(value, x): a scalar op an array.
template <class F, class T>
struct BindLeft {
  T value;
  DAX_HOST_DEVICE auto operator()(T x) const { return F{}(value, x); }
};

}  // namespace dax::detail::fn
