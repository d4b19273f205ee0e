// Local FFTs on the CPU through FFTW's guru interface: any set of axes of a row-major piece, the
// other axes as a batch, in one plan. Plans are made once per (kind, precision, lengths, strides,
// alignment) and kept for the process's life, as FFTW intends (its planner is the slow part); a
// plan made for one pair of arrays runs on another of the same geometry and alignment
// (fftw_execute_dft and friends), so dax's caching allocator never forces a new plan.
//
// The program links FFTW: -lfftw3 -lfftw3f (CMake's dax::fft does it).
#pragma once

#include <fftw3.h>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/core/shape.hpp>

namespace dax::detail::cpu {

/// Which FFTW planner runs the first time a geometry is seen. measure: FFTW times a few algorithms
/// on scratch arrays (slower to plan, often much faster to run: 0.46x -> 1.65x of FFTW-MPI at 256^3,
/// docs/numerics.md), but each rank picks its own plan, so two devices holding copies of one piece
/// could round differently. estimate: the plan follows from the geometry alone, the same on every
/// rank. automatic (the default): measure, except for a piece that other devices hold copies of
/// (a layout that replicates over some mesh axis), which is estimated so the copies stay
/// bit-identical. dax::fft::set_planning picks it.
enum class FftPlanning { automatic, estimate, measure };

inline FftPlanning& fft_planning() {
  static FftPlanning p = FftPlanning::automatic;
  return p;
}

/// The planner for the transform running now (set by FftPlanningScope around each local stage).
inline FftPlanning& fft_planner_now() {
  thread_local FftPlanning p = FftPlanning::estimate;
  return p;
}

/// The planner for one local stage: the user's choice, or under automatic, estimate for a
/// replicated piece and measure otherwise.
class FftPlanningScope {
 public:
  explicit FftPlanningScope(bool replicated) : saved_(fft_planner_now()) {
    const FftPlanning chosen = fft_planning();
    fft_planner_now() = chosen != FftPlanning::automatic ? chosen
                        : replicated                     ? FftPlanning::estimate
                                                         : FftPlanning::measure;
  }
  ~FftPlanningScope() { fft_planner_now() = saved_; }
  FftPlanningScope(const FftPlanningScope&) = delete;
  FftPlanningScope& operator=(const FftPlanningScope&) = delete;

 private:
  FftPlanning saved_;
};

/// One local transform: lengths and strides (in elements of the input and output types) of the
/// transformed axes, the same of the batch axes, and the direction.
struct FftGeometry {
  std::vector<fftw_iodim64> dims, batch;
  int sign = FFTW_FORWARD;  // c2c only
};

/// The geometry of transforming `axes` (ascending, except that an r2c / c2r halved axis comes
/// last, as FFTW's guru interface wants) of a row-major piece of shape `in_shape` into one of
/// `out_shape` (the same except along the halved axis).
inline FftGeometry fft_geometry(const Shape& in_shape, const Shape& out_shape, const std::vector<int>& axes) {
  const auto in_strides = row_major_strides(in_shape), out_strides = row_major_strides(out_shape);
  FftGeometry g;
  for (int a : axes) {
    const int64_t n = std::max(in_shape[a], out_shape[a]);  // r2c: the real length; c2r: likewise
    g.dims.push_back({n, in_strides[a], out_strides[a]});
  }
  for (size_t d = 0; d < in_shape.size(); ++d)
    if (std::find(axes.begin(), axes.end(), static_cast<int>(d)) == axes.end())
      g.batch.push_back({in_shape[d], in_strides[d], out_strides[d]});
  return g;
}

template <class R>
struct Fftw;

#define DAX_FFTW_TRAITS(R, prefix)                                                                              \
  template <>                                                                                                   \
  struct Fftw<R> {                                                                                              \
    using plan = prefix##_plan;                                                                                 \
    using complex = prefix##_complex;                                                                           \
    static plan c2c(const FftGeometry& g, complex* in, complex* out, unsigned flags) {                          \
      return prefix##_plan_guru64_dft(int(g.dims.size()), g.dims.data(), int(g.batch.size()), g.batch.data(), in, \
                                      out, g.sign, flags);                                                      \
    }                                                                                                           \
    static plan r2c(const FftGeometry& g, R* in, complex* out, unsigned flags) {                                \
      return prefix##_plan_guru64_dft_r2c(int(g.dims.size()), g.dims.data(), int(g.batch.size()), g.batch.data(), \
                                          in, out, flags);                                                      \
    }                                                                                                           \
    static plan c2r(const FftGeometry& g, complex* in, R* out, unsigned flags) {                                \
      return prefix##_plan_guru64_dft_c2r(int(g.dims.size()), g.dims.data(), int(g.batch.size()), g.batch.data(), \
                                          in, out, flags);                                                      \
    }                                                                                                           \
    static void run_c2c(plan p, complex* in, complex* out) { prefix##_execute_dft(p, in, out); }              \
    static void run_r2c(plan p, R* in, complex* out) { prefix##_execute_dft_r2c(p, in, out); }                \
    static void run_c2r(plan p, complex* in, R* out) { prefix##_execute_dft_c2r(p, in, out); }                \
    static int alignment_of(const void* p) { return prefix##_alignment_of(static_cast<R*>(const_cast<void*>(p))); } \
    static void* malloc(size_t bytes) { return prefix##_malloc(bytes); }                                        \
    static void free(void* p) { prefix##_free(p); }                                                             \
    static void destroy(plan p) { prefix##_destroy_plan(p); }                                                   \
  };
DAX_FFTW_TRAITS(float, fftwf)
DAX_FFTW_TRAITS(double, fftw)
#undef DAX_FFTW_TRAITS

/// The plans made so far for one precision, by geometry, kind and the arrays' alignments.
template <class R>
class FftPlans {
 public:
  using Plan = typename Fftw<R>::plan;
  using Key = std::vector<int64_t>;  // kind, sign, alignments, planner, then (n, is, os) per axis and batch axis

  static FftPlans& get() {
    static FftPlans plans;
    return plans;
  }
  ~FftPlans() {
    for (auto& [key, plan] : plans_) Fftw<R>::destroy(plan);
  }

  /// The plan for `kind` (0 c2c, 1 r2c, 2 c2r) over `g` from `in` to `out`, made on scratch
  /// arrays the first time (FFTW's measuring planner overwrites the arrays it is given).
  Plan find(int kind, const FftGeometry& g, const void* in, const void* out, int64_t in_bytes, int64_t out_bytes) {
    const int in_off = Fftw<R>::alignment_of(in), out_off = Fftw<R>::alignment_of(out);
    const bool in_place = in == out;  // FFTW runs a plan only on arrays as in place (or not) as its own
    Key key{kind, g.sign, in_off, out_off, int(fft_planner_now()), in_place, int64_t(g.dims.size())};
    for (const auto* list : {&g.dims, &g.batch})
      for (const auto& d : *list) key.insert(key.end(), {d.n, d.is, d.os});
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    // Scratch with the same alignment as the arrays (offset from FFTW's own, which is SIMD-aligned).
    std::unique_ptr<void, void (*)(void*)> a(Fftw<R>::malloc(std::max(in_bytes, out_bytes) + 64), Fftw<R>::free);
    std::unique_ptr<void, void (*)(void*)> b(Fftw<R>::malloc(out_bytes + 64), Fftw<R>::free);
    DAX_CHECK(a && b, "dax::fft: FFTW could not allocate ", in_bytes + out_bytes, " bytes of scratch to plan in");
    auto* in_s = static_cast<char*>(a.get()) + in_off;
    auto* out_s = in_place ? in_s : static_cast<char*>(b.get()) + out_off;
    const unsigned flags = (fft_planner_now() == FftPlanning::measure ? FFTW_MEASURE : FFTW_ESTIMATE);
    using C = typename Fftw<R>::complex;
    Plan p = nullptr;
    if (kind == 0) p = Fftw<R>::c2c(g, reinterpret_cast<C*>(in_s), reinterpret_cast<C*>(out_s), flags);
    else if (kind == 1) p = Fftw<R>::r2c(g, reinterpret_cast<R*>(in_s), reinterpret_cast<C*>(out_s), flags);
    else p = Fftw<R>::c2r(g, reinterpret_cast<C*>(in_s), reinterpret_cast<R*>(out_s), flags);
    DAX_CHECK(p != nullptr, "dax::fft: FFTW made no plan for ", g.dims.size(), " axes of lengths ", [&] {
      std::string s;
      for (const auto& d : g.dims) s += cat(s.empty() ? "" : "x", d.n);
      return s;
    }());
    plans_.emplace(key, p);
    return p;
  }

 private:
  std::map<Key, Plan> plans_;
};

/// The plan's transform of `axes` of a row-major piece, straight through FFTW's guru interface.
template <class R>
void fft_c2c_direct(const std::complex<R>* in, std::complex<R>* out, const Shape& shape, const std::vector<int>& axes,
                    bool forward) {
  FftGeometry g = fft_geometry(shape, shape, axes);
  g.sign = forward ? FFTW_FORWARD : FFTW_BACKWARD;
  const int64_t bytes = numel(shape) * int64_t(sizeof(std::complex<R>));
  using C = typename Fftw<R>::complex;
  auto plan = FftPlans<R>::get().find(0, g, in, out, bytes, bytes);
  // FFTW does not write an out-of-place c2c input; its signature is not const.
  Fftw<R>::run_c2c(plan, reinterpret_cast<C*>(const_cast<std::complex<R>*>(in)), reinterpret_cast<C*>(out));
}

/// The transform along one axis whose elements lie `inner` apart (inner > 1): a few columns at a
/// time copied into contiguous rows, transformed there, and copied back. FFTW's own plans for such
/// strides (a power of two apart, say) run 4-9x slower than on contiguous rows: every element of a
/// column maps to the same cache set. 128 bytes of each row per block (8 complex doubles).
template <class R>
void fft_c2c_columns(const std::complex<R>* in, std::complex<R>* out, const Shape& shape, int axis, bool forward) {
  using Z = std::complex<R>;
  const int64_t n = shape[axis];
  int64_t inner = 1, outer = 1;
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  constexpr int64_t width = 128 / sizeof(Z);
  struct Scratch {
    Z* data = nullptr;
    int64_t size = 0;
    ~Scratch() { Fftw<R>::free(data); }
  };
  thread_local Scratch rows, spectra;  // FFTW-aligned, kept: the plans below are made for them
  for (Scratch* sc : {&rows, &spectra})
    if (sc->size < width * n) {
      Fftw<R>::free(sc->data);
      sc->data = static_cast<Z*>(Fftw<R>::malloc(width * n * sizeof(Z)));
      DAX_CHECK(sc->data != nullptr, "dax::fft: FFTW could not allocate ", width * n * sizeof(Z), " bytes of scratch");
      sc->size = width * n;
    }
  for (int64_t o = 0; o < outer; ++o) {
    const Z* src = in + o * n * inner;
    Z* dst = out + o * n * inner;
    for (int64_t c = 0; c < inner; c += width) {
      const int64_t b = std::min(width, inner - c);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < b; ++k) rows.data[k * n + j] = src[j * inner + c + k];
      fft_c2c_direct(rows.data, spectra.data, Shape{b, n}, {1}, forward);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < b; ++k) dst[j * inner + c + k] = spectra.data[k * n + j];
    }
  }
}

/// out = the transform of `axes` of the row-major piece `in` (complex to complex, forward when
/// `forward`; `out` may be `in`). The trailing axes among them (contiguous rows, or planes of them)
/// go to one FFTW plan; each other axis is transformed a block of columns at a time. Pieces with no
/// elements are skipped.
template <class R>
void fft_c2c(const std::complex<R>* in, std::complex<R>* out, const Shape& shape, const std::vector<int>& axes,
             bool forward) {
  if (numel(shape) == 0 || axes.empty()) {
    if (in != out && numel(shape) > 0) std::memcpy(out, in, numel(shape) * sizeof(std::complex<R>));
    return;
  }
  std::vector<int> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  // The trailing run: the last axes, with dimensions of one after them counted as trailing too.
  std::vector<int> tail, rest;
  int next = static_cast<int>(shape.size()) - 1;
  while (next >= 0 && std::find(sorted.begin(), sorted.end(), next) == sorted.end() && shape[next] == 1) --next;
  for (int i = static_cast<int>(sorted.size()) - 1; i >= 0; --i) {
    if (sorted[i] == next) {
      tail.insert(tail.begin(), sorted[i]);
      --next;
      while (next >= 0 && std::find(sorted.begin(), sorted.end(), next) == sorted.end() && shape[next] == 1) --next;
    } else {
      rest.insert(rest.begin(), sorted[i]);
    }
  }
  const std::complex<R>* src = in;
  if (!tail.empty()) {
    fft_c2c_direct(src, out, shape, tail, forward);
    src = out;
  }
  for (int a : rest) {
    fft_c2c_columns(src, out, shape, a, forward);
    src = out;
  }
}

/// out (complex, the last of `axes` n / 2 + 1 long) = the forward transform of the real piece `in`:
/// the halved axis by FFTW's r2c, then the others as complex ones in place.
template <class R>
void fft_r2c(const R* in, const Shape& in_shape, std::complex<R>* out, const Shape& out_shape,
             const std::vector<int>& axes) {
  if (numel(in_shape) == 0 || numel(out_shape) == 0) return;
  const FftGeometry g = fft_geometry(in_shape, out_shape, {axes.back()});
  using C = typename Fftw<R>::complex;
  auto plan = FftPlans<R>::get().find(1, g, in, out, numel(in_shape) * int64_t(sizeof(R)),
                                      numel(out_shape) * int64_t(sizeof(std::complex<R>)));
  Fftw<R>::run_r2c(plan, const_cast<R*>(in), reinterpret_cast<C*>(out));
  fft_c2c(out, out, out_shape, std::vector<int>(axes.begin(), axes.end() - 1), true);
}

/// out (real) = the backward transform of the Hermitian piece `in`: the other axes as complex ones
/// in place, then the halved axis by FFTW's c2r, which overwrites its input: `in` is scratch the
/// caller gives up.
template <class R>
void fft_c2r(std::complex<R>* in, const Shape& in_shape, R* out, const Shape& out_shape, const std::vector<int>& axes) {
  if (numel(in_shape) == 0 || numel(out_shape) == 0) return;
  fft_c2c(in, in, in_shape, std::vector<int>(axes.begin(), axes.end() - 1), false);
  const FftGeometry g = fft_geometry(in_shape, out_shape, {axes.back()});
  using C = typename Fftw<R>::complex;
  auto plan = FftPlans<R>::get().find(2, g, in, out, numel(in_shape) * int64_t(sizeof(std::complex<R>)),
                                      numel(out_shape) * int64_t(sizeof(R)));
  Fftw<R>::run_c2r(plan, reinterpret_cast<C*>(in), out);
}

}  // namespace dax::detail::cpu
