// LAPACK, as dax::linalg's batched routines call them on each
// device's whole matrices: the same factorizations ScaLAPACK runs over a grid, on one matrix in
// one process. Declared here (Fortran's symbols, as scalapack.hpp does): Debian's LAPACK has no C
// header without liblapacke-dev. The program links it (CMake: dax::linalg; by hand: -llapack
// -lblas, which Debian points at OpenBLAS when it is installed).
#pragma once

#include <complex>

extern "C" {
// The routines in the four element types (s, d, c, z): Cholesky, LU, LU solve, inverse from
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
// QR (geqrf, then the orthogonal factor: orgqr, complex ungqr) in the four types.
#define DAX_LAPACK_QR(P, T, Q)                                                                                 \
  void P##geqrf_(const int* m, const int* n, T* a, const int* lda, T* tau, T* work, const int* lwork, int* info); \
  void P##Q##_(const int* m, const int* n, const int* k, T* a, const int* lda, const T* tau, T* work,             \
               const int* lwork, int* info);
DAX_LAPACK_QR(s, float, orgqr)
DAX_LAPACK_QR(d, double, orgqr)
DAX_LAPACK_QR(c, std::complex<float>, ungqr)
DAX_LAPACK_QR(z, std::complex<double>, ungqr)
#undef DAX_LAPACK_QR
// The symmetric (Hermitian) eigensolver and the SVD: the complex ones take a real workspace too.
#define DAX_LAPACK_REAL_SPECTRAL(P, R)                                                                         \
  void P##syevd_(const char* jobz, const char* uplo, const int* n, R* a, const int* lda, R* w, R* work,           \
                 const int* lwork, int* iwork, const int* liwork, int* info);                                     \
  void P##gesvd_(const char* jobu, const char* jobvt, const int* m, const int* n, R* a, const int* lda, R* s,      \
                 R* u, const int* ldu, R* vt, const int* ldvt, R* work, const int* lwork, int* info);
#define DAX_LAPACK_COMPLEX_SPECTRAL(P, R)                                                                      \
  void P##heevd_(const char* jobz, const char* uplo, const int* n, std::complex<R>* a, const int* lda, R* w,      \
                 std::complex<R>* work, const int* lwork, R* rwork, const int* lrwork, int* iwork,               \
                 const int* liwork, int* info);                                                                   \
  void P##gesvd_(const char* jobu, const char* jobvt, const int* m, const int* n, std::complex<R>* a,             \
                 const int* lda, R* s, std::complex<R>* u, const int* ldu, std::complex<R>* vt, const int* ldvt, \
                 std::complex<R>* work, const int* lwork, R* rwork, int* info);
DAX_LAPACK_REAL_SPECTRAL(s, float)
DAX_LAPACK_REAL_SPECTRAL(d, double)
DAX_LAPACK_COMPLEX_SPECTRAL(c, float)
DAX_LAPACK_COMPLEX_SPECTRAL(z, double)
#undef DAX_LAPACK_REAL_SPECTRAL
#undef DAX_LAPACK_COMPLEX_SPECTRAL
}

namespace dax::detail::cpu {

/// The precision-generic entry points of the batched routines.
template <class T>
struct Lapack;
/// Real types: syevd; complex: heevd (and orgqr is named ungqr), with their real workspaces.
#define DAX_LAPACK_TABLE(P, T, Q, EIG)          \
  template <>                                   \
  struct Lapack<T> {                            \
    static constexpr auto potrf = P##potrf_;    \
    static constexpr auto getrf = P##getrf_;    \
    static constexpr auto getrs = P##getrs_;    \
    static constexpr auto getri = P##getri_;    \
    static constexpr auto trtrs = P##trtrs_;    \
    static constexpr auto geqrf = P##geqrf_;    \
    static constexpr auto orgqr = P##Q##_;      \
    static constexpr auto EIG = P##EIG##_;      \
    static constexpr auto gesvd = P##gesvd_;    \
  };
DAX_LAPACK_TABLE(s, float, orgqr, syevd)
DAX_LAPACK_TABLE(d, double, orgqr, syevd)
DAX_LAPACK_TABLE(c, std::complex<float>, ungqr, heevd)
DAX_LAPACK_TABLE(z, std::complex<double>, ungqr, heevd)
#undef DAX_LAPACK_TABLE

}  // namespace dax::detail::cpu
