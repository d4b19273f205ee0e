// The generic layer's view of ScaLAPACK (backend/cpu/scalapack.hpp) and of the LAPACK routines
// its batches use (backend/cpu/lapack.hpp), as fft_ops.hpp is for FFTW:
// BLACS process grids over a group's communicator, a block-cyclic matrix's descriptor, and the
// routines by element type. dax::linalg deals its matrices over these grids and calls the
// routines; that BLACS needs the group's MPI communicator is this layer's business. Kept apart
// from device_ops.hpp so that only programs that use dax::linalg declare ScaLAPACK's symbols.
#pragma once

#include <string>

#include <dax/backend/cpu/lapack.hpp>
#include <dax/backend/cpu/scalapack.hpp>
#include <dax/comm/mpi_communicator.hpp>
#include <dax/core/error.hpp>

namespace dax::detail::dev {

/// The two BLACS grids dax::linalg deals over, made from one group's processes: `normal`, rows x
/// cols in "Row" order (group rank g at (g / cols, g % cols)), and `transposed`, cols x rows in
/// "Col" order (the same process at (g % cols, g / cols)); this process's (row, col) in `normal`.
struct BlacsContexts {
  int normal = -1, transposed = -1, row = 0, col = 0;
  std::string group_name;  // as comm_stats names the group
};

inline BlacsContexts blacs_grids_init(Communicator& group, int rows, int cols) {
  auto* mpi = dynamic_cast<MpiCommunicator*>(&group);
  DAX_CHECK(mpi != nullptr, "dax::linalg: the mesh's communicator is not an MPI one (ScaLAPACK's process grids "
            "are made from one)");
  BlacsContexts made;
  made.group_name = mpi->name();
  made.normal = Csys2blacs_handle(mpi->native());
  Cblacs_gridinit(&made.normal, "Row", rows, cols);
  made.transposed = Csys2blacs_handle(mpi->native());
  Cblacs_gridinit(&made.transposed, "Col", cols, rows);
  int grid_rows = 0, grid_cols = 0;
  Cblacs_gridinfo(made.normal, &grid_rows, &grid_cols, &made.row, &made.col);
  return made;
}

inline void blacs_grid_exit(int context) { Cblacs_gridexit(context); }

/// ScaLAPACK's descriptor of an (m, n) column-major matrix in nb x nb blocks dealt from grid
/// position (0, 0) over `context`, local leading dimension `ld`. Returns descinit's info.
inline int describe(int* desc, int m, int n, int nb, int context, int ld) {
  const int zero = 0;
  int info = 0;
  descinit_(desc, &m, &n, &nb, &nb, &zero, &zero, &context, &ld, &info);
  return info;
}

/// The ScaLAPACK routines dax::linalg calls, by element type (float, double, complex64,
/// complex128).
template <class R>
using Scalapack = cpu::Scalapack<R>;

/// The LAPACK routines of dax::linalg's batches (one whole matrix in one process), by element type.
template <class T>
using Lapack = cpu::Lapack<T>;

}  // namespace dax::detail::dev
