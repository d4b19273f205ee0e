// dax::fft: numpy.fft's transforms on sharded arrays. Each op takes the stages of fft_rule (the
// axes the input holds whole first, then the all-to-all that makes the others whole), runs one
// local FFTW transform per stage on every device's piece, and returns in the input's layout or,
// when asked, in the transposed one the last stage left (FFTW_MPI_TRANSPOSED_OUT's saving: one
// all-to-all fewer). Normalisation as NumPy's `norm`. CPU backend (FFTW); the meta backend counts.
#pragma once

#include <cmath>
#include <complex>
#include <numbers>
#include <optional>
#include <utility>
#include <vector>

#include <dax/array/creation.hpp>
#include <dax/array/profile_hook.hpp>
#include <dax/array/reshard.hpp>
#include <dax/backend/fft_ops.hpp>
#include <dax/ops/complex.hpp>
#include <dax/ops/join.hpp>
#include <dax/fft/fft_rule.hpp>

namespace dax::fft {

/// Which direction is scaled, as NumPy's `norm`: "backward" (the inverse by 1/n, the default),
/// "ortho" (both by 1/sqrt(n)), "forward" (the forward by 1/n).
enum class Norm { backward, ortho, forward };

/// The result's sharding: the input's (default), or the transposed layout the last all-to-all
/// left, which saves the all-to-all back (FFTW's FFTW_MPI_TRANSPOSED_OUT). An inverse transform
/// given that layout moves nothing before its first stage.
enum class Output { like_input, transposed };

}  // namespace dax::fft

namespace dax::detail {

/// The factor a transform of n points (all transformed axes together) is scaled by.
inline double fft_scale(fft::Norm norm, bool forward, double n) {
  if (n <= 0) return 1;
  switch (norm) {
    case fft::Norm::backward: return forward ? 1 : 1 / n;
    case fft::Norm::ortho: return 1 / std::sqrt(n);
    case fft::Norm::forward: return forward ? 1 / n : 1;
  }
  return 1;
}

/// One stage: `x` (already in the stage's layout) transformed along its axes into an array of
/// `out_shape` in the same layout; `halved` is the r2c / c2r axis (-1 for c2c), passed last to FFTW.
template <class Out, class In>
DistArray<Out> fft_stage(const DistArray<In>& x, const FftStage& stage, const Shape& out_shape, int halved,
                         bool forward, double scale) {
  const NamedSharding& layout = stage.layout;
  Runtime& rt = Runtime::current();
  if (!layout.mesh().contains(rt.rank())) return DistArray<Out>(out_shape, layout, nullptr);
  const Shape in_local = x.local_shape();
  const Shape out_local = box_shape(layout.device_indices(rt.rank(), out_shape));
  auto buffer = dev::allocate(numel(out_local) * sizeof(Out));
  Out* out = static_cast<Out*>(buffer->data());
  std::vector<int> axes;
  for (int a : stage.axes)
    if (a != halved || !stage.halves) axes.push_back(a);
  if (stage.halves) axes.push_back(halved);
  const bool replicated = layout.has_copies();  // plans that keep the copies bit-identical
  const In* in = x.local_data().data();
  if constexpr (std::is_same_v<In, Out>) {
    dev::fft_c2c(in, out, in_local, axes, forward, replicated);
  } else if constexpr (is_complex_v<Out>) {
    dev::fft_r2c(in, in_local, out, out_local, axes, replicated);
  } else {  // FFTW's c2r overwrites its input: a copy of this rank's piece is given up instead
    const int64_t in_bytes = numel(in_local) * int64_t(sizeof(In));
    auto scratch = dev::allocate(in_bytes);
    dev::copy(scratch->data(), in, in_bytes);
    dev::fft_c2r(static_cast<In*>(scratch->data()), in_local, out, out_local, axes, replicated);
  }
  dev::scale(out, numel(out_local), real_t<Out>(scale));
  return DistArray<Out>(out_shape, layout, std::move(buffer));
}

/// The whole transform: the rule's stages in order, each after moving to its layout, then the move
/// to the result's sharding. `shapes` gives the array's shape before the first stage and after each.
template <class Out, class In>
DistArray<Out> compute_fft(const char* op, const DistArray<In>& x, const std::vector<int>& axes, FftKind kind,
                           bool forward, fft::Norm norm, fft::Output output, const Shape& out_shape) {
  const ProfiledOp profiled(op, x);
  const FftRule rule = fft_rule(x.shape(), x.sharding(), axes, kind, output == fft::Output::transposed);
  const int halved = kind == FftKind::c2c ? -1 : axes.back();
  double points = 1;  // the logical length of the transform: the real side's along the halved axis
  for (int a : axes) points *= double(kind == FftKind::c2r ? out_shape[a] : x.shape()[a]);
  const double scale = fft_scale(norm, forward, points);
  if constexpr (std::is_same_v<In, Out>)
    if (rule.stages.empty()) return moved_to(x, rule.output);  // no axes: nothing to transform
  // The input moved to the first layout as any op's operand (explicit sharding sees it); the
  // transposes between stages are the transform's own work, as in FFTW's MPI interface.
  DistArray<In> in = operand_to(x, rule.stages.front().layout, op);
  const auto last = rule.stages.size() - 1;
  if constexpr (std::is_same_v<In, Out>) {
    for (size_t i = 0; i <= last; ++i)
      in = fft_stage<Out>(moved_to(in, rule.stages[i].layout), rule.stages[i], out_shape, halved, forward,
                          i == last ? scale : 1.0);
    return moved_to(in, rule.output);
  } else if constexpr (is_complex_v<Out>) {  // r2c: the first stage halves; the rest are c2c on complex values
    DistArray<Out> z = fft_stage<Out>(in, rule.stages[0], out_shape, halved, forward, last == 0 ? scale : 1.0);
    for (size_t i = 1; i <= last; ++i)
      z = fft_stage<Out>(moved_to(z, rule.stages[i].layout), rule.stages[i], out_shape, halved, forward,
                         i == last ? scale : 1.0);
    return moved_to(z, rule.output);
  } else {  // c2r: c2c stages first, the last one back to real values
    for (size_t i = 0; i < last; ++i)
      in = fft_stage<In>(moved_to(in, rule.stages[i].layout), rule.stages[i], x.shape(), halved, forward, 1.0);
    DistArray<Out> r = fft_stage<Out>(moved_to(in, rule.stages[last].layout), rule.stages[last], out_shape, halved,
                                      forward, scale);
    return moved_to(r, rule.output);
  }
}

/// The norm whose forward scale is `norm`'s inverse scale (backward <-> forward, ortho itself):
/// a c2r transform's cotangent is an r2c transform scaled as the c2r was.
inline fft::Norm swapped(fft::Norm norm) {
  return norm == fft::Norm::backward ? fft::Norm::forward : norm == fft::Norm::forward ? fft::Norm::backward : norm;
}

/// The transform, recorded for autodiff in JAX's convention (ops/complex.hpp): a cotangent ct pairs
/// with a tangent as Re(sum(ct * t)). The DFT matrix is symmetric, so a c2c transform's cotangent is
/// the same transform of g (same direction, same norm). r2c (x real, n long on the halved axis):
/// Re(fftn(g zero-padded to n, same norm)). c2r (to n on the halved axis): w * conj(rfftn(g)) with
/// the inverse's scale, w = 1 at the zero frequency (and at n / 2 when n is even), 2 elsewhere: the
/// bins the c2r counts once or twice.
template <class Out, class In>
DistArray<Out> run_fft(const char* op, const DistArray<In>& x, const std::vector<int>& axes, FftKind kind,
                       bool forward, fft::Norm norm, fft::Output output, const Shape& out_shape) {
  DistArray<Out> out = [&] {
    const NoTrace untraced;  // one node for the whole transform, its moves included
    return compute_fft<Out>(op, x, axes, kind, forward, norm, output, out_shape);
  }();
  record(op, out, [&](auto) {
    return [=, in_shape = x.shape()](const DistArray<Out>& g) -> Cotangents {  // (each kind uses its own)
      if constexpr (std::is_same_v<In, Out>) {
        return {AnyArray(compute_fft<Out>("fft (backward)", g, axes, kind, forward, norm, fft::Output::like_input, g.shape()))};
      } else if constexpr (is_complex_v<Out>) {  // r2c: In is real
        const int h = axes.back();
        DistArray<Out> padded = g;
        if (in_shape[h] > g.shape()[h]) {
          Shape pad = g.shape();
          pad[h] = in_shape[h] - g.shape()[h];
          padded = concatenate(std::vector<DistArray<Out>>{g, zeros<Out>(pad, g.sharding())}, h);
        }
        const DistArray<Out> full = compute_fft<Out>("rfft (backward)", padded, axes, FftKind::c2c, true, norm,
                                                     fft::Output::like_input, padded.shape());
        return {AnyArray(map<In>(Linearity::additive, fn::RealPart{}, full))};
      } else {  // c2r: In is complex, g real
        const int h = axes.back();
        const int64_t n = g.shape()[h], m = in_shape[h];
        Shape spectrum = g.shape();
        spectrum[h] = m;
        const DistArray<In> z = compute_fft<In>("irfft (backward)", g, axes, FftKind::r2c, true, swapped(norm),
                                                fft::Output::like_input, spectrum);
        std::vector<In> w(static_cast<size_t>(m), In(2));
        w[0] = In(1);
        if (n % 2 == 0 && n / 2 < m) w[static_cast<size_t>(n / 2)] = In(1);
        Shape w_shape(g.ndim() - static_cast<size_t>(h), 1);  // (m, 1, ...): broadcasts along axis h
        w_shape[0] = m;
        const auto weights = device_put(w, w_shape, NamedSharding(g.sharding().mesh(), P()));
        return {AnyArray(map<In>(Linearity::scaling, fn::ConjTimes{}, z, weights))};
      }
    };
  }, x);
  return out;
}

/// n = n1 * n2 with n1 and n2 multiples of `pieces`, n1 as near sqrt(n) as there is; 0 if none.
inline int64_t four_step_rows(int64_t n, int64_t pieces) {
  int64_t best = 0;
  for (int64_t n1 = pieces; n1 <= n / pieces; n1 += pieces)
    if (n % n1 == 0 && (n / n1) % pieces == 0 &&
        (best == 0 || std::abs(double(n1) - std::sqrt(double(n))) < std::abs(double(best) - std::sqrt(double(n)))))
      best = n1;
  return best;
}

/// Whether a complex 1-D transform of n points over `pieces` devices moves no more bytes in four
/// steps than gathered: three all-to-alls of (p - 1)/p of a device's n/p values against (p - 1)/p
/// of all n values to every device. So from 3 pieces on (equal at 3, where no device then holds
/// the whole vector); at 2 the four steps moved 1.5x the gather's bytes.
inline bool complex_four_step_pays(int64_t n, int64_t pieces) {
  return pieces > 1 && 3 * (n / pieces - n / pieces / pieces) <= n - n / pieces;
}

/// A c2c transform of a 1-D array split over its only axis, in four steps (Bailey's; FFTW-MPI's
/// 1-D path) rather than gathered: x of length n = n1 n2 seen as the (n1, n2) matrix
/// A[j1, j2] = x[j1 n2 + j2] (each device whole rows: its piece as it is), transforms of length n1
/// down the columns, twiddles w^(k1 j2) (w = e^(-+2 pi i / n)), transforms of length n2 along the
/// rows, and X[k1 + n1 k2] = C[k1, k2], the transpose read back as a vector. Three all-to-alls of
/// n / devices elements each; every op is dax's own, so it runs sharded and has its gradient.
/// Empty when it does not apply: not 1-D, not split, no n1, n2 multiples of the pieces, or where
/// complex_four_step_pays does not (then gathered).
template <class R>
std::optional<DistArray<std::complex<R>>> four_step(const DistArray<std::complex<R>>& x, bool forward, fft::Norm norm) {
  using C = std::complex<R>;
  if (x.ndim() != 1) return std::nullopt;
  const NamedSharding start = with_unreduced_axes(x.sharding(), 1, {});
  const int64_t pieces = start.num_pieces(0), n = x.shape()[0];
  if (!complex_four_step_pays(n, pieces)) return std::nullopt;
  const int64_t n1 = four_step_rows(n, pieces), n2 = n1 > 0 ? n / n1 : 0;
  if (n1 == 0) return std::nullopt;
  const Mesh& mesh = start.mesh();
  const std::vector<int>& split = start.dim_axes(0);
  const NamedSharding rows = make_sharding(mesh, {split, {}}, {});
  const DistArray<C> a = reshape(reshard(x, start), {n1, n2});
  const DistArray<C> b = run_fft<C>(forward ? "fft (four-step)" : "ifft (four-step)", reshard(a, rows), {0},
                                    FftKind::c2c, forward, norm, fft::Output::transposed, a.shape());  // (k1, j2)
  // The twiddles where b's pieces lie (no communication): e^(-+2 pi i ((k1 j2) mod n) / n).
  const double sign = forward ? -1 : 1;
  const DistArray<C> twiddles = make_local<C>(Shape{n1, n2}, b.sharding(), [&](C* data, const Box& box) {
    dev::write_from_host(data, numel(box), [&](C* piece) {
      for (int64_t k1 = box[0].start; k1 < box[0].stop; ++k1)
        for (int64_t j2 = box[1].start; j2 < box[1].stop; ++j2) {
          const double angle = sign * 2 * std::numbers::pi * double((k1 * j2) % n) / double(n);
          *piece++ = C(R(std::cos(angle)), R(std::sin(angle)));
        }
    });
  });
  const DistArray<C> d = run_fft<C>(forward ? "fft (four-step)" : "ifft (four-step)", b * twiddles, {1},
                                    FftKind::c2c, forward, norm, fft::Output::transposed, a.shape());  // (k1, k2)
  return reshard(reshape(reshard(transpose(d), rows), {n}), start);  // X[k1 + n1 k2] = d[k1, k2]
}

/// Whether a real 1-D transform of n points over `pieces` devices moves fewer bytes in four steps
/// than gathered: the four steps transform n complex values (three all-to-alls of (p - 1)/p of a
/// device's n/p, each value twice a real one), gathering brings (p - 1)/p of the n real values to
/// every device. So from 7 pieces on; below, the gather is also faster (2 ranks, 2^22 doubles:
/// 0.07 s against 0.10 s each way), though every device then holds and transforms the whole vector.
inline bool real_four_step_pays(int64_t n, int64_t pieces) {
  return pieces > 1 && 3 * 2 * (n / pieces - n / pieces / pieces) < n - n / pieces &&
         four_step_rows(n, pieces) > 0;
}

/// rfft of a real 1-D array split over its only axis where real_four_step_pays, without gathering
/// it: the four-step complex transform of x + 0i, its first n / 2 + 1 entries kept (in x's layout).
/// Twice a real transform's arithmetic, spread over the devices instead of done whole on each.
/// Empty where it does not pay (then gathered).
template <class R>
std::optional<DistArray<std::complex<R>>> four_step_rfft(const DistArray<R>& x, fft::Norm norm) {
  if (x.ndim() != 1) return std::nullopt;
  const NamedSharding start = with_unreduced_axes(x.sharding(), 1, {});
  const int64_t n = x.shape()[0];
  if (!real_four_step_pays(n, start.num_pieces(0))) return std::nullopt;
  const DistArray<R> re = reshard(x, start);
  auto z = four_step(dax::complex(re, zeros<R>(re.shape(), start)), true, norm);
  return dax::slice(*z, {0}, {n / 2 + 1});
}

/// irfft to length n of a 1-D spectrum of n / 2 + 1 entries split over its only axis, without
/// gathering it where that pays: x[j] = Re(ifft(y)[j]) for y = the spectrum zero-padded to n with its bins weighted
/// by how often the Hermitian spectrum holds them (1 at 0 and at n / 2, 2 between), which is what
/// c2r computes (the imaginary parts of bins 0 and n / 2 drop out of Re as they do there).
/// Empty where real_four_step_pays does not (the n / 2 + 1 complex values gathered are as many
/// bytes as n real ones).
template <class R>
std::optional<DistArray<R>> four_step_irfft(const DistArray<std::complex<R>>& x, int64_t n, fft::Norm norm) {
  using C = std::complex<R>;
  if (x.ndim() != 1) return std::nullopt;
  const NamedSharding start = with_unreduced_axes(x.sharding(), 1, {});
  if (!real_four_step_pays(n, start.num_pieces(0))) return std::nullopt;
  const DistArray<C> y = padded_with_zeros(reshard(x, start), Shape{n});
  const DistArray<C> weights = make_local<C>(Shape{n}, y.sharding(), [&](C* data, const Box& box) {
    dev::write_from_host(data, numel(box), [&](C* piece) {
      for (int64_t k = box[0].start; k < box[0].stop; ++k) *piece++ = C(k == 0 || 2 * k == n ? 1 : 2);
    });
  });
  auto full = four_step(y * weights, false, norm);
  return dax::real(*full);
}

/// x cropped or padded with zeros (at the end) to `lengths[i]` along `axes[i]`, as NumPy's n / s
/// do, in x's sharding (only the elements whose owner changes move); x itself where every length
/// already fits.
template <class T>
DistArray<T> fit_lengths(const DistArray<T>& x, const std::vector<int>& axes, const std::vector<int64_t>& lengths,
                         const char* op) {
  DistArray<T> out = x;
  for (size_t i = 0; i < axes.size(); ++i) {
    const int a = axes[i];
    const int64_t m = out.shape()[a], want = lengths[i];
    DAX_CHECK(want > 0, op, ": the length along axis ", a, " must be positive, got ", want);
    if (m > want) {
      std::vector<int64_t> start(out.ndim(), 0), stop(out.shape().begin(), out.shape().end());
      stop[a] = want;
      out = slice(out, start, stop);
    } else if (m < want) {
      Shape padded = out.shape();
      padded[a] = want;
      out = padded_with_zeros(out, padded);  // a split axis stays split: nothing gathered
    }
  }
  return out;
}

/// The axes of an n-dimensional transform: all of them when `axes` is empty.
inline std::vector<int> fftn_axes(const std::vector<int>& axes, size_t ndim, const char* op) {
  if (!axes.empty()) return fft_axes(axes, ndim, op);
  std::vector<int> all(ndim);
  for (size_t d = 0; d < ndim; ++d) all[d] = static_cast<int>(d);
  return all;
}

/// fftn_axes, with NumPy's s giving one length per axis (`lengths` of them).
inline std::vector<int> lengths_axes(size_t lengths, const std::vector<int>& axes, size_t ndim, const char* op) {
  const auto ax = fftn_axes(axes, ndim, op);
  DAX_CHECK(lengths == ax.size(), op, ": s has ", lengths, " lengths for ", ax.size(), " axes");
  return ax;
}

}  // namespace dax::detail

namespace dax::fft {

/// The n-dimensional discrete Fourier transform over `axes` (all when empty), numpy.fft.fftn.
template <class R>
DistArray<std::complex<R>> fftn(const DistArray<std::complex<R>>& x, const std::vector<int>& axes = {},
                                Norm norm = Norm::backward, Output output = Output::like_input) {
  const auto ax = detail::fftn_axes(axes, x.ndim(), "fftn");
  if (auto r = detail::four_step(x, true, norm)) return *r;
  return detail::run_fft<std::complex<R>>("fftn", x, ax, detail::FftKind::c2c, true, norm, output, x.shape());
}

/// The inverse of fftn (numpy.fft.ifftn): ifftn(fftn(x)) == x.
template <class R>
DistArray<std::complex<R>> ifftn(const DistArray<std::complex<R>>& x, const std::vector<int>& axes = {},
                                 Norm norm = Norm::backward, Output output = Output::like_input) {
  const auto ax = detail::fftn_axes(axes, x.ndim(), "ifftn");
  if (auto r = detail::four_step(x, false, norm)) return *r;
  return detail::run_fft<std::complex<R>>("ifftn", x, ax, detail::FftKind::c2c, false, norm, output, x.shape());
}

/// The transform along one axis (numpy.fft.fft); the array keeps its sharding.
template <class R>
DistArray<std::complex<R>> fft(const DistArray<std::complex<R>>& x, int axis = -1, Norm norm = Norm::backward) {
  const auto ax = detail::fft_axes({axis}, x.ndim(), "fft");
  if (auto r = detail::four_step(x, true, norm)) return *r;
  return detail::run_fft<std::complex<R>>("fft", x, ax, detail::FftKind::c2c,
                                          true, norm, Output::like_input, x.shape());
}

/// The inverse along one axis (numpy.fft.ifft).
template <class R>
DistArray<std::complex<R>> ifft(const DistArray<std::complex<R>>& x, int axis = -1, Norm norm = Norm::backward) {
  const auto ax = detail::fft_axes({axis}, x.ndim(), "ifft");
  if (auto r = detail::four_step(x, false, norm)) return *r;
  return detail::run_fft<std::complex<R>>("ifft", x, ax, detail::FftKind::c2c,
                                          false, norm, Output::like_input, x.shape());
}

/// The transform of real input over `axes` (all when empty), numpy.fft.rfftn: the last axis
/// becomes n / 2 + 1 long (the rest of the spectrum is its conjugate mirror).
template <class R>
  requires std::is_same_v<R, float> || std::is_same_v<R, double>
DistArray<std::complex<R>> rfftn(const DistArray<R>& x, const std::vector<int>& axes = {}, Norm norm = Norm::backward,
                                 Output output = Output::like_input) {
  const auto ax = detail::fftn_axes(axes, x.ndim(), "rfftn");
  DAX_CHECK(!ax.empty(), "rfftn: a scalar has no axis to transform");
  Shape out_shape = x.shape();
  out_shape[ax.back()] = x.shape()[ax.back()] / 2 + 1;
  if (auto r = detail::four_step_rfft(x, norm)) return *r;
  return detail::run_fft<std::complex<R>>("rfftn", x, ax, detail::FftKind::r2c, true, norm, output, out_shape);
}

/// rfftn along one axis (numpy.fft.rfft).
template <class R>
  requires std::is_same_v<R, float> || std::is_same_v<R, double>
DistArray<std::complex<R>> rfft(const DistArray<R>& x, int axis = -1, Norm norm = Norm::backward) {
  return rfftn(x, {axis}, norm);
}

/// The inverse of rfftn (numpy.fft.irfftn): real output whose lengths along `axes` are `s` (by
/// default the input's, except the last axis's 2 (m - 1)). As NumPy, the input is first cropped or
/// padded with zeros to s's lengths along those axes (the last to s.back() / 2 + 1).
template <class R>
DistArray<R> irfftn(const DistArray<std::complex<R>>& x, const std::vector<int64_t>& s = {},
                    const std::vector<int>& axes = {}, Norm norm = Norm::backward, Output output = Output::like_input) {
  const auto ax = detail::fftn_axes(axes, x.ndim(), "irfftn");
  DAX_CHECK(!ax.empty(), "irfftn: a scalar has no axis to transform");
  DAX_CHECK(s.empty() || s.size() == ax.size(), "irfftn: s has ", s.size(), " lengths for ", ax.size(), " axes");
  Shape out_shape = x.shape();
  std::vector<int64_t> need(ax.size());  // the input values each output length takes
  for (size_t i = 0; i < ax.size(); ++i) {
    const int64_t m = x.shape()[ax[i]];
    const bool last = i + 1 == ax.size();
    const int64_t want = s.empty() ? (last ? 2 * (m - 1) : m) : s[i];
    DAX_CHECK(want > 0, "irfftn: the output length along axis ", ax[i], " must be positive, got ", want);
    out_shape[ax[i]] = want;
    need[i] = last ? want / 2 + 1 : want;
  }
  const DistArray<std::complex<R>> input = detail::fit_lengths(x, ax, need, "irfftn");
  if (auto r = detail::four_step_irfft(input, out_shape[0], norm)) return *r;
  return detail::run_fft<R>("irfftn", input, ax, detail::FftKind::c2r, false, norm, output, out_shape);
}

/// irfftn along one axis with output length n (numpy.fft.irfft; n = -1: 2 (m - 1)).
template <class R>
DistArray<R> irfft(const DistArray<std::complex<R>>& x, int64_t n = -1, int axis = -1, Norm norm = Norm::backward) {
  return irfftn(x, n < 0 ? std::vector<int64_t>{} : std::vector<int64_t>{n}, {axis}, norm);
}

/// numpy.fft's `n` for the one-axis transforms: the input cropped or padded with zeros to n along
/// the axis first (dax::fft::fft(x, Length(16), 0) is numpy.fft.fft(x, n=16, axis=0)).
struct Length {
  explicit Length(int64_t length) : n(length) {}  // explicit: fft(x, 0) stays the axis
  int64_t n;
};
/// numpy.fft's `s` for the n-axis ones: the lengths along `axes` (all axes when empty, then one
/// length per dimension).
struct Lengths {
  explicit Lengths(std::vector<int64_t> lengths) : s(std::move(lengths)) {}  // explicit: fftn(x, {}) stays the axes
  std::vector<int64_t> s;
};


template <class R>
DistArray<std::complex<R>> fft(const DistArray<std::complex<R>>& x, Length n, int axis = -1, Norm norm = Norm::backward) {
  return fft(detail::fit_lengths(x, detail::fft_axes({axis}, x.ndim(), "fft"), {n.n}, "fft"), axis, norm);
}
template <class R>
DistArray<std::complex<R>> ifft(const DistArray<std::complex<R>>& x, Length n, int axis = -1, Norm norm = Norm::backward) {
  return ifft(detail::fit_lengths(x, detail::fft_axes({axis}, x.ndim(), "ifft"), {n.n}, "ifft"), axis, norm);
}
template <class R>
  requires std::is_same_v<R, float> || std::is_same_v<R, double>
DistArray<std::complex<R>> rfft(const DistArray<R>& x, Length n, int axis = -1, Norm norm = Norm::backward) {
  return rfft(detail::fit_lengths(x, detail::fft_axes({axis}, x.ndim(), "rfft"), {n.n}, "rfft"), axis, norm);
}
template <class R>
DistArray<std::complex<R>> fftn(const DistArray<std::complex<R>>& x, const Lengths& s, const std::vector<int>& axes = {},
                                Norm norm = Norm::backward, Output output = Output::like_input) {
  const auto ax = detail::lengths_axes(s.s.size(), axes, x.ndim(), "fftn");
  return fftn(detail::fit_lengths(x, ax, s.s, "fftn"), ax, norm, output);
}
template <class R>
DistArray<std::complex<R>> ifftn(const DistArray<std::complex<R>>& x, const Lengths& s, const std::vector<int>& axes = {},
                                 Norm norm = Norm::backward, Output output = Output::like_input) {
  const auto ax = detail::lengths_axes(s.s.size(), axes, x.ndim(), "ifftn");
  return ifftn(detail::fit_lengths(x, ax, s.s, "ifftn"), ax, norm, output);
}
template <class R>
  requires std::is_same_v<R, float> || std::is_same_v<R, double>
DistArray<std::complex<R>> rfftn(const DistArray<R>& x, const Lengths& s, const std::vector<int>& axes = {},
                                 Norm norm = Norm::backward, Output output = Output::like_input) {
  const auto ax = detail::lengths_axes(s.s.size(), axes, x.ndim(), "rfftn");
  return rfftn(detail::fit_lengths(x, ax, s.s, "rfftn"), ax, norm, output);
}

/// Which FFTW planner makes a geometry's plan the first time: automatic (the default: measured
/// trial runs, except for pieces that other devices hold copies of, whose plans are estimated so
/// the copies stay bit-identical), estimate (at once, the same plan on every rank) or measure
/// (always timed: copies of a replicated result may then differ in the last bits). Plans already
/// made are kept.
inline void set_planning(detail::cpu::FftPlanning planning) { detail::cpu::fft_planning() = planning; }
using Planning = detail::cpu::FftPlanning;

}  // namespace dax::fft
