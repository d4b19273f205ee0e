// MPI-IO for checkpoints: RAII for MPI files and datatypes, and each rank's view of its piece in a
// file holding a C-order array (one contiguous range read or written alone, or a subarray file
// view moved collectively).
#pragma once

#include <dax/core/mpi.hpp>

#include <climits>
#include <string>
#include <vector>

#include <dax/comm/communicator.hpp>
#include <dax/comm/mpi_check.hpp>
#include <dax/core/compiled_mode.hpp>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax::detail::checkpoint {

inline std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return cat("MPI error ", code);
  return std::string(text, length);
}

/// The MPI communicator MPI-IO opens the group's files on (under a GPU transport too).
DAX_OUTLINE MPI_Comm native_comm(Communicator& c);

/// An open MPI file. Closing is collective, so it is only ever explicit: a handle still open when
/// this goes away (some ranks failed to open it) is left open rather than risk a hang.
class File {
 public:
  File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  MPI_File* out() { return &fh_; }
  MPI_File get() const { return fh_; }
  int close() { return fh_ == MPI_FILE_NULL ? MPI_SUCCESS : MPI_File_close(&fh_); }

 private:
  MPI_File fh_ = MPI_FILE_NULL;
};

class Datatype {
 public:
  Datatype() = default;
  ~Datatype() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (t_ != MPI_DATATYPE_NULL && !finalized) MPI_Type_free(&t_);
  }
  Datatype(const Datatype&) = delete;
  Datatype& operator=(const Datatype&) = delete;
  MPI_Datatype* out() { return &t_; }
  MPI_Datatype get() const { return t_; }

 private:
  MPI_Datatype t_ = MPI_DATATYPE_NULL;
};

/// How the ranks move their pieces. When every piece that moves is one contiguous range of the
/// file (row-split arrays, replicated ones), each rank reads or writes its range on its own at its
/// offset (MPI_File_write_at / read_at, overlapped with the checksum): there is nothing for
/// collective buffering to merge. Otherwise the pieces are strided in the file and the ranks move
/// them together: a file view of the global array (MPI_Type_create_subarray) and write_all /
/// read_all, which lets MPI-IO aggregate the small runs. Decided from metadata alone, so every
/// rank takes the same path.
inline bool pieces_are_contiguous(const Shape& shape, const NamedSharding& s, bool replica_zero_only) {
  const Box whole = full_box(shape);
  for (int device : s.mesh().devices()) {
    if (replica_zero_only && s.replica_id(device) != 0) continue;
    if (!is_contiguous_in(whole, s.device_indices(device, shape))) return false;
  }
  return true;
}

/// This rank's part of the transfer: `count` elements (raw bytes of sizeof(T), never converted)
/// of the region `box` of the global array; at byte `offset` of the data when independent, laid
/// out by `filetype` when collective.
struct PieceView {
  bool collective = false;
  Datatype element, filetype;
  int count = 0;
  int64_t offset = 0;  // bytes from the start of the data (independent transfers)
  int64_t first = 0;   // global flat index of the first element (independent transfers)
};

/// Built from metadata alone, so it throws on every rank alike before any file is touched.
template <class T>
void make_view(PieceView& v, const char* op, const Shape& shape, const Box& box, bool moves_data, bool collective) {
  v.collective = collective;
  mpi_check(MPI_Type_contiguous(static_cast<int>(sizeof(T)), MPI_BYTE, v.element.out()), "MPI_Type_contiguous");
  mpi_check(MPI_Type_commit(v.element.out()), "MPI_Type_commit");
  const int64_t n = moves_data ? numel(box) : 0;
  DAX_CHECK(n <= INT_MAX, op, ": the piece ", to_string(box), " of ", to_string(shape), " has ", n,
            " elements; MPI-IO moves at most ", INT_MAX, " per rank (use more ranks)");
  v.count = static_cast<int>(n);
  if (!collective) {
    v.first = n > 0 ? offset_in(full_box(shape), box) : 0;
    v.offset = v.first * static_cast<int64_t>(sizeof(T));
    return;
  }
  for (size_t d = 0; d < shape.size(); ++d)
    DAX_CHECK(shape[d] <= INT_MAX, op, ": dimension ", d, " of ", to_string(shape), " has more than ", INT_MAX,
              " elements, MPI-IO's limit for one dimension of a file view");
  if (n == 0) {
    mpi_check(MPI_Type_dup(v.element.get(), v.filetype.out()), "MPI_Type_dup");
    return;
  }
  std::vector<int> sizes(shape.begin(), shape.end()), subsizes(shape.size()), starts(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    subsizes[d] = static_cast<int>(box[d].size());
    starts[d] = static_cast<int>(box[d].start);
  }
  mpi_check(MPI_Type_create_subarray(static_cast<int>(sizes.size()), sizes.data(), subsizes.data(), starts.data(),
                                     MPI_ORDER_C, v.element.get(), v.filetype.out()),
            "MPI_Type_create_subarray");
  mpi_check(MPI_Type_commit(v.filetype.out()), "MPI_Type_commit");
}

}  // namespace dax::detail::checkpoint

#if DAX_HEADER_DEFINITIONS
#include <dax/comm/mpi_communicator.hpp>

namespace dax::detail::checkpoint {

/// The MPI communicator MPI-IO opens the group's files on (under a GPU transport too).
DAX_OUTLINE MPI_Comm native_comm(Communicator& c) {
  auto* mpi = dynamic_cast<MpiCommunicator*>(&c.host());
  DAX_CHECK(mpi != nullptr, "checkpoint: the mesh's communicator has no MPI communicator underneath");
  return mpi->native();
}

}  // namespace dax::detail::checkpoint
#endif
