// The ops that take complex arrays apart and put them together, as NumPy names them: conj, real,
// imag, abs, angle, and complex(re, im) (jax.lax.complex). The arithmetic itself (+ - * /, sum,
// mean, matmul, reshard) is the ordinary ops' with T = std::complex<float | double>.
//
// Gradients follow JAX's convention: a cotangent ct of a value y pairs with a tangent dy as
// Re(sum(ct * dy)), with no conjugation. So a linear map's cotangent rule is its transpose (matmul:
// g @ B^T, multiply: g * y), and the gradient of a real loss L of complex z is
// dL/dRe(z) - i dL/dIm(z) (jax.grad(lambda z: abs(z) ** 2)(3 + 4j) == 6 - 8j).
#pragma once

#include <cmath>
#include <complex>

#include <dax/core/dtype.hpp>
#include <dax/ops/elementwise.hpp>

namespace dax {
namespace detail::fn {

struct Conj {
  template <class C>
  C operator()(C z) const { return std::conj(z); }
};
struct RealPart {
  template <class C>
  real_t<C> operator()(C z) const { return z.real(); }
};
struct ImagPart {
  template <class C>
  real_t<C> operator()(C z) const { return z.imag(); }
};
/// |z| without overflow or underflow in the square (std::abs is hypot).
struct ComplexAbs {
  template <class C>
  real_t<C> operator()(C z) const { return std::abs(z); }
};
/// The argument in (-pi, pi], atan2(imag, real), as numpy.angle.
struct Angle {
  template <class C>
  real_t<C> operator()(C z) const { return std::arg(z); }
};
struct MakeComplex {
  template <class R>
  std::complex<R> operator()(R re, R im) const { return {re, im}; }
};
/// The cotangents (module comment): of real(z), g + 0i; of imag(z), -i g; of |z|, g conj(z) / |z|
/// (0 at z = 0, as JAX); of angle(z), -i g conj(z) / |z|^2 (0 at z = 0); of complex(re, im), re
/// gets Re(g) and im gets -Im(g).
struct RealGrad {
  template <class R>
  std::complex<R> operator()(R g) const { return {g, R(0)}; }
};
struct ImagGrad {
  template <class R>
  std::complex<R> operator()(R g) const { return {R(0), -g}; }
};
struct AbsGrad {
  template <class R>
  std::complex<R> operator()(R g, std::complex<R> z) const {
    const R r = std::abs(z);
    return r == R(0) ? std::complex<R>(0) : g * std::conj(z) / r;
  }
};
struct AngleGrad {
  template <class R>
  std::complex<R> operator()(R g, std::complex<R> z) const {
    const R r2 = std::norm(z);
    return r2 == R(0) ? std::complex<R>(0) : std::complex<R>(R(0), -g) * std::conj(z) / r2;
  }
};
/// conj(z) * w (an FFT's c2r cotangent: the spectrum conjugated and its bins weighted).
struct ConjTimes {
  template <class C>
  C operator()(C z, C w) const { return std::conj(z) * w; }
};
struct NegImagPart {
  template <class C>
  real_t<C> operator()(C z) const { return -z.imag(); }
};

}  // namespace detail::fn

/// The complex conjugate. Linear over the reals, so partial sums stay unreduced through it.
template <class T>
  requires detail::is_complex_v<T>
DistArray<T> conj(const DistArray<T>& z) {
  auto out = detail::map<T>(detail::Linearity::additive, detail::fn::Conj{}, z);
  detail::record("conj", out, [&](auto) {
    return [](const DistArray<T>& g) { return detail::Cotangents{detail::AnyArray(conj(g))}; };
  }, z);
  return out;
}

/// The real part, in the component type (complex64 -> float32).
template <class T>
  requires detail::is_complex_v<T>
DistArray<detail::real_t<T>> real(const DistArray<T>& z) {
  using R = detail::real_t<T>;
  auto out = detail::map<R>(detail::Linearity::additive, detail::fn::RealPart{}, z);
  detail::record("real", out, [&](auto) {
    return [](const DistArray<R>& g) {
      return detail::Cotangents{detail::AnyArray(detail::map<T>(detail::Linearity::additive, detail::fn::RealGrad{}, g))};
    };
  }, z);
  return out;
}

/// The imaginary part, in the component type.
template <class T>
  requires detail::is_complex_v<T>
DistArray<detail::real_t<T>> imag(const DistArray<T>& z) {
  using R = detail::real_t<T>;
  auto out = detail::map<R>(detail::Linearity::additive, detail::fn::ImagPart{}, z);
  detail::record("imag", out, [&](auto) {
    return [](const DistArray<R>& g) {
      return detail::Cotangents{detail::AnyArray(detail::map<T>(detail::Linearity::additive, detail::fn::ImagGrad{}, g))};
    };
  }, z);
  return out;
}

/// The modulus |z|, in the component type.
template <class T>
  requires detail::is_complex_v<T>
DistArray<detail::real_t<T>> abs(const DistArray<T>& z) {
  using R = detail::real_t<T>;
  auto out = detail::map<R>(detail::Linearity::none, detail::fn::ComplexAbs{}, z);
  detail::record("abs", out, [&](auto) {
    return [z](const DistArray<R>& g) {
      return detail::Cotangents{detail::AnyArray(detail::map<T>(detail::Linearity::scaling, detail::fn::AbsGrad{}, g, z))};
    };
  }, z);
  return out;
}

/// The argument in (-pi, pi], in the component type (numpy.angle in radians).
template <class T>
  requires detail::is_complex_v<T>
DistArray<detail::real_t<T>> angle(const DistArray<T>& z) {
  using R = detail::real_t<T>;
  auto out = detail::map<R>(detail::Linearity::none, detail::fn::Angle{}, z);
  detail::record("angle", out, [&](auto) {
    return [z](const DistArray<R>& g) {
      return detail::Cotangents{detail::AnyArray(detail::map<T>(detail::Linearity::scaling, detail::fn::AngleGrad{}, g, z))};
    };
  }, z);
  return out;
}

/// re + i im elementwise, broadcasting (jax.lax.complex): float32 parts give complex64, float64
/// parts complex128.
template <class R>
  requires std::is_same_v<R, float> || std::is_same_v<R, double>
DistArray<std::complex<R>> complex(const DistArray<R>& re, const DistArray<R>& im) {
  using C = std::complex<R>;
  auto out = detail::map<C>(detail::Linearity::additive, detail::fn::MakeComplex{}, re, im);
  detail::record("complex", out, [&](auto need) {
    return [need, rs = re.shape(), is = im.shape()](const DistArray<C>& g) {
      return detail::Cotangents{
          need[0] ? detail::AnyArray(detail::sum_to(detail::map<R>(detail::Linearity::additive, detail::fn::RealPart{}, g), rs))
                  : detail::AnyArray(),
          need[1] ? detail::AnyArray(detail::sum_to(detail::map<R>(detail::Linearity::additive, detail::fn::NegImagPart{}, g), is))
                  : detail::AnyArray()};
    };
  }, re, im);
  return out;
}

}  // namespace dax
