// dax::optim::Precision: a mixed-precision policy, jmp's Policy(param_dtype, compute_dtype,
// output_dtype) with torchtitan's MixedPrecisionPolicy's reduce_dtype (docs/training.md, "Mixed
// precision"). The parameters and the optimizer state stay in `param` (float32 master weights) in
// their own shardings; products run on `compute` copies and convert their results to `output`;
// gradients are summed in `reduce`.
//
//   const dax::optim::Precision policy{.compute = dax::DType::bfloat16};
//   auto loss = [&](const Model& stored) {
//     const Model w = policy.gather(stored, [&](const std::string& path, const auto& p) { return at(path); });
//     ...  // products: policy.in_compute([&]<class T>() { ... dax::astype<T>(w.w1) ... })
//   };
//
// gather() is the once-per-step cast of the whole tree: each leaf is moved to the sharding the
// callback names (an FSDP gather) in `compute`'s bytes and comes back in `param`'s type holding
// `compute`'s values, so the products' own conversions to `compute` are exact and free of a second
// rounding; the gradients go back (a reduce-scatter) in `reduce`. A leaf already at its sharding
// is not touched (without FSDP nothing moves, and the weights keep their float32 values until
// the products convert them, as under torch.autocast).
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include <dax/autodiff/tree.hpp>
#include <dax/core/dtype.hpp>
#include <dax/core/error.hpp>
#include <dax/core/float16.hpp>
#include <dax/ops/cast_reshard.hpp>

namespace dax::optim {

struct Precision {
  DType param = DType::float32;    // the stored parameters and the optimizer state (the tree's type)
  DType compute = DType::float32;  // the products' operands, and what gather() moves
  DType output = DType::float32;   // what the products' results are converted to
  DType reduce = DType::float32;   // what the gradients are summed in: param's type or compute's

  /// A dax::Error naming what is not offered, on every rank alike (the policy is the same there).
  void check() const {
    auto floating = [](DType t) {
      return t == DType::float32 || t == DType::float64 || t == DType::bfloat16 || t == DType::float16;
    };
    DAX_CHECK(param == DType::float32 || param == DType::float64,
              "Precision: param must be float32 or float64 (the master weights), got ", to_string(param));
    DAX_CHECK(floating(compute), "Precision: compute must be a floating type, got ", to_string(compute));
    DAX_CHECK(output == param || output == compute, "Precision: output must be param's type (", to_string(param),
              ") or compute's (", to_string(compute), "), got ", to_string(output));
    DAX_CHECK(reduce == param || reduce == compute, "Precision: reduce must be param's type (", to_string(param),
              ") or compute's (", to_string(compute), "), got ", to_string(reduce));
  }

  /// f.template operator()<T>() with T the compute type.
  template <class F>
  decltype(auto) in_compute(F&& f) const {
    switch (compute) {
      case DType::bfloat16: return f.template operator()<bfloat16>();
      case DType::float16: return f.template operator()<half>();
      case DType::float64: return f.template operator()<double>();
      default: return f.template operator()<float>();
    }
  }

  /// One leaf moved to `sharding` as gather() moves it (a leaf already there: itself).
  template <class T>
  DistArray<T> gather_leaf(const DistArray<T>& x, const NamedSharding& sharding) const {
    if constexpr (!detail::is_floating_v<T>) {
      return x.sharding() == sharding ? x : reshard(x, sharding);
    } else {
      DAX_CHECK(dtype_v<T> == param, "Precision: a parameter of ", to_string(dtype_v<T>), " where param is ",
                to_string(param));
      if (x.sharding() == sharding) return x;
      return in_compute([&]<class C>() {
        if (reduce == compute && !std::is_same_v<C, T>) return reshard_in<C, C>(x, sharding);
        return reshard_in<C>(x, sharding);
      });
    }
  }

  /// The tree with each leaf at at(path, leaf)'s sharding, moved in compute's bytes, gradients
  /// summed in reduce's (see the top of this file).
  template <class Tree, class At>
  Tree gather(const Tree& stored, At&& at) const {
    check();
    return tree_map_with_path([&](const std::string& path, const auto& leaf) { return gather_leaf(leaf, at(path, leaf)); },
                              stored);
  }
};

}  // namespace dax::optim
