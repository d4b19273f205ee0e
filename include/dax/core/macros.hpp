// Portability macros shared by host code and (later) CUDA kernels.
#pragma once

#if defined(__CUDACC__)
#define DAX_HOST_DEVICE __host__ __device__
#else
#define DAX_HOST_DEVICE
#endif
