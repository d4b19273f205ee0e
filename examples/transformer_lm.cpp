// transformer_lm: a decoder-only transformer language model (2 layers, d_model 128, 4 heads, byte
// vocabulary 256, sequence 64) trained with AdamW on text the program writes itself, on a
// (data, model) mesh: Megatron tensor parallelism for the attention heads and the MLP over 'model',
// data parallelism over the batch on 'data', and FSDP (parameters and optimizer state split over
// 'data' too) with --fsdp, and Megatron's sequence parallelism (the residual stream split over
// 'model' too) with --sp. The model is examples/transformer_lm.hpp; the layout is one table there.
//
// It prints the loss per step and the bytes one step moves next to DESIGN §6's formulas, and checks
// that (1) the loss at steps 1, 50 and the last agrees with the same training on one device to a
// relative 1e-3 (with several ranks, rank 0 trains that reference alone afterwards), (2) the final
// loss is below the unigram entropy of the training text, and (3) the bytes equal the formulas.
// Run with `mpirun -np N`. The model and the mesh are flags, checked before anything runs:
//   transformer_lm [--steps S] [--layers L] [--d-model D] [--heads H] [--seq T] [--batch B]
//                  [--mesh data=X,model=Y] [--fsdp] [--sp] [--cp N]
//                  [--pp N [--schedule GPipe|1F1B|Interleaved1F1B|ZBH1] [--microbatches M] [--virtual-stages V]]
//                  [--precision f32|bf16|f16] [--simulate N [--device D | --classes]]
// --cp N adds a 'context' axis of N (mesh data x context x model): each device holds its rows'
// zigzag chunks of the sequence and attention is ring attention over 'context'
// (dax::parallel::ring_attention_shard), its k / v blocks' bytes checked like the rest.
// --pp N adds a 'stage' axis of N (mesh data x stage x model) and trains through dax::pipeline:
// the layers cut into N * V chunks, the batch into M microbatches (default 2N), checked the same
// way plus each stage's peak activations against the schedule and the stage transfers' bytes.
// The two combine (mesh data x stage x context x model): each stage's attention a ring over its
// own 'context' devices.
// Without --mesh, an even N makes a (N/2, 2) mesh, an odd N an (N, 1) one. The bytes are checked
// where the formulas apply (the data axis divides the batch); elsewhere the output says why not.
// --simulate N plans one step on N simulated devices in this one process (dax::simulate, the meta
// backend) and prints what device D (--device, default 0) would hold and receive, its bytes checked
// against the same formulas: e.g. --simulate 16384 --mesh data=2048,model=8 --layers 32
// --d-model 4096 --heads 32 --seq 2048 --batch 2048, a 7B-shaped model (docs/simulation.md).
// --classes prints one report per class of devices that hold and move the same (a pipeline's
// first, middle and last stages; dax::simulate_classes) instead of one device's.
#include <dax/dax.hpp>

#include <sys/resource.h>

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
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
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

/// Ten steps' losses a line, once the tenth (or the last) step of a line is done.
void print_losses(const std::vector<double>& losses, int step, int steps) {
  if (step % 10 != 0 && step != steps) return;
  std::cout << "loss, steps " << std::setw(3) << (step - 1) / 10 * 10 + 1 << "-" << std::setw(3) << step << ":"
            << std::fixed << std::setprecision(4);
  for (int s = (step - 1) / 10 * 10; s < step; ++s) std::cout << " " << losses[static_cast<size_t>(s)];
  std::cout << std::defaultfloat << "\n";
}

/// " with E experts (top-k)" for a model with experts, else nothing.
std::string experts_text(const lm::Config& c) {
  return c.experts > 0 ? " with " + std::to_string(c.experts) + " experts (top-" + std::to_string(c.top_k) + ")" : "";
}

struct Run {
  std::vector<double> losses;
  dax::CommStats last_step;
  int64_t moe_rows = 0;  // the last step's rows sent to or received for experts (lm::moe_rows_moved)
  std::vector<dax::ImplicitReshard> implicit;  // the last step's forward: inputs ops moved on their own
  std::optional<lm::Model> params;  // after the last step
  std::vector<lm::Chunk> chunks;    // through the pipeline (--pp): every chunk's parameters after the last step
  double seconds = 0;
  int64_t last_step_peak = 0;
  std::vector<int> skipped;  // steps a float16 overflow skipped (--precision f16)  // the most dax's buffers held during the last step, less what they held before training
};

/// Trains `steps` AdamW steps on `layout` and returns the loss of every step.
Run train(const lm::Config& c, const lm::Layout& layout, const std::string& text, int steps, bool print) {
  const int64_t held_before = dax::memory_stats().bytes_in_use;
  lm::Model params = lm::init(c, layout, 7);
  dax::optim::AdamW opt(params, {.lr = dax::optim::warmup_cosine(3e-3, std::min(20, steps / 4), steps, 3e-4), .weight_decay = 0.01});
  // float16 products (--precision f16): the loss scaled and the step skipped on an overflow, as
  // GradScaler does (dax::optim::DynamicLossScale).
  std::optional<dax::optim::DynamicLossScale> scaler;
  if (c.compute == dax::DType::float16) scaler.emplace();
  auto loss_fn = [&](const lm::Model& p, const lm::Ids& ids, const lm::Ids& positions, const lm::Ids& labels) {
    const lm::Array l = lm::loss(c, layout, p, ids, positions, labels);
    return scaler ? scaler->scale(l) : l;
  };
  Run run;
  std::mt19937 gen(99);
  const auto start = std::chrono::steady_clock::now();
  for (int step = 1; step <= steps; ++step) {
    if (step == steps) dax::reset_peak_memory();
    const Batch b = make_batch(text, c, gen);
    const dax::Shape shape{c.tokens()};
    // With --cp the tokens in the order they are split (lm::context_order); the loss is their mean.
    const auto ids = dax::device_put(lm::context_order(c, layout, b.ids), shape, layout.tokens());
    const auto labels = dax::device_put(lm::context_order(c, layout, b.labels), shape, layout.tokens());
    const auto positions = dax::device_put(lm::context_order(c, layout, b.positions), shape, layout.tokens());
    dax::comm_stats().reset();
    lm::moe_rows_moved() = 0;
    // Every move an op made of an input on its own (docs/sharding.md "Explicit sharding").
    dax::ExplicitSharding audit(dax::ExplicitSharding::Action::record);
    auto [loss, grads] = dax::value_and_grad(loss_fn)(params, ids, positions, labels);
    run.implicit = audit.seen();
    const double scale = scaler ? scaler->scale() : 1.0;  // the one this step's loss was taken at
    if (!scaler || scaler->unscale(grads)) {
      const dax::NamedScope scope("clip and AdamW");
      opt.step(params, dax::optim::clip_by_global_norm(grads, 1.0));
    } else {
      run.skipped.push_back(step);
    }
    run.last_step = dax::comm_stats();
    run.moe_rows = lm::moe_rows_moved();
    run.losses.push_back(loss.to_host()[0] / scale);
    if (print) print_losses(run.losses, step, steps);
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.last_step_peak = dax::memory_stats().peak_bytes_in_use - held_before;
  run.params = params;
  return run;
}

/// Whether a simulated step (dax::simulate) made the same collectives, calls and bytes as the
/// measured one. With experts the all_to_allv follows the routing, which a simulation makes even:
/// it is left out.
bool same_collectives(const dax::CommStats& simulated, const dax::CommStats& measured, bool routed) {
  const auto compared = [&](const std::pair<std::string, std::string>& key) { return !routed || key.first != "all_to_allv"; };
  size_t measured_entries = 0, simulated_entries = 0;
  for (const auto& [key, count] : measured.entries()) measured_entries += compared(key) ? 1 : 0;
  bool same = true;
  for (const auto& [key, count] : simulated.entries()) {
    if (!compared(key)) continue;
    ++simulated_entries;
    const auto m = measured.of(key.first, key.second);
    same = same && m.calls == count.calls && m.bytes == count.bytes;
  }
  return same && simulated_entries == measured_entries;
}

/// What a pipelined run adds: the last step's stage times, bubble and peaks, and its bytes
/// against the formulas (this device's).
struct PipelineReport {
  dax::pipeline::StepStats stats;
  double sent_received = 0, sent_formula = 0;  // activations and gradients received over 'stage'
  double data_parallel = 0, data_formula = 0;  // all-reduces of this stage's gradients (but over 'model' alone)
  double fsdp = 0, fsdp_formula = 0;           // FSDP's all-gathers and reduce-scatters over 'data'
  double megatron = 0, megatron_formula = 0;   // all-reduces over 'model' (the cross-entropy's included)
  double experts = 0, experts_formula = 0;     // all_to_allv over 'data': 2 x rows moved x d_model x 4
  double context = 0, context_formula = 0;     // --cp: ring attention's ppermutes over 'context'
  bool ok = true;
};

/// The same training through dax::pipeline on a (data, stage, model) mesh: the layers cut into
/// stages * virtual_stages chunks, each step's batch into microbatches (the same batches, so the
/// losses are the unpipelined run's), AdamW over the chunks' parameters, clipping by the norm of
/// every stage's gradients together. With --cp each stage's mesh has a 'context' axis too: every
/// microbatch's tokens go in context order (lm::context_order) and attention is a ring over it.
Run train_pipelined(const lm::Config& c, const dax::Mesh& mesh, bool fsdp, bool sp,
                    const dax::pipeline::Schedule& schedule, const std::string& text, int steps, bool print,
                    PipelineReport& report) {
  const int chunks = schedule.chunks(), m = schedule.microbatches, stages = schedule.stages;
  const int64_t held_before = dax::memory_stats().bytes_in_use;
  lm::Config mc = c;  // one microbatch
  mc.batch = c.batch / m;
  std::vector<lm::Layout> layouts;  // per stage
  for (int s = 0; s < stages; ++s) layouts.push_back({dax::pipeline::stage_mesh(mesh, "stage", s), fsdp, sp});
  const auto layout_of = [&](int chunk) -> const lm::Layout& { return layouts[size_t(schedule.stage_of(chunk))]; };
  auto pipe = dax::pipeline::make<float>(
      mesh, schedule,
      [&](int chunk, const lm::Chunk& p, const auto& x) { return lm::chunk_forward(mc, layout_of(chunk), p, x); },
      [](const lm::Array& logits, const lm::Ids& labels) {
        const dax::NamedScope scope("loss");
        return dax::cross_entropy(logits, labels);
      });
  // What crosses into a chunk: the residual stream of a microbatch, (tokens, d) on the receiving
  // stage's layout. A real run checks every transfer's header against it; a simulated device
  // (--simulate) takes it in place of the header it cannot receive.
  pipe.boundary([&](int chunk) { return std::pair{dax::Shape{mc.tokens(), mc.d_model}, layout_of(chunk).residual().spec()}; });
  std::vector<lm::Chunk> params;
  for (int k = 0; k < chunks; ++k) params.push_back(lm::init_chunk(c, layout_of(k), 7, k, chunks));
  dax::optim::AdamW opt(params, {.lr = dax::optim::warmup_cosine(3e-3, std::min(20, steps / 4), steps, 3e-4), .weight_decay = 0.01});
  Run run;
  std::mt19937 gen(99);
  const auto start = std::chrono::steady_clock::now();
  const int64_t rows = mc.tokens();
  for (int step = 1; step <= steps; ++step) {
    if (step == steps) dax::reset_peak_memory();
    const Batch b = make_batch(text, c, gen);
    std::vector<lm::Ids> inputs, targets;
    for (int i = 0; i < m; ++i) {
      const auto part = [&](const std::vector<int32_t>& v) {
        return std::vector<int32_t>(v.begin() + i * rows, v.begin() + (i + 1) * rows);
      };
      inputs.push_back(dax::device_put(lm::context_order(mc, layout_of(0), part(b.ids)), {rows}, layout_of(0).tokens()));
      const lm::Layout& last = layout_of(chunks - 1);
      targets.push_back(dax::device_put(lm::context_order(mc, last, part(b.labels)), {rows}, last.tokens()));
    }
    dax::comm_stats().reset();
    lm::moe_rows_moved() = 0;
    auto [loss, grads] = pipe.value_and_grad(params, inputs, targets);
    const dax::NamedScope scope("clip and AdamW");
    opt.step(params, dax::optim::clip_by_global_norm(grads, 1.0, pipe.global_norm(grads)));
    run.last_step = dax::comm_stats();
    run.moe_rows = lm::moe_rows_moved();
    run.losses.push_back(loss.to_host()[0]);
    if (print) print_losses(run.losses, step, steps);
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.last_step_peak = dax::memory_stats().peak_bytes_in_use - held_before;
  run.chunks = params;

  // The last step's bytes on this device against the formulas, over each axis.
  report.stats = pipe.last_stats();
  const int device = dax::Runtime::current().rank(), stage = pipe.stage();
  const lm::Layout& here = layouts[size_t(stage)];
  const double n_data = double(mesh.axis_size("data")), n_model = double(mesh.axis_size("model"));
  const double n_context = here.context() ? double(mesh.axis_size("context")) : 1;
  const double tokens_here = double(rows) / (n_data * n_context), activation = tokens_here * double(c.d_model) * 4;
  double pieces = 0, replicated_over_model = 0, expert_pieces = 0, reduces = 0, cross_entropy = 0, layers_here = 0;
  for (int k = 0; k < chunks; ++k) {
    if (schedule.stage_of(k) != stage) continue;
    pieces += lm::pieces_bytes(here, params[size_t(k)], device);
    expert_pieces += lm::expert_pieces_bytes(here, params[size_t(k)], device);
    // With SP the gradients summed over the residual stream's tokens, else the routers' (the
    // planner splits their product over 'model'): reduced over the token axes and 'model'.
    replicated_over_model += sp ? lm::sequence_summed_bytes(params[size_t(k)]) : lm::router_bytes(params[size_t(k)]);
    // Megatron per microbatch: two all-reduces a layer forward and two backward, the embedding's
    // forward on the first chunk, the head input's backward on the last.
    // (Experts in place of the MLPs take two a layer away.)
    reduces += (c.experts > 0 ? 2.0 : 4.0) * double(params[size_t(k)].layers.size()) + (k == 0) + (k == chunks - 1);
    layers_here += double(params[size_t(k)].layers.size());
    if (k == chunks - 1) cross_entropy = 3 * 2 * (n_model - 1) / n_model * tokens_here * 4 * m;
    // A chunk boundary to another stage: m activations in, or m gradients in.
    // With SP the residual stream crosses split over 'model': each device its 1/model of it.
    const double crossing = sp ? activation / n_model : activation;
    if (k > 0 && schedule.stage_of(k - 1) != stage) report.sent_formula += m * crossing;
    if (k + 1 < chunks && schedule.stage_of(k + 1) != stage) report.sent_formula += m * crossing;
  }
  // The experts' gradients are summed inside each microbatch's backward over the devices that
  // route tokens to the same experts (replication typing: the shard_map's pbroadcast transposes
  // to a psum), so m times a step: over 'model' with SP (counted with Megatron's all-reduces),
  // over 'context' with --cp (and 'model' with SP too; counted with the gradients').
  const double expert_group = n_context * (sp ? n_model : 1);
  const double experts_reduced = m * 2 * (expert_group - 1) / expert_group * expert_pieces;
  const auto& st = run.last_step;
  report.sent_received = double(st.of("send_recv", "('stage',)").bytes);
  report.megatron = double(st.of("all_reduce", "('model',)").bytes);
  if (sp)  // each all-reduce a reduce-scatter and an all-gather of the same bytes together
    report.megatron += double(st.of("reduce_scatter", "('model',)").bytes + st.of("all_gather", "('model',)").bytes);
  report.megatron_formula = reduces * m * 2 * (n_model - 1) / n_model * activation + cross_entropy +
                            (here.context() ? 0 : experts_reduced);
  constexpr double tolerance = 64;  // the scalars: the loss's mean and the clipping norm
  report.data_parallel = lm::gradient_reduce_bytes(st);
  const double n_tokens = n_data * n_context;
  if (fsdp) {
    report.fsdp = double(st.of("all_gather", "('data',)").bytes + st.of("reduce_scatter", "('data',)").bytes);
    // Gathered again for each microbatch, in the compute type; reduce-scattered in float32.
    report.fsdp_formula = m * (lm::compute_share(c) + 1) * (n_data - 1) / n_data * pieces;
    // With --cp each microbatch's reduce-scattered shard is summed over 'context' too.
    report.data_formula = m * 2 * (n_context - 1) / n_context * pieces / n_data;
    if (sp) {  // and the sequence-summed ones' shards over 'model', every microbatch
      const auto sums = lm::fsdp_sequence_sums(replicated_over_model, n_data, n_context, n_model);
      report.megatron_formula += m * sums.over_model;
      report.data_formula += m * sums.with_gradients;
    }
  } else {  // the gradients summed over the tokens of data x context, once a step
    report.data_formula = lm::data_parallel_formula(n_tokens, sp || c.experts > 0 ? n_model : 1, pieces,
                                                    sp || c.experts > 0 ? replicated_over_model : 0);
  }
  if (here.context()) report.data_formula += experts_reduced;
  // The experts' small all-reduces, every layer and microbatch, over the devices that split the tokens.
  report.data_formula += m * layers_here * lm::experts_scalar_bytes(c, n_tokens * (sp ? n_model : 1));
  // Ring attention: each layer passes its k and v blocks (this device's tokens x its heads' width,
  // in the compute type) c - 1 steps forward and their gradients c - 1 steps back, every
  // microbatch (lm::formula_bytes).
  report.context = double(st.of("ppermute", "('context',)").bytes);
  report.context_formula = layers_here * m * 4 * (n_context - 1) * tokens_here * double(c.d_model) / n_model *
                           double(dax::itemsize(c.compute));
  report.experts = double(st.of("all_to_allv", "('data',)").bytes);
  report.experts_formula = 2.0 * double(run.moe_rows) * double(c.d_model) * 4;
  report.ok = report.experts == report.experts_formula && std::abs(report.sent_received - report.sent_formula) < 1 &&
              std::abs(report.data_parallel - report.data_formula) <= tolerance && report.context == report.context_formula &&
              std::abs(report.fsdp - report.fsdp_formula) <= tolerance &&
              report.megatron <= report.megatron_formula + tolerance;
  return run;
}

}  // namespace

/// The command line, checked before anything runs: every problem is named with the values that
/// make it (all ranks parse the same arguments, so all agree; rank 0 alone prints).
struct Options {
  lm::Config config;
  int steps = 200;
  bool fsdp = false;
  bool sp = false;              // --sp: sequence parallelism (Layout::sp)
  int64_t moe = 0, top_k = 2;   // --moe E [--top-k K]: E experts per layer over 'data' (Config::experts)
  double aux_weight = 0.01;     // --aux-weight W: the load-balancing loss's weight (Config::aux_weight)
  int64_t data = 0, model = 0;  // the mesh's axes; 0: the default for the job's size
  int64_t pp = 1;               // --pp: pipeline stages (a 'stage' axis between 'data' and 'model')
  int64_t cp = 1;               // --cp: context parallelism (a 'context' axis between 'data' and 'model')
  int64_t simulate = 0;         // --simulate N: plan one step on N simulated devices (dax::simulate)
  int64_t simulate_device = 0;  // --device D: the simulated device to report
  bool classes = false;         // --classes: one report per class of devices (dax::simulate_classes)
  std::string schedule = "1F1B";
  int64_t microbatches = 0, virtual_stages = 0;  // 0: 2 * pp microbatches; 2 virtual stages if interleaved
  std::string error;            // empty when the options are usable
};

/// The mesh of a run: (data, model); with --pp a 'stage' axis after 'data', with --cp a 'context'
/// axis before 'model' (data, stage, context, model at most).
dax::Mesh run_mesh(const Options& o) {
  dax::Shape shape{o.data};
  std::vector<std::string> names{"data"};
  if (o.pp > 1) shape.push_back(o.pp), names.push_back("stage");
  if (o.cp > 1) shape.push_back(o.cp), names.push_back("context");
  shape.push_back(o.model), names.push_back("model");
  return dax::Mesh(shape, names);
}

Options parse_options(int argc, char** argv, int ranks) {
  Options o;
  std::ostringstream why;
  auto positive = [&](const char* flag, const char* text, int64_t& into) {
    char* end = nullptr;
    const long long v = std::strtoll(text, &end, 10);
    if (end == text || *end != '\0' || v < 1) why << flag << " expects a positive integer, got '" << text << "'; ";
    else into = v;
  };
  int64_t steps = o.steps;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    if (flag == "--fsdp") o.fsdp = true;
    else if (flag == "--sp") o.sp = true;
    else if (flag == "--classes") o.classes = true;
    else if (!has_value && (flag == "--steps" || flag == "--layers" || flag == "--d-model" || flag == "--heads" ||
                            flag == "--seq" || flag == "--batch" || flag == "--mesh" || flag == "--pp" || flag == "--cp" ||
                            flag == "--schedule" || flag == "--microbatches" || flag == "--virtual-stages" ||
                            flag == "--moe" || flag == "--top-k" || flag == "--aux-weight" ||
                            flag == "--simulate" || flag == "--device" || flag == "--precision"))
      why << flag << " needs a value; ";
    else if (flag == "--pp") positive("--pp", argv[++i], o.pp);
    else if (flag == "--cp") positive("--cp", argv[++i], o.cp);
    else if (flag == "--simulate") positive("--simulate", argv[++i], o.simulate);
    else if (flag == "--precision") {
      const std::string p = argv[++i];
      if (p == "f32") o.config.compute = dax::DType::float32;
      else if (p == "bf16") o.config.compute = dax::DType::bfloat16;
      else if (p == "f16") o.config.compute = dax::DType::float16;
      else why << "--precision expects f32, bf16 or f16, got '" << p << "'; ";
    }
    else if (flag == "--device") {
      const char* text = argv[++i];
      char* end = nullptr;
      const long long v = std::strtoll(text, &end, 10);
      if (end == text || *end != '\0' || v < 0) why << "--device expects an integer >= 0, got '" << text << "'; ";
      else o.simulate_device = v;
    }
    else if (flag == "--moe") positive("--moe", argv[++i], o.moe);
    else if (flag == "--top-k") positive("--top-k", argv[++i], o.top_k);
    else if (flag == "--aux-weight") {
      char* end = nullptr;
      const char* text = argv[++i];
      o.aux_weight = std::strtod(text, &end);
      if (end == text || *end != '\0' || !(o.aux_weight >= 0))
        why << "--aux-weight expects a number >= 0, got '" << text << "'; ";
    }
    else if (flag == "--schedule") o.schedule = argv[++i];
    else if (flag == "--microbatches") positive("--microbatches", argv[++i], o.microbatches);
    else if (flag == "--virtual-stages") positive("--virtual-stages", argv[++i], o.virtual_stages);
    else if (flag == "--steps") positive("--steps", argv[++i], steps);
    else if (flag == "--layers") positive("--layers", argv[++i], o.config.layers);
    else if (flag == "--d-model") positive("--d-model", argv[++i], o.config.d_model);
    else if (flag == "--heads") positive("--heads", argv[++i], o.config.heads);
    else if (flag == "--seq") positive("--seq", argv[++i], o.config.seq);
    else if (flag == "--batch") positive("--batch", argv[++i], o.config.batch);
    else if (flag == "--mesh") {  // data=X,model=Y (either may be left out: it takes the remaining ranks)
      std::stringstream spec(argv[++i]);
      std::string part;
      while (std::getline(spec, part, ',')) {
        const auto eq = part.find('=');
        const std::string axis = part.substr(0, eq);
        if (eq == std::string::npos || (axis != "data" && axis != "model"))
          why << "--mesh expects data=X,model=Y, got '" << argv[i] << "'; ";
        else positive(axis == "data" ? "--mesh data=" : "--mesh model=", part.c_str() + eq + 1,
                      axis == "data" ? o.data : o.model);
      }
    } else why << "unknown argument '" << flag << "'; ";
  }
  o.steps = static_cast<int>(steps);
  o.config.experts = o.moe;
  o.config.top_k = static_cast<int>(o.top_k);
  o.config.aux_weight = static_cast<float>(o.aux_weight);
  const lm::Config& c = o.config;
  const auto kind = dax::pipeline::schedule_kind(o.schedule);
  if (!kind)
    why << "--schedule expects GPipe, 1F1B, Interleaved1F1B or ZBH1, got '" << o.schedule << "'; ";
  if (o.simulate > 0) ranks = static_cast<int>(o.simulate);  // the simulated world, not the job's
  if (o.simulate > 0 && o.simulate_device >= o.simulate)
    why << "--device " << o.simulate_device << " is not one of the " << o.simulate << " simulated devices; ";
  if (o.simulate == 0 && o.simulate_device != 0) why << "--device needs --simulate N; ";
  if (o.simulate == 0 && o.classes) why << "--classes needs --simulate N; ";
  if (o.classes && o.simulate_device != 0) why << "--classes reports every class of devices: drop --device; ";
  if (why.str().empty() && ranks % (o.pp * o.cp) != 0)
    why << (o.cp > 1 ? "--cp " + std::to_string(o.cp) + (o.pp > 1 ? " x " : "") : "")
        << (o.pp > 1 || o.cp == 1 ? "--pp " + std::to_string(o.pp) : "") << " does not divide the job's " << ranks << " ranks; ";
  if (o.cp > 1) {  // ring attention over 'context'
    if (c.seq % (2 * o.cp) != 0)
      why << "--cp " << o.cp << " needs --seq (" << c.seq << ") to divide into 2 x " << o.cp << " zigzag chunks; ";
  }
  if (why.str().empty()) {
    const int64_t per_stage = ranks / (o.pp * o.cp);  // the devices of one stage's context block: data x model
    if (o.data == 0 && o.model == 0) o.model = per_stage % 2 == 0 ? 2 : 1;
    if (o.data == 0 && per_stage % o.model == 0) o.data = per_stage / o.model;
    if (o.model == 0 && per_stage % o.data == 0) o.model = per_stage / o.data;
    if (o.data * o.model * o.pp * o.cp != ranks)
      why << "--mesh data=" << o.data << ",model=" << o.model << (o.pp > 1 ? " with --pp " + std::to_string(o.pp) : "")
          << (o.cp > 1 ? " with --cp " + std::to_string(o.cp) : "") << " has " << o.data * o.model * o.pp * o.cp
          << " devices, but the job has " << ranks
          << (o.simulate > 0 ? " simulated devices; " : " ranks; ");
    if (o.microbatches == 0) o.microbatches = o.pp == 1 ? 1 : 2 * o.pp;
    const bool interleaved = *kind == dax::pipeline::ScheduleKind::interleaved_1f1b;
    if (o.virtual_stages == 0) o.virtual_stages = interleaved ? 2 : 1;
    if (o.pp > 1 && c.batch % o.microbatches != 0)
      why << "--microbatches " << o.microbatches << " does not divide --batch " << c.batch << "; ";
    else if (o.cp > 1 && c.batch % o.data != 0)
      why << "with --cp the data axis (" << o.data << ") must divide --batch " << c.batch << "; ";
    else if (o.pp > 1 && (c.batch / o.microbatches) % o.data != 0)
      why << "the data axis (" << o.data << ") must divide a microbatch's " << c.batch / o.microbatches
          << " rows; ";
    if (o.pp > 1 && o.virtual_stages > 1 && !interleaved)
      why << "--virtual-stages " << o.virtual_stages << " needs --schedule Interleaved1F1B; ";
    if (o.pp > 1 && interleaved && o.microbatches % o.pp != 0)
      why << "Interleaved1F1B needs --microbatches (" << o.microbatches << ") to be a multiple of --pp (" << o.pp
          << "); ";

    if (c.d_model % c.heads != 0)
      why << "--d-model " << c.d_model << " is not divisible by --heads " << c.heads << "; ";
    if (o.model > 0 && c.heads % o.model != 0)  // Megatron gives each device whole heads
      why << "the model axis (" << o.model << ") must divide --heads " << c.heads << "; ";
    if (o.model > 0 && c.vocab % o.model != 0)
      why << "the model axis (" << o.model << ") must divide the vocabulary (" << c.vocab << "); ";
    if (o.moe > 0) {
      const int64_t rows = c.tokens() / o.microbatches, groups = o.data * (o.sp ? o.model : 1);
      if (o.fsdp) why << "--moe with --fsdp is not offered yet (the experts are split over 'data' already); ";
      if (o.moe % o.data != 0) why << "the data axis (" << o.data << ") must divide --moe " << o.moe << "; ";
      if (o.top_k > o.moe) why << "--top-k " << o.top_k << " is more than --moe " << o.moe << " experts; ";
      if (rows % groups != 0)
        why << "--moe needs a microbatch's " << rows << " tokens to divide over the " << groups << " devices that split them; ";
    }
  }
  o.error = why.str();
  if (!o.error.empty()) o.error.resize(o.error.size() - 2);
  return o;
}

/// transformer_lm --pp N: the same training through dax::pipeline, checked the same way (losses
/// against one device, final loss below the unigram entropy, bytes against the formulas), with
/// each stage's bubble and peak activations against the schedule's.
int pipelined_main(const Options& o, bool root) {
  const lm::Config& c = o.config;
  const int n = dax::Runtime::current().size();
  const dax::Mesh mesh = run_mesh(o);
  const auto schedule = dax::pipeline::make_schedule(*dax::pipeline::schedule_kind(o.schedule), int(o.pp), int(o.microbatches),
                                                     int(o.virtual_stages));
  const std::string text = make_text(1 << 16);
  const double entropy = unigram_entropy(text);
  if (root)
    std::cout << "transformer LM: " << c.layers << " layers, d_model " << c.d_model << ", " << c.heads
              << " heads, sequence " << c.seq << ", batch " << c.batch << ", " << o.steps << " AdamW steps on "
              << mesh << (o.fsdp ? " with FSDP" : "") << (o.sp ? " with sequence parallelism" : "")
              << (o.cp > 1 ? " with context parallelism (ring attention)" : "") << experts_text(c) << "\npipeline: " << dax::pipeline::to_string(schedule.kind)
              << ", " << schedule.stages << " stages x " << schedule.virtual_stages << " chunk(s) each, "
              << schedule.microbatches << " microbatches of " << c.batch / schedule.microbatches << " rows\n";
  PipelineReport report;
  const Run run = train_pipelined(c, mesh, o.fsdp, o.sp, schedule, text, o.steps, root, report);
  // The same pipelined step on simulated devices (dax::simulate, this rank's device): the same
  // collectives and bytes per kind and axes, exactly (the experts' all_to_allv left out: routing).
  std::optional<Run> simulated_run;
  PipelineReport simulated_report;
  dax::simulate({.count = n, .device = dax::Runtime::current().rank()}, [&] {
    simulated_run = train_pipelined(c, mesh, o.fsdp, o.sp, schedule, text, std::min(o.steps, 2), false, simulated_report);
  });
  // And its peak memory within 5% of the memory counter's over the last step (with experts the
  // routing decides it, which a simulation makes even: left out, as the collectives' all_to_allv).
  const double peak_ratio =
      run.last_step_peak > 0 ? double(simulated_run->last_step_peak) / double(run.last_step_peak) : 1.0;
  const bool simulated_same = same_collectives(simulated_run->last_step, run.last_step, c.experts > 0) &&
                              (c.experts > 0 || std::abs(peak_ratio - 1) <= 0.05);
  const auto simulated = dax::pipeline::simulate(schedule);
  const auto& st = report.stats;
  const bool peaks_ok = st.peak_activations == simulated.peak_activations;
  if (root) {
    std::cout << std::setprecision(3);
    for (int s = 0; s < schedule.stages; ++s)
      std::cout << "stage " << s << ": busy " << st.busy[size_t(s)] * 1e3 << " ms of " << st.seconds[size_t(s)] * 1e3
                << " ms, peak " << st.peak_activations[size_t(s)] << " microbatch activations (schedule: "
                << simulated.peak_activations[size_t(s)] << ")\n";
    std::cout << "bubble: measured " << st.bubble << ", the schedule's with equal passes " << simulated.bubble
              << ", formula " << dax::pipeline::bubble_formula(schedule.kind, schedule.stages, schedule.microbatches,
                                                              schedule.virtual_stages)
              << (n > 1 && unsigned(n) > std::thread::hardware_concurrency()
                      ? " (ranks share cores here: waiting for one counts as busy or idle by chance)"
                      : "")
              << "\n";
    std::cout << std::fixed << std::setprecision(0) << "one step's collectives on rank 0 (bytes received):\n";
    for (const auto& [key, count] : run.last_step.entries())
      std::cout << "  " << std::setw(15) << key.first << " over " << std::setw(12) << key.second << ": "
                << std::setw(3) << count.calls << " calls, " << count.bytes << " B\n";
    std::cout << "one step's bytes on rank 0: stage transfers "
              << report.sent_received << " B (formula " << report.sent_formula << "), "
              << (o.fsdp ? "FSDP over data " + std::to_string(int64_t(report.fsdp)) + " B (formula " +
                               std::to_string(int64_t(report.fsdp_formula)) + "), "
                         : std::string())
              << "gradients' all-reduces " << report.data_parallel << " B (formula " << report.data_formula
              << "), over model " << report.megatron
              << " B (Megatron's formula, at most " << report.megatron_formula << ")"
              << (report.context_formula > 0 ? ", ring attention (ppermute over context) " +
                                                   std::to_string(int64_t(report.context)) + " B (formula " +
                                                   std::to_string(int64_t(report.context_formula)) + ")"
                                             : std::string())
              << (c.experts > 0 ? ", experts (all_to_allv over data) " + std::to_string(int64_t(report.experts)) +
                                      " B (formula " + std::to_string(int64_t(report.experts_formula)) + ")"
                                : std::string())
              << "\n"
              << std::defaultfloat << std::setprecision(4) << "training took " << run.seconds << " s (" << double(c.tokens()) * o.steps / run.seconds << " tokens/s)\n"
              << "simulated on " << n << " meta device(s) (dax::simulate): the same collectives and bytes, peak "
                 "memory within 5%: "
              << (simulated_same ? "yes" : "NO") << " (peak " << simulated_run->last_step_peak << " B against "
              << run.last_step_peak << " B measured, " << peak_ratio << "x)\n";
  }
  std::vector<double> reference = run.losses;
  if (root) {  // the unpipelined model on one device, rank 0 alone
    dax::OnlyMeshRanks alone;  // (its experts' shard_maps, if any, run there alone)
    const lm::Layout single{dax::Mesh({1, 1}, {"data", "model"}, {0}), false};
    reference = train(c, single, text, o.steps, false).losses;
  }
  bool ok = true;
  // The load-balancing loss is the batch's on one device and each microbatch's in the pipeline (as
  // in Megatron): not the same function, so with experts and a weight > 0 the runs agree only to a
  // few percent (--aux-weight 0 makes them the same model again).
  const double tolerance = c.experts > 0 && c.aux_weight > 0 ? 0.05 : c.compute == dax::DType::bfloat16 ? 1e-2 : 1e-3;
  if (root) {
    if (c.experts > 0 && c.aux_weight > 0)
      std::cout << "(the load-balancing loss is per microbatch here and per batch on one device: losses checked to "
                << tolerance << ")\n";
    else if (tolerance > 1e-3)
      std::cout << "(bfloat16 products: losses checked to " << tolerance << ")\n";
    std::vector<int> checked{1, std::min(50, o.steps), o.steps};
    checked.erase(std::unique(checked.begin(), checked.end()), checked.end());
    for (int step : checked) {
      const double got = run.losses[size_t(step - 1)], want = reference[size_t(step - 1)];
      const double rel = std::abs(got - want) / std::abs(want);
      std::cout << "step " << step << ": loss " << got << ", on one device " << want << " (relative difference "
                << rel << ")\n";
      ok = ok && rel <= tolerance;
    }
    std::cout << "final loss " << run.losses.back() << " nats against the unigram entropy " << entropy << " nats\n";
    ok = ok && run.losses.back() < entropy;
  }
  // Every rank checked its own bytes and peaks; rank 0 reports which differed, each such rank what.
  if (!(report.ok && peaks_ok && simulated_same))
    std::cerr << "rank " << dax::Runtime::current().rank() << ": stage transfers " << int64_t(report.sent_received)
              << " B (formula " << int64_t(report.sent_formula) << "), FSDP " << int64_t(report.fsdp) << " B ("
              << int64_t(report.fsdp_formula) << "), gradients' all-reduces " << int64_t(report.data_parallel) << " B ("
              << int64_t(report.data_formula) << "), over model " << int64_t(report.megatron) << " B (at most "
              << int64_t(report.megatron_formula) << "), ring " << int64_t(report.context) << " B ("
              << int64_t(report.context_formula) << "), experts " << int64_t(report.experts) << " B ("
              << int64_t(report.experts_formula) << "); peaks as the schedule's: " << (peaks_ok ? "yes" : "no")
              << "; as simulated: " << (simulated_same ? "yes" : "no") << "\n";
  const dax::Mesh ranks({n}, {"ranks"});
  const std::vector<int32_t> differs =
      dax::from_local<int32_t>({report.ok && peaks_ok && simulated_same ? 0 : 1}, {n}, dax::NamedSharding(ranks, dax::P("ranks")))
          .to_host();
  const bool all_ok = std::count(differs.begin(), differs.end(), 1) == 0;
  if (!root) return all_ok ? 0 : 1;
  if (!all_ok) {
    std::cerr << "transformer_lm: the bytes per step or the peak activations differ from the formulas (or the simulated step's) on rank(s)";
    for (int r = 0; r < n; ++r)
      if (differs[size_t(r)] != 0) std::cerr << " " << r;
    std::cerr << "\n";
  }
  if (!ok || !all_ok) {
    std::cerr << "transformer_lm: FAILED (losses must match one device to 1e-3, end below the unigram entropy, "
                 "and the bytes and peaks must be the formulas')\n";
    return 1;
  }
  std::cout << "verified: " << o.steps << " AdamW steps through a " << dax::pipeline::to_string(schedule.kind)
            << " pipeline on " << n << " device(s) match one device, end below the unigram entropy, move the "
               "formulas' bytes and hold the schedule's activations\n";
  return 0;
}

/// transformer_lm --simulate N: one training step of the model on N simulated devices (the meta
/// backend: no data, nothing run, everything planned and counted), in this one process; prints
/// what the device --device D would hold and receive, and checks its bytes against the formulas
/// as a real run does.
int simulated_main(const Options& o, bool root) {
  const lm::Config& c = o.config;
  const std::string text = make_text(std::max<size_t>(1 << 16, static_cast<size_t>(2 * c.seq + 2)));
  int64_t parameters = 0;
  lm::BytesCheck bytes;
  const auto start = std::chrono::steady_clock::now();
  const dax::MetaDevices devices{.count = static_cast<int>(o.simulate), .device = static_cast<int>(o.simulate_device)};
  bool bytes_ok = true;  // on every device simulated (one, or one per probe with --classes)
  const auto step = [&] {
    parameters = 0;
    Run run = [&] {
      if (o.pp > 1) {  // the pipeline's step: this device's stage, its transfers and its chunks' bytes
        const dax::Mesh mesh = run_mesh(o);
        const auto schedule = dax::pipeline::make_schedule(*dax::pipeline::schedule_kind(o.schedule), int(o.pp),
                                                           int(o.microbatches), int(o.virtual_stages));
        PipelineReport piped;
        Run run = train_pipelined(c, mesh, o.fsdp, o.sp, schedule, text, 1, false, piped);
        bytes.ok = piped.ok;
        bytes.regime = piped.ok ? "the pipeline's formulas (stage transfers, data, Megatron's bound)"
                                : "the pipeline's formulas: DIFFER";
        for (const lm::Chunk& chunk : run.chunks) dax::tree_for_each([&](const auto& leaf) { parameters += leaf.size(); }, chunk);
        return run;  // its chunks' parameters counted at the end of the step (this device's stage's)
      }
      const lm::Layout layout{run_mesh(o), o.fsdp, o.sp};
      Run run = train(c, layout, text, 1, false);
      dax::tree_for_each([&](const auto& leaf) { parameters += leaf.size(); }, *run.params);
      bytes = lm::check_step_bytes(c, layout, *run.params, run.last_step, dax::Runtime::current().rank(), run.moe_rows);
      return run;  // its parameters counted at the end of the step
    }();
    bytes_ok = bytes_ok && bytes.ok;
    return run;
  };
  std::optional<dax::SimulationReport> report;
  std::optional<dax::SimulationClasses> classes;
  if (o.classes) classes = dax::simulate_classes(devices, step);
  else report = dax::simulate(devices, step);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  if (!root) return bytes_ok ? 0 : 1;
  std::cout << "transformer LM: " << c.layers << " layers, d_model " << c.d_model << ", " << c.heads << " heads, "
            << (parameters > 0 ? std::to_string(parameters / 1e9) + "B parameters, " : std::string()) << "sequence "
            << c.seq << ", batch " << c.batch << ", one AdamW step on " << o.simulate << " simulated devices, data="
            << o.data << (o.pp > 1 ? " x stage=" + std::to_string(o.pp) : std::string())
            << (o.cp > 1 ? " x context=" + std::to_string(o.cp) : std::string()) << " x model=" << o.model
            << (o.pp > 1 ? " (" + o.schedule + ", " + std::to_string(o.microbatches) + " microbatches)" : std::string())
            << (o.fsdp ? " with FSDP" : "")
            << (o.sp ? " with sequence parallelism" : "") << "\n"
            << (classes ? classes->table() : report->table())
            << "bytes against the formulas: " << bytes.regime << (bytes_ok ? "" : " (DIFFER)")
            << (classes ? " (on every device simulated)" : "") << "\n"
            << "simulated in " << seconds << " s, this process's peak memory " << usage.ru_maxrss / 1024 << " MB\n";
  return bytes_ok ? 0 : 1;
}

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  const bool root = rt.rank() == 0;
  bool simulating = false;
  for (int i = 1; i + 1 < argc; ++i) simulating = simulating || std::string(argv[i]) == "--simulate";
  const Options options = parse_options(argc, argv, simulating ? 0 : rt.size());
  if (!options.error.empty()) {
    if (root)
      std::cerr << "transformer_lm: " << options.error << "\n"
                << "usage: transformer_lm [--steps S] [--layers L] [--d-model D] [--heads H] [--seq T] [--batch B]"
                   " [--mesh data=X,model=Y] [--fsdp] [--sp] [--cp N] [--moe E [--top-k K] [--aux-weight W]]"
                   " [--pp N [--schedule GPipe|1F1B|Interleaved1F1B|ZBH1]"
                   " [--microbatches M] [--virtual-stages V]] [--precision f32|bf16|f16] [--simulate N [--device D | --classes]]\n";
    return 2;
  }
  if (options.simulate > 0) return simulated_main(options, root);
  const lm::Config c = options.config;
  const int steps = options.steps;
  const bool fsdp = options.fsdp;
  const int n = rt.size();
  const lm::Layout layout{run_mesh(options), fsdp, options.sp};
  if (options.pp > 1) return pipelined_main(options, root);
  const std::string text = make_text(1 << 16);
  const double entropy = unigram_entropy(text);
  if (root)
    std::cout << "transformer LM: " << c.layers << " layers, d_model " << c.d_model << ", " << c.heads
              << " heads, vocabulary " << c.vocab << ", sequence " << c.seq << ", batch " << c.batch << ", "
              << steps << " AdamW steps on " << layout.mesh << (fsdp ? " with FSDP" : "")
              << (layout.sp ? " with sequence parallelism" : "")
              << (layout.context() ? " with context parallelism (ring attention)" : "") << experts_text(c)
              << (c.compute == dax::DType::float32 ? "" : ", products in " + dax::to_string(c.compute) + " (float32 master weights)")
              << "\n"
              << "training text: " << text.size() << " bytes, unigram entropy " << entropy << " nats\n"
              << "  \"" << text.substr(0, 72) << "...\"\n";

  const Run run = train(c, layout, text, steps, root);

  // The same step planned on simulated devices (dax::simulate, this rank's device): its bytes per
  // collective must be the ones just measured, exactly, and its peak memory within 5% of the
  // memory counter's over the last step.
  // (As many steps as the real run up to two, so that the step compared is a later step in both.)
  std::optional<Run> simulated;
  dax::simulate({.count = n, .device = rt.rank()}, [&] { simulated = train(c, layout, text, std::min(steps, 2), false); });
  // With experts, what the all_to_allv moves and the memory it takes follow the routing, which a
  // simulation (no data) makes even: those two are left out of the comparison.
  const bool routed = c.experts > 0;
  bool simulated_same = same_collectives(simulated->last_step, run.last_step, routed);
  const double peak_ratio = static_cast<double>(simulated->last_step_peak) / static_cast<double>(run.last_step_peak);
  simulated_same = simulated_same && (routed || std::abs(peak_ratio - 1) <= 0.05);

  // Bytes of the last step, per collective and mesh axes, against DESIGN §6's formulas, for this
  // device's own pieces (lm::check_step_bytes).
  const auto& stats = run.last_step;
  const lm::BytesCheck bytes = lm::check_step_bytes(c, layout, *run.params, stats, rt.rank(), run.moe_rows);
  if (root) {
    std::cout << std::fixed << std::setprecision(0);
    std::cout << "one step's collectives (bytes received per device):\n";
    for (const auto& [key, count] : stats.entries())
      std::cout << "  " << std::setw(15) << key.first << " over " << std::setw(12) << key.second << ": "
                << std::setw(3) << count.calls << " calls, " << count.bytes << " B\n";
    // Moves nobody wrote: none at the layouts of the table in transformer_lm.hpp; the cost model
    // may prefer one to Megatron's all-reduce elsewhere (4 heads over model=4), or a split that
    // does not divide the batch forces one (a reshape's all-gather at data=3).
    std::cout << "implicit moves in the forward (ops' own reshards of their inputs): " << run.implicit.size()
              << (run.implicit.empty() ? "\n" : ":\n");
    for (const auto& m : run.implicit)
      std::cout << "  " << m.op << " " << dax::to_string(m.dtype) << dax::to_string(m.shape) << " " << dax::to_string(m.from.spec())
                << " -> " << dax::to_string(m.to.spec()) << ": " << m.bytes << " B\n";
    std::cout << "Megatron activations (" << (layout.sp ? "reduce-scatter + all-gather + " : "")
              << "all-reduce over model, less the cross-entropy's " << bytes.cross_entropy << " B): " << bytes.megatron
              << " B, formula "
              << (c.compute == dax::DType::float32 ? "(4L+2) * 2(m-1)/m"
                  : layout.sp ? "(pL(3s+1) + 3 + s, p = the products a layer, s = 1/2: the 16-bit moves) * (m-1)/m"
                              : "(2L/2 + 2L + 2, the forward's in 16 bits) * 2(m-1)/m")
              << " * |activation| = " << bytes.formula.megatron << " B\n";
    if (fsdp)
      std::cout << "FSDP (all-gather + reduce-scatter over data): " << bytes.fsdp << " B, formula "
                << (c.compute == dax::DType::float32 ? "2(n-1)/n" : "(1/2 + 1)(n-1)/n, gathered in 16 bits,")
                << " * |W| = "
                << bytes.formula.fsdp << " B\n";
    if (layout.fsdp && layout.context())
      std::cout << "FSDP's shards summed over context (all-reduce, the scalars included): " << bytes.data_parallel
                << " B, formula 2(c-1)/c * |W| / n = " << bytes.formula.data_parallel << " B\n";
    else if (!layout.fsdp)
      std::cout << "data parallel (all-reduce over " << (layout.context() ? "data x context" : "data")
                << ", the scalars included): " << bytes.data_parallel << " B, formula 2(n-1)/n * |W|"
                << (layout.sp ? " (SP: over data and model for the norms, biases and wpe)" : "")
                << (c.experts > 0 ? " (the routers over the token axes and model" : "")
                << (c.experts > 0 && layout.context() ? ", the experts over context" : "")
                << (c.experts > 0 ? ")" : "") << " = " << bytes.formula.data_parallel << " B\n";
    if (layout.context())
      std::cout << "context parallel (ring attention's ppermutes over context): " << bytes.context
                << " B, formula L x 4(c-1) x |k or v block| = " << bytes.formula.context << " B\n";
    if (c.experts > 0)
      std::cout << "experts (all_to_allv over data): " << bytes.experts << " B, formula 2 x " << run.moe_rows
                << " rows sent or received x d_model x 4 = " << bytes.experts_formula << " B\n";
    std::cout << std::defaultfloat << std::setprecision(4);
    std::cout << "simulated on " << n << " meta device(s) (dax::simulate): the same collectives and bytes: "
              << (simulated_same ? "yes" : "NO") << "; peak memory " << simulated->last_step_peak << " B against "
              << run.last_step_peak << " B measured (" << peak_ratio << "x)"
              << (routed ? "; the experts' all_to_allv and the memory left out: a simulation routes evenly" : "") << "\n";
    if (c.compute == dax::DType::float16) {
      std::cout << "float16 loss scaling: " << run.skipped.size() << " step(s) skipped on an overflow";
      for (size_t i = 0; i < run.skipped.size(); ++i) std::cout << (i ? ", " : " (") << run.skipped[i];
      std::cout << (run.skipped.empty() ? "" : ")") << "\n";
    }
    std::cout << "training took " << run.seconds << " s (" << c.tokens() * steps / run.seconds << " tokens/s)\n";
  }

  // The reference: the same training on one device (rank 0 alone; at 1 rank it is this run).
  std::vector<double> reference = run.losses;
  if (n > 1 && root) {
    dax::OnlyMeshRanks alone;  // (its experts' shard_maps, if any, run there alone)
    const lm::Layout single{dax::Mesh({1, 1}, {"data", "model"}, {0}), false};
    reference = train(c, single, text, steps, false).losses;
  }
  bool ok = true;
  // bfloat16's 8-bit mantissa: the devices' partial sums, rounded where one device has none,
  // differ by more than float32's; float16 keeps 11 bits. With experts and 16-bit products a
  // token whose top experts' probabilities lie within that rounding of each other may go to the
  // other one, and from then on the runs are not the same trajectory: a few percent.
  const bool routing_flips = c.experts > 0 && c.compute != dax::DType::float32;
  const double tolerance = routing_flips ? 0.05 : c.compute == dax::DType::bfloat16 ? 1e-2 : 1e-3;
  if (root) {
    if (routing_flips)
      std::cout << "(experts with 16-bit products: routing may differ where probabilities tie within rounding; losses "
                   "checked to " << tolerance << ")\n";
    const std::vector<int> checked{1, std::min(50, steps), steps};
    for (int step : checked) {
      const double got = run.losses[static_cast<size_t>(step - 1)], want = reference[static_cast<size_t>(step - 1)];
      const double rel = std::abs(got - want) / std::abs(want);
      std::cout << "step " << step << ": loss " << got << ", on one device " << want << " (relative difference "
                << rel << ")\n";
      ok = ok && rel <= tolerance;
    }
    const double final_loss = run.losses.back();
    std::cout << "final loss " << final_loss << " nats against the unigram entropy " << entropy << " nats\n";
    ok = ok && final_loss < entropy;
  }
  // The bytes must be the formulas' (checked on every rank, for its own pieces) where they apply.
  const bool checkable = bytes.checkable, bytes_ok = bytes.ok && simulated_same;
  if (root) std::cout << "bytes: " << bytes.regime << "\n";
  // Each rank checked its own bytes; rank 0 reports which differed (no rank but 0 prints).
  const dax::Mesh ranks({n}, {"ranks"});
  const std::vector<int32_t> differs =
      dax::from_local<int32_t>({bytes_ok ? 0 : 1}, {n}, dax::NamedSharding(ranks, dax::P("ranks")))
          .to_host();  // gathered on every rank
  const bool all_bytes_ok = std::count(differs.begin(), differs.end(), 1) == 0;
  ok = ok && all_bytes_ok;
  if (!root) return all_bytes_ok ? 0 : 1;
  if (!all_bytes_ok) {
    std::cerr << "transformer_lm: the bytes per step differ from the formulas (or the simulated step's) on rank(s)";
    for (int r = 0; r < n; ++r)
      if (differs[static_cast<size_t>(r)] != 0) std::cerr << " " << r;
    std::cerr << "\n";
  }
  if (!ok) {
    std::cerr << "transformer_lm: FAILED (losses must match one device to " << tolerance << ", end below the unigram entropy, "
                 "and the bytes must be the formulas')\n";
    return 1;
  }
  std::cout << "verified: " << steps << " AdamW steps of a transformer LM on " << layout.mesh.size()
            << " device(s) match one device, end below the unigram entropy"
            << (!checkable ? "" : bytes.fewer ? ", and move fewer bytes than the formulas" : ", and move the formulas' bytes")
            << "\n";
  return 0;
}
