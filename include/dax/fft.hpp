// dax's FFTs on sharded arrays (numpy.fft's names): fft / ifft / rfft / irfft along one axis,
// fftn / ifftn / rfftn / irfftn over several; docs/numerics.md. Include it beside dax.hpp; the
// program links FFTW (CMake: dax::fft; by hand: -lfftw3 -lfftw3f).
#pragma once

#include <dax/array.hpp>
#include <dax/fft/fft.hpp>
