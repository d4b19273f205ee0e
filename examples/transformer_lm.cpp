// transformer_lm: a decoder-only transformer language model (2 layers, d_model 128, 4 heads, byte
// vocabulary 256, sequence 64) trained with AdamW on text the program writes itself, on a
// (data, model) mesh: Megatron tensor parallelism for the attention heads and the MLP over 'model',
// data parallelism over the batch on 'data', and FSDP (parameters and optimizer state split over
// 'data' too) with --fsdp. The model is examples/transformer_lm.hpp; the layout is one table there.
//
// It prints the loss per step and the bytes one step moves next to DESIGN §6's formulas, and checks
// that (1) the loss at steps 1, 50 and the last agrees with the same training on one device to a
// relative 1e-3 (with several ranks, rank 0 trains that reference alone afterwards), (2) the final
// loss is below the unigram entropy of the training text, and (3) the bytes equal the formulas.
// Run with `mpirun -np N`: an even N makes a (N/2, 2) mesh, an odd N an (N, 1) one (the bytes are
// checked when N/2, or N, divides the batch):
//   transformer_lm [--steps S] [--batch B] [--fsdp]
#include <dax/dax.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "transformer_lm.hpp"

namespace {

/// Text in a small made-up language: sentences of a few word classes, so the model has spelling,
/// word order and punctuation to learn. The same on every rank (a fixed seed).
std::string make_text(size_t bytes) {
  const std::vector<std::string> subjects{"the cat", "a dog", "my sister", "the old man", "our teacher",
                                          "the small bird", "a tired farmer", "the queen", "his friend"};
  const std::vector<std::string> verbs{"sees", "likes", "follows", "paints", "finds", "carries", "hears", "loves"};
  const std::vector<std::string> objects{"the river", "a red apple", "the moon", "an empty box", "the garden",
                                         "a long letter", "the bright lamp", "seven stones"};
  const std::vector<std::string> endings{".", " today.", " at night.", " again!", " slowly.", " in the rain."};
  std::mt19937 gen(2026);
  auto pick = [&](const std::vector<std::string>& words) { return words[gen() % words.size()]; };
  std::string text;
  while (text.size() < bytes) {
    std::string s = pick(subjects) + " " + pick(verbs) + " " + pick(objects) + pick(endings) + " ";
    s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    text += s;
  }
  text.resize(bytes);
  return text;
}

/// The entropy of the text's byte frequencies, in nats: the loss of the best model that ignores
/// context, so a model that learned anything from context ends below it.
double unigram_entropy(const std::string& text) {
  std::vector<double> count(256, 0);
  for (unsigned char ch : text) count[ch] += 1;
  double h = 0;
  for (double n : count)
    if (n > 0) h -= n / static_cast<double>(text.size()) * std::log(n / static_cast<double>(text.size()));
  return h;
}

/// One batch: `batch` windows of seq + 1 bytes at random offsets (the same on every rank).
struct Batch {
  std::vector<int32_t> ids, labels, positions;
};
Batch make_batch(const std::string& text, const lm::Config& c, std::mt19937& gen) {
  Batch b;
  std::uniform_int_distribution<size_t> start(0, text.size() - static_cast<size_t>(c.seq) - 1);
  for (int64_t row = 0; row < c.batch; ++row) {
    const size_t s = start(gen);
    for (int64_t t = 0; t < c.seq; ++t) {
      b.ids.push_back(static_cast<unsigned char>(text[s + static_cast<size_t>(t)]));
      b.labels.push_back(static_cast<unsigned char>(text[s + static_cast<size_t>(t) + 1]));
      b.positions.push_back(static_cast<int32_t>(t));
    }
  }
  return b;
}

struct Run {
  std::vector<double> losses;
  dax::CommStats last_step;
  double pieces_bytes = 0;  // this device's pieces of the parameters at their compute layout
  double seconds = 0;
};

/// Trains `steps` AdamW steps on `layout` and returns the loss of every step.
Run train(const lm::Config& c, const lm::Layout& layout, const std::string& text, int steps, int device, bool print) {
  lm::Model params = lm::init(c, layout, 7);
  dax::optim::AdamW opt(params, {.lr = dax::optim::warmup_cosine(3e-3, std::min(20, steps / 4), steps, 3e-4), .weight_decay = 0.01});
  auto loss_fn = [&](const lm::Model& p, const lm::Ids& ids, const lm::Ids& positions, const lm::Ids& labels) {
    return lm::loss(c, layout, p, ids, positions, labels);
  };
  Run run;
  dax::tree_for_each_with_path([&](const std::string& path, const lm::Array& p) {
    const auto pieces = layout.compute(path).devices_indices_map(p.shape());
    if (pieces.count(device) != 0) run.pieces_bytes += static_cast<double>(dax::numel(pieces.at(device))) * 4;
  }, params);
  std::mt19937 gen(99);
  const auto start = std::chrono::steady_clock::now();
  for (int step = 1; step <= steps; ++step) {
    const Batch b = make_batch(text, c, gen);
    const dax::Shape shape{c.tokens()};
    const auto ids = dax::device_put(b.ids, shape, layout.tokens());
    const auto labels = dax::device_put(b.labels, shape, layout.tokens());
    const auto positions = dax::device_put(b.positions, shape, layout.tokens());
    dax::comm_stats().reset();
    auto [loss, grads] = dax::value_and_grad(loss_fn)(params, ids, positions, labels);
    opt.step(params, dax::optim::clip_by_global_norm(grads, 1.0));
    run.last_step = dax::comm_stats();
    run.losses.push_back(loss.to_host()[0]);
    if (print && (step % 10 == 0 || step == steps)) {  // ten steps a line
      std::cout << "loss, steps " << std::setw(3) << (step - 1) / 10 * 10 + 1 << "-" << std::setw(3) << step << ":"
                << std::fixed << std::setprecision(4);
      for (int s = (step - 1) / 10 * 10; s < step; ++s) std::cout << " " << run.losses[static_cast<size_t>(s)];
      std::cout << std::defaultfloat << "\n";
    }
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  lm::Config c;
  int steps = 200;
  bool fsdp = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc) c.batch = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--fsdp") == 0) fsdp = true;
  }
  if (steps < 1 || c.batch < 1) {
    if (rt.rank() == 0) std::cerr << "transformer_lm: --steps and --batch must be at least 1\n";
    return 2;
  }
  const int n = rt.size(), n_model = n % 2 == 0 ? 2 : 1;
  const lm::Layout layout{dax::Mesh({n / n_model, n_model}, {"data", "model"}), fsdp};
  const std::string text = make_text(1 << 16);
  const double entropy = unigram_entropy(text);
  const bool root = rt.rank() == 0;
  if (root)
    std::cout << "transformer LM: " << c.layers << " layers, d_model " << c.d_model << ", " << c.heads
              << " heads, vocabulary " << c.vocab << ", sequence " << c.seq << ", batch " << c.batch << ", "
              << steps << " AdamW steps on " << layout.mesh << (fsdp ? " with FSDP" : "") << "\n"
              << "training text: " << text.size() << " bytes, unigram entropy " << entropy << " nats\n"
              << "  \"" << text.substr(0, 72) << "...\"\n";

  const Run run = train(c, layout, text, steps, rt.rank(), root);

  // Bytes of the last step, per collective and mesh axes, against DESIGN §6, with this device's
  // own piece of the tokens (uneven when the data axis does not divide them).
  const double tokens_here =
      static_cast<double>(dax::numel(layout.tokens().devices_indices_map({c.tokens()}).at(rt.rank())));
  const lm::StepBytes formula = lm::formula_bytes(c, layout, tokens_here, run.pieces_bytes);
  const auto& stats = run.last_step;
  const double n_m = n_model;
  // The vocab-parallel cross-entropy's three all-reduces of one value per token (docs/nn.md).
  const double cross_entropy = 3 * 2 * (n_m - 1) / n_m * tokens_here * 4;
  const double megatron = static_cast<double>(stats.of("all_reduce", "('model',)").bytes) - cross_entropy;
  const double dp = static_cast<double>(stats.of("all_reduce", "('data',)").bytes);
  const double gathers = static_cast<double>(stats.of("all_gather", "('data',)").bytes);
  const double scatters = static_cast<double>(stats.of("reduce_scatter", "('data',)").bytes);
  if (root) {
    std::cout << std::fixed << std::setprecision(0);
    std::cout << "one step's collectives (bytes received per device):\n";
    for (const auto& [key, count] : stats.entries())
      std::cout << "  " << std::setw(15) << key.first << " over " << std::setw(12) << key.second << ": "
                << std::setw(3) << count.calls << " calls, " << count.bytes << " B\n";
    std::cout << "Megatron activations (all-reduce over model, less the cross-entropy's " << cross_entropy
              << " B): " << megatron << " B, formula (4L+2) * 2(m-1)/m * |activation| = " << formula.megatron << " B\n";
    if (fsdp)
      std::cout << "FSDP (all-gather + reduce-scatter over data): " << gathers + scatters
                << " B, formula 2(n-1)/n * |W| = " << formula.fsdp << " B\n";
    else
      std::cout << "data parallel (all-reduce over data, the scalars included): " << dp
                << " B, formula 2(n-1)/n * |W| = " << formula.data_parallel << " B\n";
    std::cout << std::defaultfloat << std::setprecision(4);
    std::cout << "training took " << run.seconds << " s (" << c.tokens() * steps / run.seconds << " tokens/s)\n";
  }

  // The reference: the same training on one device (rank 0 alone; at 1 rank it is this run).
  std::vector<double> reference = run.losses;
  if (n > 1 && root) {
    const lm::Layout single{dax::Mesh({1, 1}, {"data", "model"}, {0}), false};
    reference = train(c, single, text, steps, 0, false).losses;
  }
  bool ok = true;
  if (root) {
    const std::vector<int> checked{1, std::min(50, steps), steps};
    for (int step : checked) {
      const double got = run.losses[static_cast<size_t>(step - 1)], want = reference[static_cast<size_t>(step - 1)];
      const double rel = std::abs(got - want) / std::abs(want);
      std::cout << "step " << step << ": loss " << got << ", on one device " << want << " (relative difference "
                << rel << ")\n";
      ok = ok && rel <= 1e-3;
    }
    const double final_loss = run.losses.back();
    std::cout << "final loss " << final_loss << " nats against the unigram entropy " << entropy << " nats\n";
    ok = ok && final_loss < entropy;
  }
  // The bytes must be the formulas' (checked on every rank, for its own pieces). When the data
  // axis does not divide the batch, the attention's reshape to (batch, seq, heads, head_dim) must
  // move rows too, which the formulas leave out: then they are printed, not checked.
  const double tolerance = 64;  // the scalars: the loss's mean and the clipping norm
  const bool checkable = c.batch % layout.mesh.axis_size(0) == 0;
  const bool bytes_ok = !checkable || (std::abs(megatron - formula.megatron) <= tolerance &&
                                       (fsdp ? std::abs(gathers + scatters - formula.fsdp) <= tolerance
                                             : std::abs(dp - formula.data_parallel) <= tolerance));
  if (!checkable && root)
    std::cout << "(bytes not checked: the data axis of " << layout.mesh.axis_size(0) << " does not divide the batch of "
              << c.batch << ")\n";
  ok = ok && bytes_ok;
  if (!bytes_ok) std::cerr << "transformer_lm: rank " << rt.rank() << ": bytes per step differ from the formulas\n";
  if (!root) return bytes_ok ? 0 : 1;
  if (!ok) {
    std::cerr << "transformer_lm: FAILED (losses must match one device to 1e-3, end below the unigram entropy, "
                 "and the bytes must be the formulas')\n";
    return 1;
  }
  std::cout << "verified: " << steps << " AdamW steps of a transformer LM on " << layout.mesh.size()
            << " device(s) match one device, end below the unigram entropy"
            << (checkable ? ", and move the formulas' bytes" : "") << "\n";
  return 0;
}
