// AdamW's leaves waiting for one multi-tensor kernel (backend/adamw_update.hpp): what each
// leaf's update reads and writes, what it keeps alive until the kernel has run, and what it does
// after (its new parameter moved to the parameter's own sharding, a collective under ZeRO).
#pragma once

#include <cstdint>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

#include <dax/array/dist_array.hpp>
#include <dax/backend/adamw_update.hpp>
#include <dax/backend/device_ops.hpp>
#include <dax/core/float16.hpp>
#include <dax/optim/leaf_update.hpp>

namespace dax::detail {

/// AdamW's leaves waiting for their kernel (backend/adamw_update.hpp: every waiting tensor of
/// one element type in one multi-tensor kernel), with what each keeps alive until then and what
/// it does after (its new parameter moved to the parameter's sharding). Leaves join in tree
/// order; a group is flushed before it would hold more than group_bytes of one array, counted in
/// global sizes so that every rank flushes at the same leaf (the moves after are collective).
class AdamWPending {
 public:
  static constexpr int64_t kGroupBytes = int64_t(64) << 20;

  AdamWPending(double b1, double b2, double decay, double step_size, double inv_sqrt_bc2, double eps,
               int64_t group_bytes = kGroupBytes)
      : b1_(b1), b2_(b2), decay_(decay), step_size_(step_size), inv_sqrt_bc2_(inv_sqrt_bc2), eps_(eps),
        group_bytes_(group_bytes) {}

  /// Queues p's update (ps, gs, m, v laid out alike; p_out, m_out, v_out where the new values go,
  /// laid out the same: updated_in's choice, new arrays or the inputs themselves), then `after`,
  /// once the kernel has run.
  template <class T, class After>
  void add(const DistArray<T>& ps, const DistArray<T>& gs, const DistArray<T>& m, const DistArray<T>& v,
           const DistArray<T>& p_out, const DistArray<T>& m_out, const DistArray<T>& v_out, After&& after) {
    const int64_t bytes = numel(ps.shape()) * static_cast<int64_t>(sizeof(T));
    if (!after_.empty() && bytes_ + bytes > group_bytes_) flush();
    bytes_ += bytes;
    if (ps.is_addressable() && ps.local_size() > 0)
      std::get<std::vector<AdamWTensor<T>>>(tensors_).push_back(
          {ps.local_data().data(), gs.local_data().data(), m.local_data().data(), v.local_data().data(),
           written(p_out), written(m_out), written(v_out), ps.local_size()});
    // Every buffer the kernel reads or writes stays alive until it has run.
    after_.push_back([ps, gs, m, v, p_out, m_out, v_out, after = std::forward<After>(after)] { after(); });
  }

  /// Runs the waiting tensors' kernels, then what each leaf does after.
  void flush() {
    std::apply([&](auto&... lists) { (launch(lists), ...); }, tensors_);
    for (auto& f : after_) f();
    after_.clear();
    bytes_ = 0;
  }

 private:
  /// Where the kernel writes x's piece (no one else reads it: updated_in's choice).
  template <class T>
  static T* written(const DistArray<T>& x) {
    return static_cast<T*>(x.buffer()->data());
  }

  template <class T>
  void launch(std::vector<AdamWTensor<T>>& list) {
    using C = compute_t<T>;
    if (list.empty()) return;
    const AdamWCoefficients<C> k{C(b1_), C(1 - b1_), C(b2_), C(1 - b2_), C(decay_), C(step_size_), C(inv_sqrt_bc2_),
                                 C(eps_)};
    dev::adamw_update(list.data(), static_cast<int64_t>(list.size()), k);
    list.clear();
  }

  double b1_, b2_, decay_, step_size_, inv_sqrt_bc2_, eps_;
  int64_t group_bytes_;
  std::tuple<std::vector<AdamWTensor<float>>, std::vector<AdamWTensor<double>>, std::vector<AdamWTensor<bfloat16>>,
             std::vector<AdamWTensor<half>>>
      tensors_;
  std::vector<std::function<void()>> after_;
  int64_t bytes_ = 0;
};

/// Where an update of x writes: x's own buffer when x's handle is its only holder (no one can see
/// the change: the optimizer's moments after the first step, a parameter the caller holds no copy
/// of) and that buffer is not a view into another array's (a reshard that kept most of its
/// input), else a new array laid out as x (the moments share one zero buffer until the first step; a
/// state() or a copy of the parameters keeps the old values).
template <class T>
DistArray<T> updated_in(const DistArray<T>& x) {
  if (!x.stores_swapped() && x.buffer() && x.buffer().use_count() == 1 && !x.buffer()->is_view()) return x;
  return new_pieces<T>(x.sharding(), x.shape());
}

}  // namespace detail
