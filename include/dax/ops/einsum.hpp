// einsum of two operands, mapped onto the batched matmul: labels in both operands and the output
// are batch dimensions, labels in both operands only are contracted, labels in one operand and
// the output are its free (row / column) dimensions, and a label in one operand only is summed
// away first. Each operand is permuted to (batch..., leading free..., rows, contraction) /
// (batch..., leading free..., contraction, columns) -- no copy when nothing moves or only the last
// two dimensions swap (a view BLAS reads with a transpose flag) -- and the leading free dimensions
// become broadcast batch dimensions of the matmul, so split batch, head or sequence dimensions stay
// where they are. The gradient comes from the ops it is made of (transpose, reshape, matmul, sum).
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <dax/array/transpose.hpp>
#include <dax/ops/matmul.hpp>
#include <dax/ops/reduction.hpp>
#include <dax/ops/reshape.hpp>
#include <dax/ops/shape.hpp>

namespace dax {
namespace detail {

struct EinsumSpec {
  std::string a, b, out;
};

/// The spec's operand and output labels, checked against the operands' ranks and sizes.
inline EinsumSpec parse_einsum(const std::string& spec, const Shape& as, const Shape& bs) {
  std::string s;
  for (char c : spec)
    if (c != ' ') s += c;
  auto bad = [&](const std::string& why) { fail("einsum: unsupported spec '", spec, "': ", why); };
  const size_t arrow = s.find("->");
  const std::string in = s.substr(0, arrow);
  const size_t comma = in.find(',');
  if (comma == std::string::npos || in.find(',', comma + 1) != std::string::npos)
    bad("dax::einsum takes exactly two operands (\"ab,bc->ac\")");
  EinsumSpec e{in.substr(0, comma), in.substr(comma + 1), ""};
  if (arrow != std::string::npos) {
    e.out = s.substr(arrow + 2);
  } else {  // NumPy's implicit output: the labels that appear once, in alphabetical order
    for (char c : e.a + e.b)
      if (std::count(e.a.begin(), e.a.end(), c) + std::count(e.b.begin(), e.b.end(), c) == 1) e.out += c;
    std::sort(e.out.begin(), e.out.end());
  }
  for (const std::string* t : {&e.a, &e.b, &e.out})
    for (size_t i = 0; i < t->size(); ++i) {
      const char c = (*t)[i];
      if (c == '.') bad("ellipses ('...') are not supported; name every dimension");
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) bad(std::string("'") + c + "' is not a label (a letter)");
      if (t->find(c, i + 1) != std::string::npos)
        bad(std::string("label '") + c + "' appears twice in one term (diagonals and traces are not supported)");
    }
  for (char c : e.out)
    if (e.a.find(c) == std::string::npos && e.b.find(c) == std::string::npos)
      bad(std::string("output label '") + c + "' is in neither operand");
  DAX_CHECK(e.a.size() == as.size() && e.b.size() == bs.size(), "einsum: spec '", spec, "' names ", e.a.size(),
            " and ", e.b.size(), " dimensions, the operands have shapes ", to_string(as), " and ", to_string(bs));
  for (size_t i = 0; i < e.a.size(); ++i) {
    const size_t j = e.b.find(e.a[i]);
    DAX_CHECK(j == std::string::npos || as[i] == bs[j], "einsum: spec '", spec, "': label '", e.a[i], "' has size ",
              as[i], " in the first operand and ", j == std::string::npos ? 0 : bs[j], " in the second (shapes ",
              to_string(as), " and ", to_string(bs), ")");
  }
  return e;
}

inline bool has_label(const std::string& s, char c) { return s.find(c) != std::string::npos; }

/// x with its dimensions ordered as the labels `to` (a permutation of `from`); no op when equal.
template <class T>
DistArray<T> permuted(const DistArray<T>& x, const std::string& from, const std::string& to) {
  if (from == to) return x;
  std::vector<int> perm;
  for (char c : to) perm.push_back(static_cast<int>(from.find(c)));
  return transpose(x, perm);
}

/// x's dimensions [first, first + count) merged into one (a unit dimension when count is 0).
template <class T>
DistArray<T> merged(const DistArray<T>& x, size_t first, size_t count) {
  if (count == 1) return x;
  if (count == 0) return expand_dims(x, static_cast<int>(first));
  Shape shape(x.shape().begin(), x.shape().begin() + first);
  int64_t n = 1;
  for (size_t d = first; d < first + count; ++d) n *= x.shape()[d];
  shape.push_back(n);
  shape.insert(shape.end(), x.shape().begin() + first + count, x.shape().end());
  return reshape(x, shape);
}

/// x with `count` unit dimensions inserted at `at`.
template <class T>
DistArray<T> with_unit_dims(DistArray<T> x, size_t at, size_t count) {
  for (size_t i = 0; i < count; ++i) x = expand_dims(x, static_cast<int>(at));
  return x;
}

}  // namespace detail

/// Einstein summation over two operands (NumPy's / JAX's notation, e.g. "bhqd,bhkd->bhqk",
/// "bsd,df->bsf"; without "->" the output is the labels that appear once, sorted). Labels are
/// letters, each at most once per term; ellipses, diagonals and more than two operands are refused
/// with a dax::Error naming the spec. Differentiable in both operands.
template <class T>
DistArray<T> einsum(const std::string& spec, const DistArray<T>& a, const DistArray<T>& b) {
  detail::EinsumSpec e = detail::parse_einsum(spec, a.shape(), b.shape());
  using detail::has_label;
  // A label in one operand only, not in the output: summed away first.
  auto sum_lonely = [&](const DistArray<T>& x, std::string& mine, const std::string& other) {
    std::vector<int> dims;
    std::string kept;
    for (size_t i = 0; i < mine.size(); ++i) {
      if (!has_label(other, mine[i]) && !has_label(e.out, mine[i])) dims.push_back(static_cast<int>(i));
      else kept += mine[i];
    }
    mine = kept;
    return dims.empty() ? x : sum(x, dims);
  };
  const DistArray<T> a1 = sum_lonely(a, e.a, e.b);
  const DistArray<T> b1 = sum_lonely(b, e.b, e.a);
  std::string batch, rows, cols, contracted;
  for (char c : e.out) {
    if (has_label(e.a, c) && has_label(e.b, c)) batch += c;
    else if (has_label(e.a, c)) rows += c;
    else cols += c;
  }
  for (char c : e.a)
    if (has_label(e.b, c) && !has_label(e.out, c)) contracted += c;
  const std::string lead_rows = rows.empty() ? "" : rows.substr(0, rows.size() - 1);
  const std::string lead_cols = cols.empty() ? "" : cols.substr(0, cols.size() - 1);
  const std::string last_row = rows.empty() ? "" : rows.substr(rows.size() - 1);
  const std::string last_col = cols.empty() ? "" : cols.substr(cols.size() - 1);
  // a: (batch, lead rows, [1 per lead col], row, k); b: (batch, [1 per lead row], lead cols, k, col).
  const size_t nb = batch.size(), nr = lead_rows.size(), nc = lead_cols.size();
  DistArray<T> am = detail::permuted(a1, e.a, batch + lead_rows + last_row + contracted);
  am = detail::merged(am, nb + nr + last_row.size(), contracted.size());
  if (last_row.empty()) am = expand_dims(am, static_cast<int>(nb + nr));
  am = detail::with_unit_dims(am, nb + nr, nc);
  DistArray<T> bm = detail::permuted(b1, e.b, batch + lead_cols + contracted + last_col);
  bm = detail::merged(bm, nb + nc, contracted.size());
  if (last_col.empty()) bm = expand_dims(bm, static_cast<int>(bm.ndim()));
  if (nb > 0) bm = detail::with_unit_dims(bm, nb, nr);  // leading ones broadcast by themselves
  DistArray<T> r = matmul(am, bm);  // (batch, lead rows, lead cols, row|1, col|1)
  std::vector<int> units;
  if (last_row.empty()) units.push_back(r.ndim() - 2);
  if (last_col.empty()) units.push_back(r.ndim() - 1);
  if (!units.empty()) r = squeeze(r, units);
  return detail::permuted(r, batch + lead_rows + lead_cols + last_row + last_col, e.out);
}

}  // namespace dax
