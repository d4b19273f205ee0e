// The BLAS behind the CPU backend's products. Eigen hands float and double GEMM/GEMV to a BLAS when
// the program defines EIGEN_USE_BLAS; dax::dax does that and links OpenBLAS whenever CMake finds
// it (DAX_USE_BLAS, on by default), and then defines DAX_HAS_OPENBLAS=1.
//
// One BLAS thread per rank by default: a rank is one device, and ranks that each start a BLAS
// thread per core fight over the same cores. dax::Runtime calls set_default_blas_threads() at
// start, which sets OpenBLAS to one thread unless OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or
// OMP_NUM_THREADS is set (then OpenBLAS's own reading of those stands).
//
// OpenBLAS's control functions are declared here, not taken from <cblas.h>. With DAX_HAS_OPENBLAS
// they are plain declarations (the program links OpenBLAS). Without it, GCC and Clang get weak
// declarations: a program linked to OpenBLAS by hand (-lopenblas) still finds them, and one linked
// to no OpenBLAS sees null pointers and reports "none". (A weak reference alone does not keep a
// library linked with --as-needed: a hand-linked program that runs no product may lose
// libopenblas and report "BLAS"; with a product, Eigen's strong BLAS calls keep it.)
#pragma once

#include <cstdlib>
#include <string>

#if DAX_HAS_OPENBLAS
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
}
#define DAX_OPENBLAS_LINKED(fn) true
#elif defined(__GNUC__) || defined(__clang__)
extern "C" {
__attribute__((weak)) void openblas_set_num_threads(int num_threads);
__attribute__((weak)) int openblas_get_num_threads(void);
__attribute__((weak)) char* openblas_get_config(void);
}
#define DAX_OPENBLAS_LINKED(fn) (&fn != nullptr)
#else
#define DAX_OPENBLAS_LINKED(fn) false
#endif

namespace dax {

/// What runs the CPU backend's float and double products.
struct BlasInfo {
  /// "OpenBLAS" when Eigen's products go to OpenBLAS, "BLAS" for another BLAS (EIGEN_USE_BLAS
  /// without OpenBLAS), "none" when Eigen's own GEMM runs.
  std::string vendor;
  /// Threads the BLAS uses per rank (1 for Eigen's own GEMM, which dax does not thread).
  int threads = 1;
  /// OpenBLAS's build configuration (openblas_get_config()), empty otherwise.
  std::string config;
};

/// The BLAS in use in this process.
inline BlasInfo blas_info() {
  BlasInfo info;
#if defined(EIGEN_USE_BLAS)
  info.vendor = "BLAS";
#else
  info.vendor = "none";
#endif
#if defined(EIGEN_USE_BLAS) && (DAX_HAS_OPENBLAS || defined(__GNUC__) || defined(__clang__))
  if (DAX_OPENBLAS_LINKED(openblas_get_config) && DAX_OPENBLAS_LINKED(openblas_get_num_threads)) {
    info.vendor = "OpenBLAS";
    info.threads = openblas_get_num_threads();
    info.config = openblas_get_config();
  }
#endif
  return info;
}

namespace detail {
/// One OpenBLAS thread per rank unless the user chose a count through OpenBLAS's variables.
inline void set_default_blas_threads() {
#if DAX_HAS_OPENBLAS || defined(__GNUC__) || defined(__clang__)
  if (!DAX_OPENBLAS_LINKED(openblas_set_num_threads)) return;
  for (const char* var : {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"})
    if (const char* v = std::getenv(var); v != nullptr && *v != 0) return;
  openblas_set_num_threads(1);
#endif
}
}  // namespace detail

}  // namespace dax

#undef DAX_OPENBLAS_LINKED
