// dax::DistArray<T>: one global array whose pieces live on the devices of a mesh. Each rank holds
// its own piece (or, for unreduced shardings, its partial sum of it) in a shared buffer of the
// backend's memory; arrays are immutable values, so reshards that keep a piece share the buffer.
#pragma once

#include <Eigen/Core>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <dax/backend/buffer.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/core/dtype.hpp>
#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>
#include <dax/runtime/runtime.hpp>
#include <dax/sharding/named_sharding.hpp>

namespace dax {

/// A contiguous row-major view of one local piece; keeps the piece's buffer alive. On the CUDA
/// backend data() is a device pointer: to_vector() copies the piece to the host.
template <class T>
class ShardData {
 public:
  ShardData(std::shared_ptr<detail::Buffer> buffer, int64_t size)
      : buffer_(std::move(buffer)), size_(size) {}
  const T* data() const { return buffer_ ? static_cast<const T*>(buffer_->data()) : nullptr; }
  int64_t size() const { return size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  const T& operator[](int64_t i) const { return data()[i]; }
  std::vector<T> to_vector() const { return detail::dev::download(data(), size_); }

 private:
  std::shared_ptr<detail::Buffer> buffer_;
  int64_t size_;
};

/// One piece of an array held by this process: its device, its index into the global array
/// (one [start, stop) per dimension), its replica id and its data.
template <class T>
struct Shard {
  int device;
  std::vector<Slice> index;
  int replica_id;
  ShardData<T> data;
};

template <class T>
class DistArray;

namespace detail {
template <class T>
std::vector<T> gather_to_host(const DistArray<T>& x);

template <class T>
struct is_dist_array : std::false_type {};
template <class T>
struct is_dist_array<DistArray<T>> : std::true_type {};

/// A piece stored with its last two dimensions swapped (a lazy matrix transpose): matmul hands the
/// stored piece to BLAS / cuBLAS with a transpose flag; any other reader gets the row-major copy,
/// made on first read and shared by every copy of the array.
struct SwappedPiece {
  std::shared_ptr<Buffer> row_major;
};
}  // namespace detail

template <class Elem>
class DistArray {
  static_assert(Element<Elem>, "dax::DistArray: unsupported element type");

 public:
  using value_type = Elem;
  using RowMajorMatrix = Eigen::Matrix<Elem, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vector = Eigen::Matrix<Elem, Eigen::Dynamic, 1>;

  /// An array from its parts; `local` holds this rank's piece (null on ranks outside the mesh).
  DistArray(Shape shape, NamedSharding sharding, std::shared_ptr<detail::Buffer> local)
      : shape_(std::move(shape)), sharding_(std::move(sharding)), local_(std::move(local)) {
    sharding_.check_rank(shape_);
    const int rank = Runtime::current().rank();
    if (sharding_.mesh().contains(rank)) local_index_ = sharding_.device_indices(rank, shape_);
  }

  /// An array whose piece `stored` holds its local piece with the last two dimensions swapped
  /// (internal: what transpose of the last two dimensions returns, copying nothing).
  static DistArray swapped_view(Shape shape, NamedSharding sharding, std::shared_ptr<detail::Buffer> stored) {
    DistArray x(std::move(shape), std::move(sharding), std::move(stored));
    if (x.local_) x.swapped_ = std::make_shared<detail::SwappedPiece>();
    return x;
  }

  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t size() const { return numel(shape_); }
  const NamedSharding& sharding() const { return sharding_; }
  DType dtype() const { return dtype_v<Elem>; }

  /// Whether this rank holds a piece (it is a device of the array's mesh).
  bool is_addressable() const { return static_cast<bool>(local_); }
  /// This rank's piece: one [start, stop) per dimension. local_data() views the piece in place:
  /// host memory on CPU, device memory on CUDA. local_matrix() and local_vector() map it for Eigen
  /// on the host, so they work on the CPU backend and are refused (a dax::Error) on CUDA.
  const Box& local_index() const { return local_index_; }
  Shape local_shape() const { return box_shape(local_index_); }
  int64_t local_size() const { return numel(local_index_); }
  std::span<const Elem> local_data() const {
    const auto& piece = buffer();
    return {piece ? static_cast<const Elem*>(piece->data()) : nullptr, static_cast<size_t>(piece ? local_size() : 0)};
  }

  /// The local piece's values on the host (a copy; on CPU the same as local_data()).
  std::vector<Elem> local_to_host() const { return detail::dev::download(local_data().data(), local_data().size()); }

  /// The local piece as a row-major matrix: (product of the leading dims, last dim); a 1-d piece
  /// is one row, a scalar 1x1.
  Eigen::Map<const RowMajorMatrix> local_matrix() const {
    require_host_piece("local_matrix");
    const Shape s = local_shape();
    const int64_t cols = s.empty() ? 1 : s.back();
    const int64_t rows = s.empty() ? 1 : numel(Shape(s.begin(), s.end() - 1));
    return {local_data().data(), static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols)};
  }
  /// The local piece as a flat vector.
  Eigen::Map<const Vector> local_vector() const {
    require_host_piece("local_vector");
    return {local_data().data(), static_cast<Eigen::Index>(local_data().size())};
  }

  /// The pieces this process holds (one, or none on ranks outside the mesh).
  std::vector<Shard<Elem>> addressable_shards() const {
    if (!local_) return {};
    const int rank = Runtime::current().rank();
    return {Shard<Elem>{rank, local_index_, sharding_.replica_id(rank), ShardData<Elem>(buffer(), local_size())}};
  }

  /// The array with its dimensions reversed (the spec moves with them; no communication).
  DistArray<Elem> T() const;

  /// The global (reduced) value, row-major, on every device of the mesh. Collective.
  std::vector<Elem> to_host() const { return detail::gather_to_host(*this); }

  /// The shared buffer of the local piece, row-major (internal: ops and reshards read it).
  const std::shared_ptr<detail::Buffer>& buffer() const {
    if (!swapped_) return local_;
    if (!swapped_->row_major) swapped_->row_major = materialize();
    return swapped_->row_major;
  }

  /// Whether the piece is stored with its last two dimensions swapped (see swapped_view);
  /// stored_buffer() is then that transposed piece, else the same as buffer().
  bool stores_swapped() const { return static_cast<bool>(swapped_); }
  const std::shared_ptr<detail::Buffer>& stored_buffer() const { return local_; }

  /// While a gradient is being taken: this value's node on the tape (0: not traced).
  uint64_t trace_id() const { return trace_id_; }
  void set_trace_id(uint64_t id) { trace_id_ = id; }

 private:
  /// An Eigen map reads the piece from the host: on the CUDA backend the piece is in GPU memory,
  /// where such a read would crash, so it is refused with the call that works there.
  void require_host_piece(const char* what) const {
    DAX_CHECK(detail::active_backend() != Backend::cuda, what,
              ": the local piece is in GPU memory on the CUDA backend, which an Eigen map on the host cannot "
              "read; copy it to the host with local_to_host(), or pass local_data() to device code");
  }

  std::shared_ptr<detail::Buffer> materialize() const {
    Shape stored = local_shape();
    std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
    std::vector<int> perm(stored.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    auto out = detail::dev::allocate(local_size() * sizeof(Elem));
    detail::dev::permute(static_cast<const Elem*>(local_->data()), stored, perm, static_cast<Elem*>(out->data()));
    return out;
  }

  Shape shape_;
  NamedSharding sharding_;
  std::shared_ptr<detail::Buffer> local_;  // the piece as stored
  std::shared_ptr<detail::SwappedPiece> swapped_;  // set when local_ holds the piece transposed
  Box local_index_;
  uint64_t trace_id_ = 0;
};

}  // namespace dax

#include <dax/array/reshard.hpp>  // defines gather_to_host
#include <dax/array/transpose.hpp>  // defines T()
