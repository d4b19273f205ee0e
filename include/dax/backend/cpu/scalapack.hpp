// ScaLAPACK and BLACS, as the CPU backend calls them (Debian's libscalapack-openmpi: BLACS is
// inside it). Declared here rather than taken from a header: Debian ships none for ScaLAPACK.
// The program links it (CMake: dax::linalg; by hand: -lscalapack-openmpi).
#pragma once

#include <complex>

#include <dax/core/mpi.hpp>

extern "C" {
int Csys2blacs_handle(MPI_Comm comm);
void Cfree_blacs_system_handle(int handle);
void Cblacs_gridinit(int* context, const char* order, int rows, int cols);
void Cblacs_gridinfo(int context, int* rows, int* cols, int* row, int* col);
void Cblacs_gridexit(int context);
void descinit_(int* desc, const int* m, const int* n, const int* mb, const int* nb, const int* irsrc,
               const int* icsrc, const int* context, const int* lld, int* info);
void pdpotrf_(const char* uplo, const int* n, double* a, const int* ia, const int* ja, const int* desca, int* info);
void pspotrf_(const char* uplo, const int* n, float* a, const int* ia, const int* ja, const int* desca, int* info);
void pdgesv_(const int* n, const int* nrhs, double* a, const int* ia, const int* ja, const int* desca, int* ipiv,
             double* b, const int* ib, const int* jb, const int* descb, int* info);
void psgesv_(const int* n, const int* nrhs, float* a, const int* ia, const int* ja, const int* desca, int* ipiv,
             float* b, const int* ib, const int* jb, const int* descb, int* info);
void pdgetrf_(const int* m, const int* n, double* a, const int* ia, const int* ja, const int* desca, int* ipiv,
              int* info);
void psgetrf_(const int* m, const int* n, float* a, const int* ia, const int* ja, const int* desca, int* ipiv,
              int* info);
void pdgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* ia, const int* ja,
              const int* desca, const int* ipiv, double* b, const int* ib, const int* jb, const int* descb, int* info);
void psgetrs_(const char* trans, const int* n, const int* nrhs, const float* a, const int* ia, const int* ja,
              const int* desca, const int* ipiv, float* b, const int* ib, const int* jb, const int* descb, int* info);
void pdgetri_(const int* n, double* a, const int* ia, const int* ja, const int* desca, const int* ipiv, double* work,
              const int* lwork, int* iwork, const int* liwork, int* info);
void psgetri_(const int* n, float* a, const int* ia, const int* ja, const int* desca, const int* ipiv, float* work,
              const int* lwork, int* iwork, const int* liwork, int* info);
void pdsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* ia, const int* ja,
              const int* desca, double* w, double* z, const int* iz, const int* jz, const int* descz, double* work,
              const int* lwork, int* iwork, const int* liwork, int* info);
void pssyevd_(const char* jobz, const char* uplo, const int* n, float* a, const int* ia, const int* ja,
              const int* desca, float* w, float* z, const int* iz, const int* jz, const int* descz, float* work,
              const int* lwork, int* iwork, const int* liwork, int* info);
void pdgelqf_(const int* m, const int* n, double* a, const int* ia, const int* ja, const int* desca, double* tau,
              double* work, const int* lwork, int* info);
void psgelqf_(const int* m, const int* n, float* a, const int* ia, const int* ja, const int* desca, float* tau,
              float* work, const int* lwork, int* info);
void pdorglq_(const int* m, const int* n, const int* k, double* a, const int* ia, const int* ja, const int* desca,
              const double* tau, double* work, const int* lwork, int* info);
void psorglq_(const int* m, const int* n, const int* k, float* a, const int* ia, const int* ja, const int* desca,
              const float* tau, float* work, const int* lwork, int* info);
void pdgesvd_(const char* jobu, const char* jobvt, const int* m, const int* n, double* a, const int* ia, const int* ja,
              const int* desca, double* s, double* u, const int* iu, const int* ju, const int* descu, double* vt,
              const int* ivt, const int* jvt, const int* descvt, double* work, const int* lwork, int* info);
void psgesvd_(const char* jobu, const char* jobvt, const int* m, const int* n, float* a, const int* ia, const int* ja,
              const int* desca, float* s, float* u, const int* iu, const int* ju, const int* descu, float* vt,
              const int* ivt, const int* jvt, const int* descvt, float* work, const int* lwork, int* info);
void pdtrsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m, const int* n,
             const double* alpha, const double* a, const int* ia, const int* ja, const int* desca, double* b,
             const int* ib, const int* jb, const int* descb);
void pstrsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m, const int* n,
             const float* alpha, const float* a, const int* ia, const int* ja, const int* desca, float* b,
             const int* ib, const int* jb, const int* descb);
// The complex routines dax::linalg takes complex matrices to (p[cz]: complex64, complex128; the
// element pointers are C's / Fortran's complex layout, which std::complex shares).
#define DAX_SCALAPACK_COMPLEX(P, C)                                                                                   \
  void P##potrf_(const char* uplo, const int* n, C* a, const int* ia, const int* ja, const int* desca, int* info);  \
  void P##getrf_(const int* m, const int* n, C* a, const int* ia, const int* ja, const int* desca, int* ipiv,       \
                 int* info);                                                                                         \
  void P##getrs_(const char* trans, const int* n, const int* nrhs, const C* a, const int* ia, const int* ja,        \
                 const int* desca, const int* ipiv, C* b, const int* ib, const int* jb, const int* descb, int* info); \
  void P##getri_(const int* n, C* a, const int* ia, const int* ja, const int* desca, const int* ipiv, C* work,      \
                 const int* lwork, int* iwork, const int* liwork, int* info);                                       \
  void P##trsm_(const char* side, const char* uplo, const char* transa, const char* diag, const int* m,             \
                const int* n, const C* alpha, const C* a, const int* ia, const int* ja, const int* desca, C* b,     \
                const int* ib, const int* jb, const int* descb);                                    \
  void P##heevd_(const char* jobz, const char* uplo, const int* n, C* a, const int* ia, const int* ja,              \
                 const int* desca, C::value_type* w, C* z, const int* iz, const int* jz, const int* descz, C* work, \
                 const int* lwork, C::value_type* rwork, const int* lrwork, int* iwork, const int* liwork,          \
                 int* info);                                                                         \
  void P##gelqf_(const int* m, const int* n, C* a, const int* ia, const int* ja, const int* desca, C* tau, C* work, \
                 const int* lwork, int* info);                                                               \
  void P##unglq_(const int* m, const int* n, const int* k, C* a, const int* ia, const int* ja, const int* desca,    \
                 const C* tau, C* work, const int* lwork, int* info);                                        \
  void P##gesvd_(const char* jobu, const char* jobvt, const int* m, const int* n, C* a, const int* ia,             \
                 const int* ja, const int* desca, C::value_type* s, C* u, const int* iu, const int* ju,            \
                 const int* descu, C* vt, const int* ivt, const int* jvt, const int* descvt, C* work,             \
                 const int* lwork, C::value_type* rwork, int* info);
DAX_SCALAPACK_COMPLEX(pc, std::complex<float>)
DAX_SCALAPACK_COMPLEX(pz, std::complex<double>)
#undef DAX_SCALAPACK_COMPLEX
}

namespace dax::detail::cpu {

/// The precision-generic entry points dax uses.
template <class R>
struct Scalapack;
template <>
struct Scalapack<double> {
  static constexpr auto potrf = pdpotrf_;
  static constexpr auto gesv = pdgesv_;
  static constexpr auto getrf = pdgetrf_;
  static constexpr auto getrs = pdgetrs_;
  static constexpr auto trsm = pdtrsm_;
  static constexpr auto getri = pdgetri_;
  static constexpr auto syevd = pdsyevd_;
  static constexpr auto gelqf = pdgelqf_;
  static constexpr auto orglq = pdorglq_;
  static constexpr auto gesvd = pdgesvd_;
};
template <>
struct Scalapack<float> {
  static constexpr auto potrf = pspotrf_;
  static constexpr auto gesv = psgesv_;
  static constexpr auto getrf = psgetrf_;
  static constexpr auto getrs = psgetrs_;
  static constexpr auto trsm = pstrsm_;
  static constexpr auto getri = psgetri_;
  static constexpr auto syevd = pssyevd_;
  static constexpr auto gelqf = psgelqf_;
  static constexpr auto orglq = psorglq_;
  static constexpr auto gesvd = psgesvd_;
};

/// Complex matrices: the factorizations and solves, the Hermitian eigensolver (heevd, in place of
/// the real types' syevd), the LQ factorization (unglq is orglq's complex name) and the SVD (heevd
/// and gesvd take a real workspace besides the complex one).
template <>
struct Scalapack<std::complex<double>> {
  static constexpr auto potrf = pzpotrf_;
  static constexpr auto getrf = pzgetrf_;
  static constexpr auto getrs = pzgetrs_;
  static constexpr auto trsm = pztrsm_;
  static constexpr auto getri = pzgetri_;
  static constexpr auto heevd = pzheevd_;
  static constexpr auto gelqf = pzgelqf_;
  static constexpr auto orglq = pzunglq_;
  static constexpr auto gesvd = pzgesvd_;
};
template <>
struct Scalapack<std::complex<float>> {
  static constexpr auto potrf = pcpotrf_;
  static constexpr auto getrf = pcgetrf_;
  static constexpr auto getrs = pcgetrs_;
  static constexpr auto trsm = pctrsm_;
  static constexpr auto getri = pcgetri_;
  static constexpr auto heevd = pcheevd_;
  static constexpr auto gelqf = pcgelqf_;
  static constexpr auto orglq = pcunglq_;
  static constexpr auto gesvd = pcgesvd_;
};

}  // namespace dax::detail::cpu
