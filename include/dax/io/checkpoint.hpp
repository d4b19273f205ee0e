// Checkpoints: dax::save writes an array as a standard NumPy .npy file (plus a sidecar with its
// checksum), each rank writing its own piece in place; dax::load reads it back into any sharding,
// each rank reading only its piece. The umbrella of the io/ files that do it, one job each:
//   coordination.hpp  how the ranks agree (strings, errors, checksums)
//   mpi_io.hpp        MPI files, datatypes and each rank's view of its piece
//   posix_file.hpp    small POSIX reads and durable writes, temporary names
//   verify.hpp        the checks that need no data (header, dtype, sidecar, size)
//   save.hpp          dax::save
//   load.hpp          dax::load
//   named_arrays.hpp  a directory of named arrays in one call
// and the files other programs write (numpy.save, numpy.savez, safetensors):
//   npy.hpp, zip.hpp, safetensors.hpp  the formats, pure
//   stored_file.hpp   what a file holds (dax::file_entries) and where
//   piece_io.hpp      each rank's piece moved with pread / pwrite
//   load_entry.hpp    dax::load(file, name, sharding), dax::load_entries
//   save_safetensors.hpp  dax::save_safetensors
#pragma once

#include <dax/io/load.hpp>
#include <dax/io/load_entry.hpp>
#include <dax/io/named_arrays.hpp>
#include <dax/io/save.hpp>
#include <dax/io/save_safetensors.hpp>
#include <dax/io/stored_file.hpp>
