// numpy.linalg.norm on sharded vectors and matrices, made of dax's ops (the spectral norm through
// svd), so it differentiates where they do.
#pragma once

#include <string>

#include <dax/linalg/decompositions.hpp>

namespace dax::linalg {

/// numpy.linalg.norm of a matrix: "fro" (default), "1" (the largest column sum of |a|), "inf" (the
/// largest row sum), "2" (the largest singular value), "nuc" (their sum); a replicated scalar, made of dax's ops (so differentiable where they are).
template <class T>
  requires std::is_same_v<T, float> || std::is_same_v<T, double>
DistArray<T> norm(const DistArray<T>& a, const std::string& ord = "fro") {
  DAX_CHECK(a.ndim() == 1 || a.ndim() == 2, "norm: expected a vector or a matrix, got shape ", to_string(a.shape()));
  if (a.ndim() == 1) {  // vectors: "2" (the default "fro" reads as it), "1", "inf"
    if (ord == "1") return sum(abs(a));
    if (ord == "inf") return max(abs(a));
    DAX_CHECK(ord == "fro" || ord == "2", "norm: a vector's ord must be \"2\", \"1\" or \"inf\", got \"", ord, "\"");
    return sqrt(sum(a * a));
  }
  if (ord == "fro") return sqrt(sum(a * a));
  if (ord == "1") return max(sum(abs(a), {0}));
  if (ord == "inf") return max(sum(abs(a), {1}));
  if (ord == "2") return max(svd(a).s);  // the largest singular value
  if (ord == "nuc") return sum(svd(a).s);  // the nuclear norm: the singular values summed
  detail::fail("norm: ord must be \"fro\", \"nuc\", \"1\", \"2\" or \"inf\", got \"", ord, "\"");
}

}  // namespace dax::linalg
