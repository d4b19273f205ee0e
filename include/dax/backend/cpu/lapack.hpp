// LAPACK, as dax::linalg's batched routines call them on each
// device's whole matrices: the same factorizations ScaLAPACK runs over a grid, on one matrix in
// one process. Declared here (Fortran's symbols, as scalapack.hpp does): Debian's LAPACK has no C
// header without liblapacke-dev. The program links it (CMake: dax::linalg; by hand: -llapack
// -lblas, which Debian points at OpenBLAS when it is installed).
#pragma once

#include <complex>

extern "C" {
// The five routines in the four element types (s, d, c, z): Cholesky, LU, LU solve, inverse from
// LU, and the triangular solve (LAPACK's trtrs, not BLAS's trsm, which Eigen declares itself when
// it is given BLAS). Complex elements are C's / Fortran's complex layout, as std::complex's.
#define DAX_LAPACK_ROUTINES(P, T)                                                                              \
  void P##potrf_(const char* uplo, const int* n, T* a, const int* lda, int* info);                               \
  void P##getrf_(const int* m, const int* n, T* a, const int* lda, int* ipiv, int* info);                       \
  void P##getrs_(const char* trans, const int* n, const int* nrhs, const T* a, const int* lda, const int* ipiv, \
                 T* b, const int* ldb, int* info);                                                               \
  void P##getri_(const int* n, T* a, const int* lda, const int* ipiv, T* work, const int* lwork, int* info);    \
  void P##trtrs_(const char* uplo, const char* trans, const char* diag, const int* n, const int* nrhs,           \
                 const T* a, const int* lda, T* b, const int* ldb, int* info);
DAX_LAPACK_ROUTINES(s, float)
DAX_LAPACK_ROUTINES(d, double)
DAX_LAPACK_ROUTINES(c, std::complex<float>)
DAX_LAPACK_ROUTINES(z, std::complex<double>)
#undef DAX_LAPACK_ROUTINES
}

namespace dax::detail::cpu {

/// The precision-generic entry points of the batched routines.
template <class T>
struct Lapack;
#define DAX_LAPACK_TABLE(P, T)                  \
  template <>                                   \
  struct Lapack<T> {                            \
    static constexpr auto potrf = P##potrf_;    \
    static constexpr auto getrf = P##getrf_;    \
    static constexpr auto getrs = P##getrs_;    \
    static constexpr auto getri = P##getri_;    \
    static constexpr auto trtrs = P##trtrs_;    \
  };
DAX_LAPACK_TABLE(s, float)
DAX_LAPACK_TABLE(d, double)
DAX_LAPACK_TABLE(c, std::complex<float>)
DAX_LAPACK_TABLE(z, std::complex<double>)
#undef DAX_LAPACK_TABLE

}  // namespace dax::detail::cpu
