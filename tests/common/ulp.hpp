// How far a floating result may be from the host's reference, in units in the last place (ULPs),
// per op: the one table the CPU and the CUDA runs of a test both use (docs/ops.md states it).
// Each number is the sum of the two sides' documented worst errors against the true value: CUDA's
// (the CUDA Programming Guide's table of maximum ULP errors, default flags: no fast math, IEEE
// division and square root) and glibc's (its libm-test-ulps for x86-64), plus what the composed
// formula adds. Exact ops (copies, reshards, +, -, *, / and sqrt of exactly representable values,
// max/min, integer ops) are not in the table: their tests compare with ==.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace dax::test {

/// One row of the table: `ulps` plus `ulps_per_term` for each term a composed op sums, measured at
/// the result, or at the scale the caller passes where the formula subtracts nearly equal values
/// (then the error is a few ULPs of the terms, not of their small difference).
struct UlpTolerance {
  const char* op;
  int64_t ulps;
  int64_t ulps_per_term;
  bool at_scale;
};

// clang-format off
inline constexpr UlpTolerance ulp_table[] = {
    // op            ulps per-term at-scale   why
    {"exp",          3,   0,       false},  // CUDA expf 2 (exp 1) + glibc 1
    {"log",          2,   0,       false},  // CUDA logf/log 1 + glibc 1
    {"tanh",         4,   0,       false},  // CUDA tanhf 2 (tanh 1) + glibc 2
    {"sin",          3,   0,       false},  // CUDA sinf/sin 2 + glibc 1 (cos the same)
    {"cos",          3,   0,       false},
    {"pow",          5,   0,       false},  // CUDA powf 4 (pow 2) + glibc 1
    {"sigmoid",      5,   0,       false},  // 1/(1+exp(-x)): exp's 3, +1 for the sum, +1 for the division
    {"gelu",         8,   0,       true},   // 0.5x(1+tanh(t)): 1+tanh cancels for x < 0, so ULPs of |x|:
                                            //   tanh's 4 and ~3 roundings in t, halved by 0.5x, each side
    {"gelu_erf",     8,   0,       true},   // 0.5x(1+erf(x/sqrt2)): 1+erf cancels for x < 0, so ULPs of |x|:
                                            //   erf's 2 (CUDA erff 2, erf 2) + glibc's 1, the scaling and the
                                            //   product's roundings, each side
    {"silu",         6,   0,       false},  // x/(1+exp(-x)): sigmoid's 5 and the product's 1
    {"softmax",      7,   1,       false},  // exp twice (3+3) + the division (1) + 1 per summed term
    {"log_softmax",  5,   1,       true},   // log's 2 + exp's 3 + 1 per summed term, in ULPs of max(|x|, |max|, 1):
                                            //   x - (max + log(sum)) rounds each term at its magnitude
    {"logsumexp",    5,   1,       true},   // as log_softmax, in ULPs of max(|max|, 1)
};
// clang-format on

/// The row of `op`; an op missing from the table is a test bug, reported loudly.
inline const UlpTolerance& ulp_tolerance(std::string_view op) {
  for (const UlpTolerance& t : ulp_table)
    if (op == t.op) return t;
  static const UlpTolerance missing{"(missing)", -1, 0, false};
  return missing;
}

/// The allowed distance for `op` over `terms` summed terms (1 for a plain function).
inline int64_t max_ulps(std::string_view op, int64_t terms = 1) {
  const UlpTolerance& t = ulp_tolerance(op);
  return t.ulps < 0 ? -1 : t.ulps + t.ulps_per_term * terms;
}

/// The bits of a float or double as an integer that orders like the values: adjacent floats
/// differ by 1, and -0.0 and +0.0 are the same.
template <class T>
int64_t ordered_bits(T v) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "ulp_distance: float or double");
  if constexpr (std::is_same_v<T, float>) {
    int32_t i;
    std::memcpy(&i, &v, sizeof i);
    return i < 0 ? -int64_t(i & 0x7fffffff) : int64_t(i);
  } else {
    int64_t i;
    std::memcpy(&i, &v, sizeof i);
    return i < 0 ? -(i & 0x7fffffffffffffffLL) : i;
  }
}

/// How many representable values lie between `a` and `b` (0 when equal, NaN == NaN here);
/// the largest int64 when exactly one is NaN.
template <class T>
int64_t ulp_distance(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : std::numeric_limits<int64_t>::max();
  const int64_t x = ordered_bits(a), y = ordered_bits(b);
  // Opposite signs of large magnitude could overflow a plain difference: saturate.
  if ((x < 0) != (y < 0) && (x > std::numeric_limits<int64_t>::max() / 2 || y > std::numeric_limits<int64_t>::max() / 2 ||
                             x < std::numeric_limits<int64_t>::min() / 2 || y < std::numeric_limits<int64_t>::min() / 2))
    return std::numeric_limits<int64_t>::max();
  return x > y ? x - y : y - x;
}

/// The gap between |scale| and the next larger value of T (the smallest subnormal at 0).
template <class T>
T ulp_of(T scale) {
  const T s = std::fabs(scale);
  return std::nextafter(s, std::numeric_limits<T>::infinity()) - s;
}

/// Empty when every got[i] is within the table's ULPs of want[i]; else the first element that is
/// not, with both values, the distance and the allowance. `scale` (ops measured at a scale) gives
/// each element's scale; `terms` is the number of summed terms of a composed op.
template <class T>
std::string ulp_mismatch(const std::vector<T>& got, const std::vector<T>& want, std::string_view op, int64_t terms = 1,
                         const std::vector<T>& scale = {}) {
  const UlpTolerance& row = ulp_tolerance(op);
  // Messages are appended to a string, not built as "literal" + string: GCC 12 reports a false
  // -Wrestrict inside operator+(const char*, std::string&&).
  if (row.ulps < 0) return std::string("no ULP tolerance for '").append(op).append("' in tests/common/ulp.hpp");
  if (got.size() != want.size()) return "sizes differ: " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  if (row.at_scale && scale.size() != want.size()) return std::string("'").append(op).append("' needs one scale per element");
  const int64_t allowed = max_ulps(op, terms);
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t d = ulp_distance(got[i], want[i]);
    if (d <= allowed) continue;
    if (row.at_scale) {
      const T s = std::fabs(scale[i]) > std::fabs(want[i]) ? scale[i] : want[i];
      if (std::fabs(got[i] - want[i]) <= static_cast<T>(allowed) * ulp_of(s)) continue;
    }
    std::ostringstream text;
    text.precision(std::numeric_limits<T>::max_digits10);
    text << op << ": element " << i << " is " << got[i] << ", the reference " << want[i] << ": " << d
         << " ULPs apart, allowed " << allowed;
    if (row.at_scale) text << " ULPs of " << scale[i];
    return text.str();
  }
  return "";
}

}  // namespace dax::test
