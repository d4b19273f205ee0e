// dax's dense linear algebra on sharded matrices (numpy.linalg's names): cholesky, solve,
// triangular_solve, inv, slogdet / det, eigh, qr, svd, norm; docs/numerics.md. Include it beside dax.hpp; the program links ScaLAPACK
// (CMake: dax::linalg; by hand: -lscalapack-openmpi).
#pragma once

#include <dax/array.hpp>
#include <dax/linalg/decompositions.hpp>
#include <dax/linalg/linalg.hpp>
#include <dax/linalg/norm.hpp>
