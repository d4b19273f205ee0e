// dax::cross_entropy(logits, labels): the mean over tokens of -log softmax(logits)[label], as a
// custom-VJP function that never gathers the logits. With the vocabulary whole on each device the
// forward is one kernel over the logits' rows (each row's logsumexp and its label's logit,
// backend/cpu/softmax.hpp's logsumexp_pick_rows). With the vocabulary (last) dimension split
// over mesh axes (Megatron's vocab-parallel loss) the forward is three all-reduces of one value per
// token over exactly those axes: the row max (MAX, under stop_gradient: its terms cancel), the sum
// of exponentials and the label's logit (SUMs, each device adding the label's logit only where its
// piece holds that vocabulary index). The backward, (softmax - one_hot) * g / tokens, is one fused
// kernel on each device's own piece: it moves nothing.
#pragma once

#include <cstdint>
#include <tuple>

#include <dax/array/creation.hpp>
#include <dax/autodiff/custom_vjp.hpp>
#include <dax/nn/functors.hpp>
#include <dax/nn/normalization.hpp>
#include <dax/ops/elementwise.hpp>
#include <dax/ops/reduction.hpp>
#include <dax/ops/shape.hpp>
#include <dax/sharding/build.hpp>

namespace dax {
namespace detail {

/// The global indices along the last dimension of `like`, as a (1, ..., 1, V) row split like
/// `like`'s last dimension (generated in place; maps broadcast it over the other dimensions, so
/// it costs V values, not one per element).
template <class L, class T>
DistArray<L> last_index(const DistArray<T>& like) {
  const size_t n = like.ndim();
  Shape shape(n, 1);
  shape[n - 1] = like.shape().back();
  std::vector<std::vector<int>> dims(n);
  dims[n - 1] = like.sharding().dim_axes(n - 1);
  return make_local<L>(shape, make_sharding(like.sharding().mesh(), dims, {}), [&](L* data, const Box& index) {
    if (numel(shape) > 0) dev::generate(data, shape, index, nn_fn::LastIndex<L>{shape.back()});
  });
}

/// Each row's logsumexp and its label's logit, (..., 1) each, from one kernel over z's rows (its
/// last dimension whole) and the labels laid out as those rows (..., 1).
template <class T, class L>
std::pair<DistArray<T>, DistArray<T>> logsumexp_pick(const DistArray<T>& z, const DistArray<L>& label) {
  const ProfiledOp profiled("cross_entropy_rows", z, label);
  const NamedSharding& s = label.sharding();
  const Shape& shape = label.shape();
  Runtime& rt = Runtime::current();
  if (!s.mesh().contains(rt.rank())) return {DistArray<T>(shape, s, nullptr), DistArray<T>(shape, s, nullptr)};
  const int64_t rows = numel(s.device_indices(rt.rank(), shape));
  auto lse = dev::allocate(static_cast<size_t>(rows) * sizeof(T));
  auto picked = dev::allocate(static_cast<size_t>(rows) * sizeof(T));
  dev::logsumexp_pick_rows(z.local_data().data(), label.local_data().data(), rows, z.shape().back(),
                           static_cast<T*>(lse->data()), static_cast<T*>(picked->data()));
  return {DistArray<T>(shape, s, std::move(lse)), DistArray<T>(shape, s, std::move(picked))};
}

}  // namespace detail

/// mean over tokens of -log softmax(logits)[..., label]: logits (..., V) floating, labels (...) of
/// an integer type with values in [0, V) (a label outside picks nothing: its token's loss is its
/// logsumexp). The labels should be replicated over the axes splitting V and split like the
/// logits' other dimensions (then nothing moves them). Returns a replicated scalar.
template <class T, class L>
  requires(detail::is_floating_v<T> && std::is_integral_v<L>)
DistArray<T> cross_entropy(const DistArray<T>& logits, const DistArray<L>& labels) {
  DAX_CHECK(logits.ndim() >= 1, "cross_entropy: logits must have a vocabulary dimension, got shape ",
            to_string(logits.shape()));
  const Shape tokens(logits.shape().begin(), logits.shape().end() - 1);
  DAX_CHECK(labels.shape() == tokens, "cross_entropy: labels must have the logits' shape without the last "
            "(vocabulary) dimension, ", to_string(tokens), ", got ", to_string(labels.shape()));
  const int64_t count = numel(tokens);
  DAX_CHECK(count > 0 && logits.shape().back() > 0, "cross_entropy: no tokens or an empty vocabulary in logits of shape ",
            to_string(logits.shape()));
  const auto f = custom_vjp(
      "cross_entropy",
      [count](const DistArray<T>& x, const DistArray<L>& labels) {
        using namespace detail;
        // Partial sums are reduced first: the max and the label's pick need the true logits.
        const DistArray<T> z = nn_reduced(x, "cross_entropy");
        // The labels as a (..., 1) column laid out like the rows of z (replicated over the
        // vocabulary axes): no bytes when they came that way, saved for the backward.
        const NamedSharding rows = unsplit(z.sharding(), z.ndim(), z.ndim() - 1);
        const DistArray<L> column_of_labels = expand_dims(labels, -1);
        check_operand_layout(column_of_labels, rows, "cross_entropy");
        const DistArray<L> label = reshard(column_of_labels, rows);
        if (z.sharding().dim_axes(z.ndim() - 1).empty()) {  // the vocabulary whole: one pass, one kernel
          auto [lse, picked] = logsumexp_pick(z, label);
          DistArray<T> loss = sum(lse - picked) / static_cast<T>(count);
          return std::pair{std::move(loss), std::tuple{z, lse, label}};
        }
        const DistArray<T> m = max(z, {-1}, true);  // all-reduce MAX over the vocabulary axes
        const DistArray<T> s = sum(map<T>(Linearity::none, nn_fn::ExpShift{}, z, m), {-1}, true);  // all-reduce SUM
        const DistArray<L> column = last_index<L>(z);
        const DistArray<T> picked =
            sum(map<T>(Linearity::none, nn_fn::PickLabel{}, z, label, column), {-1}, true);  // all-reduce SUM
        const DistArray<T> lse = m + log(s);
        DistArray<T> loss = sum(lse - picked) / static_cast<T>(count);
        return std::pair{std::move(loss), std::tuple{z, lse, label}};
      },
      [count](const auto& saved, const DistArray<T>& g) {
        using namespace detail;
        const auto& [z, lse, label] = saved;
        // Each device's own piece: the columns are generated where the logits live and the labels
        // and lse are already replicated over the vocabulary axes, so nothing moves.
        const DistArray<T> dz = map<T>(Linearity::none, nn_fn::CrossEntropyGrad{}, z, lse, label,
                                       last_index<L>(z), g / static_cast<T>(count));
        return std::tuple{dz, NoCotangent{}};
      });
  return f(logits, labels);
}

}  // namespace dax
