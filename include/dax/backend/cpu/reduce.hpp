// Reduction kernel: folds the elements of a local piece along some of its dimensions.
//
// The dimensions are first merged into runs of alike ones (kept, reduced), unit dimensions
// dropped, so the innermost run is contiguous in memory. Then one of two loops does the work:
//  - innermost run reduced (row sums, softmax's and layer_norm's row statistics): each output
//    folds a contiguous run with eight accumulators, combined in a fixed order at the end — the
//    compiler vectorizes it, and a row's result does not depend on how the rows are split;
//  - innermost run kept (column sums: a bias gradient): whole output rows are folded at once,
//    element by element in input order, which vectorizes without reordering any sum.
// The index bookkeeping runs once per contiguous run, not once per element.
#pragma once

#include <cstdint>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail::cpu {

/// `shape` with adjacent dimensions of the same kind merged and unit dimensions dropped; the
/// flags of the merged dimensions in `reduced_out`. Row-major order is kept.
inline Shape merge_alike_dims(const Shape& shape, const std::vector<bool>& reduced, std::vector<bool>& reduced_out) {
  Shape merged;
  reduced_out.clear();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!merged.empty() && reduced_out.back() == reduced[d]) {
      merged.back() *= shape[d];
    } else {
      merged.push_back(shape[d]);
      reduced_out.push_back(reduced[d]);
    }
  }
  return merged;
}

/// op folded over in[0..n) (n >= 1) as eight interleaved partial folds, combined pairwise.
template <class In, class Acc, class Op>
Acc fold_contiguous(const In* in, int64_t n, Op& op) {
  if (n < 16) {
    Acc acc = static_cast<Acc>(in[0]);
    for (int64_t k = 1; k < n; ++k) acc = op(acc, static_cast<Acc>(in[k]));
    return acc;
  }
  Acc part[8];
  for (int j = 0; j < 8; ++j) part[j] = static_cast<Acc>(in[j]);
  int64_t k = 8;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) part[j] = op(part[j], static_cast<Acc>(in[k + j]));
  for (int j = 0; k < n; ++k, ++j) part[j] = op(part[j], static_cast<Acc>(in[k]));
  return op(op(op(part[0], part[1]), op(part[2], part[3])), op(op(part[4], part[5]), op(part[6], part[7])));
}

/// out[j] = op(out[j], Acc(in[i])) for every element i of a piece of shape `shape`, j its index with
/// the dimensions flagged in `reduced` dropped. `out` must hold the identity of op. Acc is In, or
/// a wider type to accumulate in (float for the 16-bit types).
template <class In, class Acc, class Op>
void reduce_dims(const In* in, const Shape& shape, const std::vector<bool>& reduced, Acc* out, Op&& op) {
  DAX_CHECK(reduced.size() == shape.size(), "reduce_dims: ", reduced.size(), " reduced flags for a shape of rank ",
            shape.size());
  if (numel(shape) == 0) return;
  std::vector<bool> flags;
  const Shape dims = merge_alike_dims(shape, reduced, flags);
  if (dims.empty()) {  // one element
    out[0] = op(out[0], static_cast<Acc>(in[0]));
    return;
  }
  const size_t n = dims.size();
  const int64_t run = dims.back();  // contiguous elements of the innermost dimension
  const bool run_reduced = flags.back();
  // The outer dimensions (all but the innermost), with each one's stride in the output.
  std::vector<int64_t> out_stride(n, 0), idx(n, 0);
  int64_t s = run_reduced ? 1 : run;
  for (size_t i = n - 1; i-- > 0;) {
    if (flags[i]) continue;
    out_stride[i] = s;
    s *= dims[i];
  }
  const int64_t outer = numel(dims) / run;
  int64_t o = 0;
  for (int64_t r = 0; r < outer; ++r) {
    const In* row = in + r * run;
    if (run_reduced) {
      out[o] = op(out[o], fold_contiguous<In, Acc>(row, run, op));
    } else {
      Acc* dst = out + o;
      for (int64_t k = 0; k < run; ++k) dst[k] = op(dst[k], static_cast<Acc>(row[k]));
    }
    for (size_t d = n - 1; d-- > 0;) {  // next outer index, keeping the output offset in step
      o += out_stride[d];
      if (++idx[d] < dims[d]) break;
      o -= out_stride[d] * idx[d];
      idx[d] = 0;
    }
  }
}

}  // namespace dax::detail::cpu
