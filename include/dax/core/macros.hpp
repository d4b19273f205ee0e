// Portability macros shared by host code and CUDA kernels.
#pragma once

#if defined(__CUDACC__)
#define DAX_HOST_DEVICE __host__ __device__
#else
#define DAX_HOST_DEVICE
#endif

// Inlined whatever the compiler's size heuristics say: for small math functions whose callers'
// loops vectorize only with them inlined (core/float_math.hpp).
#if defined(__GNUC__) || defined(__clang__)
#define DAX_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define DAX_ALWAYS_INLINE inline
#endif

// 1 where the CUDA backend is compiled in: the translation unit is compiled by nvcc and the build
// asked for CUDA (the dax::dax_cuda target defines DAX_HAS_CUDA). A g++ build never sees CUDA code.
#if defined(__CUDACC__) && defined(DAX_HAS_CUDA)
#define DAX_CUDA_BACKEND 1
#else
#define DAX_CUDA_BACKEND 0
#endif
