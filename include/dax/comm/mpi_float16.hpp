// MPI has no 16-bit floating types: dax::half and dax::bfloat16 travel as 2-byte derived datatypes,
// and reductions over them use user-defined ops that compute each element in float and round it
// back (as NCCL does for its 16-bit types). Made once, on first use after MPI_Init; MPI_Finalize
// frees them.
#pragma once

#include <dax/core/mpi.hpp>

#include <array>

#include <dax/comm/communicator.hpp>
#include <dax/comm/mpi_check.hpp>
#include <dax/core/float16.hpp>

namespace dax::detail {

struct MpiFloat16 {
  MPI_Datatype half = MPI_DATATYPE_NULL, bfloat16 = MPI_DATATYPE_NULL;
  std::array<MPI_Op, 4> ops{};  // indexed by ReduceOp

  static const MpiFloat16& get() {
    static const MpiFloat16 made = make();
    return made;
  }

 private:
  template <class T, class F>
  static void fold_as(const void* in, void* inout, int count, F f) {
    const T* a = static_cast<const T*>(in);
    T* b = static_cast<T*>(inout);
    for (int i = 0; i < count; ++i) b[i] = static_cast<T>(f(static_cast<float>(a[i]), static_cast<float>(b[i])));
  }

  template <ReduceOp Op>
  static void fold(void* in, void* inout, int* count, MPI_Datatype* type) {
    const auto f = [](float a, float b) {
      if constexpr (Op == ReduceOp::sum) return a + b;
      if constexpr (Op == ReduceOp::prod) return a * b;
      if constexpr (Op == ReduceOp::max) return a > b ? a : b;
      if constexpr (Op == ReduceOp::min) return a < b ? a : b;
    };
    if (*type == get().half)
      fold_as<dax::half>(in, inout, *count, f);
    else
      fold_as<dax::bfloat16>(in, inout, *count, f);
  }

  static MpiFloat16 make() {
    MpiFloat16 m;
    for (MPI_Datatype* t : {&m.half, &m.bfloat16}) {
      mpi_check(MPI_Type_contiguous(2, MPI_BYTE, t), "MPI_Type_contiguous");
      mpi_check(MPI_Type_commit(t), "MPI_Type_commit");
    }
    const auto op = [](MPI_User_function* f, MPI_Op* out) { mpi_check(MPI_Op_create(f, 1, out), "MPI_Op_create"); };
    op(&fold<ReduceOp::sum>, &m.ops[static_cast<int>(ReduceOp::sum)]);
    op(&fold<ReduceOp::prod>, &m.ops[static_cast<int>(ReduceOp::prod)]);
    op(&fold<ReduceOp::max>, &m.ops[static_cast<int>(ReduceOp::max)]);
    op(&fold<ReduceOp::min>, &m.ops[static_cast<int>(ReduceOp::min)]);
    return m;
  }
};

}  // namespace dax::detail
