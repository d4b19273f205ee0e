// The training step of examples/transformer_lm (the model of examples/transformer_lm.hpp) timed
// with dax: value_and_grad of the loss, clip_by_global_norm(1.0), AdamW. At N ranks the mesh is
// (data N, model 1): data parallelism, as PyTorch's DistributedDataParallel in
// benchmarks/train_step_torch.py, which benchmarks/train_step.py runs beside it. Prints one JSON
// line: ranks, batch, tokens per second, ms per step, the bytes one step received per device and
// DESIGN §6's formula for them.
//   mpirun -np N train_step [--batch B] [--steps S] [--warmup W] [--layers L] [--d-model D]
//                           [--heads H] [--vocab V] [--seq T] [--precision f32|bf16] [--profile FILE]
//                           [--attention auto|fused|composite] (dot_product_attention's implementation)
// The nvcc build (train_step_cuda, GPU builds only) runs the same step on the GPU; with it
// benchmarks/train_step_gpu.py compares a GPT-2-small-sized model with PyTorch eager (issue 40).
#include <dax/dax.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "transformer_lm.hpp"

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  lm::Config c;
  c.batch = 16;
  int steps = 30, warmup = 5;
  std::string profile_path;  // --profile FILE: one more step under dax::profile, its trace written there
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--batch") c.batch = std::atoi(value.c_str());
    else if (flag == "--steps") steps = std::atoi(value.c_str());
    else if (flag == "--warmup") warmup = std::atoi(value.c_str());
    else if (flag == "--layers") c.layers = std::atoi(value.c_str());
    else if (flag == "--d-model") c.d_model = std::atoi(value.c_str());
    else if (flag == "--heads") c.heads = std::atoi(value.c_str());
    else if (flag == "--vocab") c.vocab = std::atoi(value.c_str());
    else if (flag == "--seq") c.seq = std::atoi(value.c_str());
    else if (flag == "--profile") profile_path = value;
    else if (flag == "--attention" && (value == "auto" || value == "fused" || value == "composite"))
      c.attention = value == "fused"       ? dax::AttentionImplementation::fused
                    : value == "composite" ? dax::AttentionImplementation::composite
                                           : dax::AttentionImplementation::automatic;
    else if (flag == "--precision" && (value == "f32" || value == "bf16"))
      c.compute = value == "bf16" ? dax::DType::bfloat16 : dax::DType::float32;
    else throw dax::Error("train_step: unknown flag or value '" + flag + " " + value + "'");
  }
  const lm::Layout layout{dax::Mesh({rt.size(), 1}, {"data", "model"}), false};
  lm::Model params = lm::init(c, layout, 7);
  dax::optim::AdamW opt(params, {.lr = 3e-4, .weight_decay = 0.01});
  auto loss_fn = [&](const lm::Model& p, const lm::Ids& ids, const lm::Ids& positions, const lm::Ids& labels) {
    return lm::loss(c, layout, p, ids, positions, labels);
  };
  double pieces_bytes = 0;
  dax::tree_for_each([&](const lm::Array& p) { pieces_bytes += static_cast<double>(p.local_size()) * 4; }, params);

  // Random bytes as text (the values do not change the work); windows drawn as the example does.
  std::mt19937 gen(99);
  std::vector<int32_t> text(1 << 16);
  for (auto& ch : text) ch = static_cast<int32_t>(gen() % static_cast<uint32_t>(c.vocab));
  std::vector<int32_t> positions_host(static_cast<size_t>(c.tokens()));
  for (size_t i = 0; i < positions_host.size(); ++i) positions_host[i] = static_cast<int32_t>(i % static_cast<size_t>(c.seq));
  const dax::Shape shape{c.tokens()};
  const auto positions = dax::device_put(positions_host, shape, layout.tokens());
  dax::CommStats one_step;
  auto step = [&] {
    std::vector<int32_t> ids, labels;
    for (int64_t row = 0; row < c.batch; ++row) {
      const size_t s = gen() % (text.size() - static_cast<size_t>(c.seq) - 1);
      ids.insert(ids.end(), text.begin() + static_cast<long>(s), text.begin() + static_cast<long>(s) + c.seq);
      labels.insert(labels.end(), text.begin() + static_cast<long>(s) + 1, text.begin() + static_cast<long>(s) + c.seq + 1);
    }
    dax::comm_stats().reset();
    auto [loss, grads] = dax::value_and_grad(loss_fn)(params, dax::device_put(ids, shape, layout.tokens()), positions,
                                                       dax::device_put(labels, shape, layout.tokens()));
    opt.step(params, dax::optim::clip_by_global_norm(grads, 1.0));
    one_step = dax::comm_stats();
    return loss;
  };
  // A barrier: a sum over every rank, read on the host.
  const auto barrier = [&] { dax::sum(dax::ones<float>({rt.size()}, layout.tokens())).to_host(); };
  for (int i = 0; i < warmup; ++i) step().to_host();
  barrier();
  const auto start = std::chrono::steady_clock::now();
  std::optional<dax::DistArray<float>> last_loss;
  for (int i = 0; i < steps; ++i) last_loss = step();
  const float final_loss = last_loss ? last_loss->to_host()[0] : 0.0f;
  params.head.to_host();  // the last update has finished (the CPU backend runs eagerly anyway)
  barrier();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!profile_path.empty()) {  // after the timing: the profile waits for the device after every op
    auto trace = dax::profile(profile_path);
    step().to_host();
  }
  const lm::StepBytes formula =
      lm::formula_bytes(c, layout, static_cast<double>(c.tokens()) / rt.size(), pieces_bytes);
  if (rt.rank() == 0)
    std::printf("{\"ranks\": %d, \"backend\": \"%s\", \"batch\": %lld, \"tokens_per_s\": %.1f, \"step_ms\": %.3f, "
                "\"bytes_per_step\": %lld, \"formula_bytes\": %.0f, \"loss\": %.4f}\n",
                rt.size(), rt.backend() == dax::Backend::cuda ? "cuda" : "cpu", static_cast<long long>(c.batch), static_cast<double>(c.tokens()) * steps / seconds,
                1e3 * seconds / steps, static_cast<long long>(one_step.total_bytes()), formula.total(),
                static_cast<double>(final_loss));
  return 0;
}
