// <mpi.h> for dax: without MPI's C++ bindings. dax uses only MPI's C API; the C++ bindings (removed
// from the standard in MPI-3) cost a third of what <mpi.h> costs a translation unit and give
// deprecation warnings under -Wall -Wextra in users' programs (Open MPI's). Every dax header that
// needs MPI includes this one instead of <mpi.h>; a program that wants the bindings includes <mpi.h>
// before dax.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
