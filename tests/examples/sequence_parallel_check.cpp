// Sequence parallelism (Megatron-SP, lm::Layout::sp) on the transformer example's model, against
// the same model without it, at every model-axis size in {2, 4} that divides the job's ranks (the
// rest of the ranks on 'data'), with fresh random token ids: for one value_and_grad on the same
// parameters
//   - the loss and every gradient agree (float32: relative 1e-5 on the loss, 1e-4 of the largest
//     gradient element on each leaf);
//   - the activation bytes over 'model' (reduce-scatters + all-gathers with SP, all-reduces without;
//     the cross-entropy's three small all-reduces in both) are equal: SP turns each all-reduce into a
//     reduce-scatter and an all-gather of the same total;
//   - the residual stream (the embedding's output, every layer norm's input and output, the last
//     hidden state) holds 1/model of the elements on each device.
// Every rank's verdict is gathered; prints one line per case and exits 1 if any differs.
#include <dax/dax.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../../examples/transformer_lm.hpp"

namespace {

struct Outcome {
  double loss = 0;
  std::optional<lm::Model> grads;
  double model_axis_bytes = 0;  // all-reduce + reduce-scatter + all-gather over 'model'
  double reduce_scatter = 0, all_gather = 0;
  int64_t residual_elements = 0;  // this device's elements of the last hidden state
  int64_t normed_elements = 0;    // and of its layer norm
};

Outcome run(const lm::Config& c, const lm::Layout& layout, const lm::Model& params, const std::vector<int32_t>& ids,
            const std::vector<int32_t>& labels) {
  std::vector<int32_t> positions(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) positions[i] = static_cast<int32_t>(i % static_cast<size_t>(c.seq));
  const dax::Shape shape{c.tokens()};
  const auto tokens = dax::device_put(ids, shape, layout.tokens());
  const auto where = dax::device_put(positions, shape, layout.tokens());
  const auto targets = dax::device_put(labels, shape, layout.tokens());
  Outcome o;
  dax::comm_stats().reset();
  auto [loss, grads] = dax::value_and_grad(
      [&](const lm::Model& p) { return lm::loss(c, layout, p, tokens, where, targets); })(params);
  const dax::CommStats& st = dax::comm_stats();
  o.reduce_scatter = double(st.of("reduce_scatter", "('model',)").bytes);
  o.all_gather = double(st.of("all_gather", "('model',)").bytes);
  o.model_axis_bytes = double(st.of("all_reduce", "('model',)").bytes) + o.reduce_scatter + o.all_gather;
  o.loss = loss.to_host()[0];
  o.grads = grads;
  const lm::Array x = lm::hidden(c, layout, params, tokens, where);
  o.residual_elements = x.local_size();
  o.normed_elements = dax::layer_norm(x, params.lnf_g, params.lnf_b).local_size();
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const int n = rt.size();
  const dax::Mesh ranks({n}, {"ranks"});
  std::mt19937 gen(static_cast<unsigned>(std::random_device{}()));
  int cases = 0, failed = 0;
  for (int64_t model : {2, 4}) {
    if (n % model != 0) continue;
    lm::Config c;
    c.layers = 2, c.seq = 16, c.batch = 8, c.d_model = 64, c.heads = 4;
    const dax::Mesh mesh({n / model, model}, {"data", "model"});
    const lm::Layout plain{mesh, false, false}, sp{mesh, false, true};
    // The same fresh ids on every rank: rank 0 draws them, everyone takes rank 0's.
    std::vector<int32_t> draw(static_cast<size_t>(2 * c.tokens()));
    for (auto& v : draw) v = static_cast<int32_t>(gen() % static_cast<unsigned>(c.vocab));
    const auto shared = dax::device_put(draw, {2 * c.tokens()}, dax::NamedSharding(ranks, dax::P())).to_host();
    const std::vector<int32_t> ids(shared.begin(), shared.begin() + c.tokens()), labels(shared.begin() + c.tokens(), shared.end());
    const lm::Model params = lm::init(c, plain, 11);
    const Outcome a = run(c, plain, params, ids, labels), b = run(c, sp, params, ids, labels);

    double worst = 0;  // the largest gradient difference, relative to its leaf's largest element
    std::string worst_leaf;
    dax::tree_for_each_with_path([&](const std::string& path, const lm::Array& ga, const lm::Array& gb) {
      const std::vector<float> x = ga.to_host(), y = gb.to_host();
      double scale = 0, diff = 0;
      for (size_t i = 0; i < x.size(); ++i) scale = std::max(scale, double(std::abs(x[i])));
      for (size_t i = 0; i < x.size(); ++i) diff = std::max(diff, double(std::abs(x[i] - y[i])));
      if (diff / std::max(scale, 1e-30) > worst) worst = diff / std::max(scale, 1e-30), worst_leaf = path;
    }, *a.grads, *b.grads);
    const bool loss_ok = std::abs(a.loss - b.loss) <= 1e-5 * std::abs(a.loss);
    const bool grads_ok = worst <= 1e-4;
    const bool bytes_ok = std::abs(a.model_axis_bytes - b.model_axis_bytes) <= 1 && b.reduce_scatter > 0 && b.all_gather > 0;
    const bool memory_ok = b.residual_elements * model == a.residual_elements &&
                           b.normed_elements * model == a.normed_elements && a.residual_elements > 0;
    const bool ok = loss_ok && grads_ok && bytes_ok && memory_ok;
    const std::vector<int32_t> verdicts =
        dax::from_local<int32_t>({ok ? 0 : 1}, {n}, dax::NamedSharding(ranks, dax::P("ranks"))).to_host();
    int bad = 0;
    for (int32_t v : verdicts) bad += v;
    ++cases;
    failed += bad > 0 ? 1 : 0;
    if (rt.rank() == 0)
      std::printf("%-4s mesh (data %lld, model %lld): loss %.7f vs %.7f; largest gradient difference %.2e of its leaf "
                  "(%s); bytes over 'model' %.0f all-reduce vs %.0f = %.0f reduce-scatter + %.0f all-gather + %.0f "
                  "all-reduce (cross-entropy); residual stream %lld vs %lld elements here\n",
                  bad > 0 ? "FAIL" : "ok", static_cast<long long>(n / model), static_cast<long long>(model), a.loss,
                  b.loss, worst, worst_leaf.c_str(), a.model_axis_bytes, b.model_axis_bytes, b.reduce_scatter,
                  b.all_gather, b.model_axis_bytes - b.reduce_scatter - b.all_gather,
                  static_cast<long long>(a.residual_elements), static_cast<long long>(b.residual_elements));
  }
  if (rt.rank() == 0) std::printf("sequence_parallel_check: %d cases, %d differ\n", cases, failed);
  return failed == 0 && cases > 0 ? 0 : 1;
}
