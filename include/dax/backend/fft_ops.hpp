// The generic layer's view of the local FFT kernels (backend/cpu/fft.hpp), as device_ops.hpp is for
// the other kernels: run on the live runtime's backend, counted and skipped on the meta one. Kept
// apart from device_ops.hpp so that only programs that use dax::fft include FFTW's header.
#pragma once

#include <cmath>
#include <complex>
#include <vector>

#include <dax/backend/cpu/fft.hpp>
#include <dax/backend/device_ops.hpp>

namespace dax::detail::dev {

/// On the meta backend: one kernel and 5 n log2 n flops per transform of n points (the usual FFT
/// count, complex), none of the work. Returns true there.
inline bool skip_fft_on_meta(const Shape& shape) {
  if (!on_meta()) return false;
  ++meta::kernel_counts().kernels;
  const double n = double(numel(shape));
  if (n > 1) meta::kernel_counts().gemm_flops += 5.0 * n * std::log2(n);
  return true;
}

inline void no_fft_on_gpu() {
  DAX_CHECK(!on_gpu(), "dax::fft: the CUDA backend has no FFT yet (cuFFT is planned); run with DAX_BACKEND=cpu");
}

/// `replicated`: other devices hold copies of this piece (their results must round alike).
template <class R>
void fft_c2c(const std::complex<R>* in, std::complex<R>* out, const Shape& shape, const std::vector<int>& axes,
             bool forward, bool replicated) {
  if (skip_fft_on_meta(shape)) return;
  no_fft_on_gpu();
  const cpu::FftPlanningScope planning(replicated);
  cpu::fft_c2c(in, out, shape, axes, forward);
}

template <class R>
void fft_r2c(const R* in, const Shape& in_shape, std::complex<R>* out, const Shape& out_shape,
             const std::vector<int>& axes, bool replicated) {
  if (skip_fft_on_meta(in_shape)) return;
  no_fft_on_gpu();
  const cpu::FftPlanningScope planning(replicated);
  cpu::fft_r2c(in, in_shape, out, out_shape, axes);
}

template <class R>
void fft_c2r(std::complex<R>* in, const Shape& in_shape, R* out, const Shape& out_shape, const std::vector<int>& axes,
             bool replicated) {
  if (skip_fft_on_meta(out_shape)) return;
  no_fft_on_gpu();
  const cpu::FftPlanningScope planning(replicated);
  cpu::fft_c2r(in, in_shape, out, out_shape, axes);
}

/// data[i] *= factor over `count` elements (the transform's normalisation).
template <class T, class R>
void scale(T* data, int64_t count, R factor) {
  if (on_meta() || factor == R(1)) return;
  no_fft_on_gpu();
  for (int64_t i = 0; i < count; ++i) data[i] *= factor;
}

}  // namespace dax::detail::dev
