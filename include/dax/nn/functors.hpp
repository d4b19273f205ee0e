// The elementwise functions of nn/'s fused kernels, as small DAX_HOST_DEVICE function objects
// (the style of ops/functors.hpp): the same object runs in the CPU loops and in the CUDA
// broadcast / generate kernels. Arithmetic runs in compute_t<T> (float for the 16-bit types).
#pragma once

#include <cmath>
#include <cstdint>

#include <dax/core/float16.hpp>
#include <dax/core/macros.hpp>
#include <dax/core/float_math.hpp>

namespace dax::detail::nn_fn {

/// (x - mean) * rstd.
struct Normalize {
  template <class T>
  DAX_HOST_DEVICE T operator()(T x, T mean, T rstd) const {
    using C = compute_t<T>;
    return static_cast<T>((static_cast<C>(x) - static_cast<C>(mean)) * static_cast<C>(rstd));
  }
};

/// 1 / sqrt(v + eps).
template <class T>
struct RsqrtPlus {
  compute_t<T> eps;
  DAX_HOST_DEVICE T operator()(T v) const {
    using C = compute_t<T>;
    return static_cast<T>(C(1) / std::sqrt(static_cast<C>(v) + eps));
  }
};

/// xhat * gamma + beta.
struct ScaleShift {
  template <class T>
  DAX_HOST_DEVICE T operator()(T xhat, T gamma, T beta) const {
    using C = compute_t<T>;
    return static_cast<T>(static_cast<C>(xhat) * static_cast<C>(gamma) + static_cast<C>(beta));
  }
};

/// x * r * gamma.
struct Scale2 {
  template <class T>
  DAX_HOST_DEVICE T operator()(T x, T r, T gamma) const {
    using C = compute_t<T>;
    return static_cast<T>(static_cast<C>(x) * static_cast<C>(r) * static_cast<C>(gamma));
  }
};

/// layer_norm's input cotangent: rstd (g gamma - mean(g gamma) - xhat mean(g gamma xhat)).
struct LayerNormGradX {
  template <class T>
  DAX_HOST_DEVICE T operator()(T g_gamma, T mean_g, T xhat, T mean_gx, T rstd) const {
    using C = compute_t<T>;
    return static_cast<T>(static_cast<C>(rstd) * (static_cast<C>(g_gamma) - static_cast<C>(mean_g) -
                                                  static_cast<C>(xhat) * static_cast<C>(mean_gx)));
  }
};

/// rms_norm's input cotangent: r (g gamma - x r^2 mean(g gamma x)).
struct RmsNormGradX {
  template <class T>
  DAX_HOST_DEVICE T operator()(T g, T gamma, T x, T r, T mean_gx) const {
    using C = compute_t<T>;
    const C rr = static_cast<C>(r);
    return static_cast<T>(rr * (static_cast<C>(g) * static_cast<C>(gamma) -
                                static_cast<C>(x) * rr * rr * static_cast<C>(mean_gx)));
  }
};

/// Whether flat element i of a (..., q, k) array lies on or below the causal diagonal; the last q
/// queries of a k-long sequence when q < k (decoding with a cache), as jnp.tril(ones, k - q).
struct Causal {
  int64_t q, k;
  DAX_HOST_DEVICE bool operator()(uint64_t i) const {
    const int64_t col = static_cast<int64_t>(i % static_cast<uint64_t>(k));
    const int64_t row = static_cast<int64_t>((i / static_cast<uint64_t>(k)) % static_cast<uint64_t>(q));
    return col <= row + (k - q);
  }
};

/// cond ? x : fill.
template <class T>
struct SelectOr {
  T fill;
  DAX_HOST_DEVICE T operator()(T x, bool cond) const { return cond ? x : fill; }
};

/// exp(x - m).
struct ExpShift {
  template <class T>
  DAX_HOST_DEVICE T operator()(T x, T m) const {
    using C = compute_t<T>;
    return static_cast<T>(fast_exp(static_cast<C>(x) - static_cast<C>(m)));  // vectorizable on the CPU
  }
};

/// softmax's input cotangent: y (g - s), s = sum(g y) over the row.
struct SoftmaxGrad {
  template <class T>
  DAX_HOST_DEVICE T operator()(T g, T y, T s) const {
    using C = compute_t<T>;
    return static_cast<T>(static_cast<C>(y) * (static_cast<C>(g) - static_cast<C>(s)));
  }
};

/// The index along the last dimension (of size n) of flat element i.
template <class L>
struct LastIndex {
  int64_t n;
  DAX_HOST_DEVICE L operator()(uint64_t i) const { return static_cast<L>(i % static_cast<uint64_t>(n)); }
};

/// x where the column is the label, else 0.
struct PickLabel {
  template <class T, class L>
  DAX_HOST_DEVICE T operator()(T x, L label, L column) const { return label == column ? x : T(0); }
};

/// exp(x - lse) - [label == column], times the scalar `scale`: cross-entropy's logit cotangent.
struct CrossEntropyGrad {
  template <class T, class L>
  DAX_HOST_DEVICE T operator()(T x, T lse, L label, L column, T scale) const {
    using C = compute_t<T>;
    const C p = std::exp(static_cast<C>(x) - static_cast<C>(lse));
    return static_cast<T>(static_cast<C>(scale) * (label == column ? p - C(1) : p));
  }
};

}  // namespace dax::detail::nn_fn
