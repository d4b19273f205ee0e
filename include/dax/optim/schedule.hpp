// Learning-rate schedules: a Schedule maps the number of updates already applied (0 for the first
// update, as optax counts) to a learning rate. A number converts to a constant schedule, so an
// optimizer's `.lr` takes either.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <numbers>
#include <type_traits>
#include <utility>

#include <dax/core/error.hpp>

namespace dax::optim {

class Schedule {
 public:
  /// A constant learning rate.
  Schedule(double lr) : fn_([lr](int64_t) { return lr; }) {}  // NOLINT: implicit, so `.lr = 3e-4f` works
  /// Any callable step -> learning rate.
  template <class F>
    requires(!std::is_arithmetic_v<std::remove_cvref_t<F>> && !std::same_as<std::remove_cvref_t<F>, Schedule> &&
             std::invocable<const F&, int64_t> &&
             std::convertible_to<std::invoke_result_t<const F&, int64_t>, double>)
  Schedule(F f) : fn_([f = std::move(f)](int64_t step) { return static_cast<double>(f(step)); }) {}  // NOLINT

  /// The learning rate of the update that follows `step` earlier ones.
  double operator()(int64_t step) const { return fn_(step); }

 private:
  std::function<double(int64_t)> fn_;
};

/// lr at every step (optax.constant_schedule).
inline Schedule constant(double lr) { return Schedule(lr); }

/// optax.warmup_cosine_decay_schedule with init_value 0: linear from 0 to `peak` over
/// `warmup_steps`, then a cosine from `peak` to `end_lr` over the remaining
/// `total_steps - warmup_steps` steps, and `end_lr` after that.
inline Schedule warmup_cosine(double peak, int64_t warmup_steps, int64_t total_steps, double end_lr = 0.0) {
  DAX_CHECK(warmup_steps >= 0 && total_steps > warmup_steps, "warmup_cosine: needs 0 <= warmup_steps < total_steps, got ",
            warmup_steps, " warmup steps of ", total_steps);
  return Schedule([=](int64_t step) {
    if (step < warmup_steps) return peak * static_cast<double>(step) / static_cast<double>(warmup_steps);
    const double decay_steps = static_cast<double>(total_steps - warmup_steps);
    const double t = std::min(static_cast<double>(step - warmup_steps), decay_steps) / decay_steps;
    return end_lr + (peak - end_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
  });
}

}  // namespace dax::optim
