// The ops that take complex arrays apart and put them together, as NumPy names them: conj, real,
// imag, abs, angle, and complex(re, im) (jax.lax.complex). The arithmetic itself (+ - * /, sum,
// mean, matmul, reshard) is the ordinary ops' with T = std::complex<float | double>. Complex
// arrays carry no gradients yet (JAX's convention for them is docs/element_types.md's open item).
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

}  // namespace detail::fn

/// The complex conjugate. Linear over the reals, so partial sums stay unreduced through it.
template <class T>
  requires detail::is_complex_v<T>
DistArray<T> conj(const DistArray<T>& z) {
  auto out = detail::map<T>(detail::Linearity::additive, detail::fn::Conj{}, z);
  detail::record_typing("conj", out, z);
  return out;
}

/// The real part, in the component type (complex64 -> float32).
template <class T>
  requires detail::is_complex_v<T>
DistArray<detail::real_t<T>> real(const DistArray<T>& z) {
  auto out = detail::map<detail::real_t<T>>(detail::Linearity::additive, detail::fn::RealPart{}, z);
  detail::record_typing("real", out, z);
  return out;
}

/// The imaginary part, in the component type.
template <class T>
  requires detail::is_complex_v<T>
DistArray<detail::real_t<T>> imag(const DistArray<T>& z) {
  auto out = detail::map<detail::real_t<T>>(detail::Linearity::additive, detail::fn::ImagPart{}, z);
  detail::record_typing("imag", out, z);
  return out;
}

/// The modulus |z|, in the component type.
template <class T>
  requires detail::is_complex_v<T>
DistArray<detail::real_t<T>> abs(const DistArray<T>& z) {
  auto out = detail::map<detail::real_t<T>>(detail::Linearity::none, detail::fn::ComplexAbs{}, z);
  detail::record_typing("abs", out, z);
  return out;
}

/// The argument in (-pi, pi], in the component type (numpy.angle in radians).
template <class T>
  requires detail::is_complex_v<T>
DistArray<detail::real_t<T>> angle(const DistArray<T>& z) {
  auto out = detail::map<detail::real_t<T>>(detail::Linearity::none, detail::fn::Angle{}, z);
  detail::record_typing("angle", out, z);
  return out;
}

/// re + i im elementwise, broadcasting (jax.lax.complex): float32 parts give complex64, float64
/// parts complex128.
template <class R>
  requires std::is_same_v<R, float> || std::is_same_v<R, double>
DistArray<std::complex<R>> complex(const DistArray<R>& re, const DistArray<R>& im) {
  detail::no_gradient("complex", re, im);  // a complex cotangent is not defined yet: never a silent zero
  return detail::map<std::complex<R>>(detail::Linearity::additive, detail::fn::MakeComplex{}, re, im);
}

}  // namespace dax
