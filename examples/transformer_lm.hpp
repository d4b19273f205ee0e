// The decoder-only transformer of examples/transformer_lm.cpp, shared with
// benchmarks/train_step.cpp: its configuration, its parameters as a DAX_TREE, where each parameter
// lives on a (data, model) mesh (Megatron, optionally FSDP), the loss, and DESIGN §6's formulas for
// the bytes one training step moves.
//
// Activations are kept as (tokens, d_model) matrices with the tokens split over 'data'. Megatron's
// tensor parallelism splits the attention heads and the MLP's hidden units over 'model':
//   wq, wk, wv, w1, b1   column-parallel  P(None, 'model') / P('model')   -> no communication
//   wo, w2               row-parallel     P('model', None)                -> one all-reduce each,
//                        asked for by giving the matmul its output sharding (tokens, replicated)
//   wte                  vocab-parallel   P('model', None): a masked local lookup + one all-reduce
//   head                 vocab-parallel   P(None, 'model'): logits split by vocabulary, into the
//                        vocab-parallel cross-entropy (three all-reduces of one value per token)
// Everything else (positions, norms, the row-parallel biases) is replicated. With FSDP each
// parameter is stored further split over 'data' (optim::shard_over) and gathered for its use.
// With sequence parallelism (Megatron-SP, Layout::sp) the residual stream between the
// tensor-parallel matmuls (embedding sum, layer norms, residual adds) is split over 'model' too,
// by tokens: each row-parallel all-reduce becomes a reduce-scatter (the matmul's output sharding),
// each column-parallel input an all-gather (a reshard); the same bytes, and those activations
// take 1/model of the memory.
// With experts (Config::experts, transformer_lm --moe E) each layer's MLP is a mixture of E
// experts (dax::parallel::moe): the router replicated, the experts split over 'data' (expert
// parallelism on the data axis, as torchtitan and DeepSpeed-MoE place it by default), each token
// sent to its top-k experts' devices and back with all_to_allv; no all-reduce over 'model' for it.
// (The includes below are the ones examples/transformer_lm.cpp also makes first, because the CUDA
// build includes that file inside a namespace; keep the two lists in step.)
#pragma once

#include <dax/dax.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace lm {

using Array = dax::DistArray<float>;
using Ids = dax::DistArray<int32_t>;

struct Config {
  int64_t layers = 2, d_model = 128, heads = 4, vocab = 256, seq = 64, batch = 8;
  int64_t experts = 0;      // > 0: each MLP a mixture of this many experts, split over 'data'
  int top_k = 2;            // the experts each token goes to
  float aux_weight = 0.01f;  // the load-balancing loss's weight (Switch Transformer's)
  dax::DType compute = dax::DType::float32;  // the products' type (--precision); parameters stay float32
  /// How attention runs (dax::dot_product_attention's choice; benchmarks/train_step's --attention).
  dax::AttentionImplementation attention = dax::AttentionImplementation::automatic;
  /// The mixed-precision policy of --precision: float32 master weights and output, products in
  /// `compute`, FSDP's gathers in `compute`, gradients summed in float32 (torchtitan's default).
  dax::optim::Precision precision() const { return {.compute = compute}; }
  int64_t hidden() const { return 4 * d_model; }
  int64_t head_dim() const { return d_model / heads; }
  int64_t tokens() const { return batch * seq; }
};

/// `mlp` holds the dense MLP's w1, b1, w2, b2, or the experts' router, w_in, w_out.
struct Layer {
  Array ln1_g, ln1_b, wq, wk, wv, wo, bo, ln2_g, ln2_b;
  std::map<std::string, Array> mlp;
};
DAX_TREE(Layer, ln1_g, ln1_b, wq, wk, wv, wo, bo, ln2_g, ln2_b, mlp)

struct Model {
  Array wte, wpe;
  std::vector<Layer> layers;
  Array lnf_g, lnf_b, head;
};
DAX_TREE(Model, wte, wpe, layers, lnf_g, lnf_b, head)

/// The last component of a tree path ("layers/1/wq" -> "wq").
inline std::string leaf_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// Megatron's layout of a parameter, by its name (the table at the top of this file).
inline dax::PartitionSpec megatron_spec(const std::string& path) {
  const std::string name = leaf_name(path);
  if (name == "wq" || name == "wk" || name == "wv" || name == "w1" || name == "head") return dax::P(dax::none, "model");
  if (name == "b1") return dax::P("model");
  if (name == "wo" || name == "w2" || name == "wte") return dax::P("model", dax::none);
  if (name == "w_in" || name == "w_out") return dax::P("data");  // the experts (E, ., .)
  return dax::P();
}

/// Where a parameter is used (Megatron), and where it is stored (the same, or with FSDP further
/// split over 'data').
struct Layout {
  dax::Mesh mesh;
  bool fsdp = false;
  bool sp = false;  // sequence parallelism: the residual stream split over 'model' too

  dax::NamedSharding compute(const std::string& path) const { return {mesh, megatron_spec(path)}; }
  dax::NamedSharding stored(const std::string& path, const dax::Shape& shape) const {
    return fsdp ? dax::optim::shard_over("data")(path, compute(path), shape) : compute(path);
  }
  /// Context parallelism (--cp): the mesh has a 'context' axis, the tokens are split over 'data'
  /// and then 'context' (each device its rows' zigzag chunks of the sequence: context_order), and
  /// attention is ring attention over 'context'.
  bool context() const { return mesh.find_axis("context") >= 0; }
  /// The axes that split the tokens (the batch rows, and with --cp the sequence).
  dax::PartitionSpec::Entry token_axes() const {
    return context() ? dax::PartitionSpec::Entry(dax::axes("data", "context")) : dax::PartitionSpec::Entry("data");
  }
  dax::NamedSharding tokens() const { return {mesh, dax::P(token_axes())}; }  // ids, labels
  /// Token positions split like the residual stream's rows.
  dax::NamedSharding residual_tokens() const { return sp ? dax::NamedSharding{mesh, dax::P(sequence_axes())} : tokens(); }
  /// With sequence parallelism the residual stream's tokens are split over the token axes and
  /// then 'model' (with --cp each context block's tokens split again over 'model').
  dax::PartitionSpec::Entry sequence_axes() const {
    return context() ? dax::PartitionSpec::Entry(dax::axes("data", "context", "model"))
                     : dax::PartitionSpec::Entry(dax::axes("data", "model"));
  }
  dax::NamedSharding activations() const { return {mesh, dax::P(token_axes(), dax::none)}; }  // (tokens, d)
  /// The residual stream (tokens, d): the activations' layout, or with sequence parallelism the
  /// tokens split over 'data' and then 'model'.
  dax::NamedSharding residual() const {
    return sp ? dax::NamedSharding{mesh, dax::P(sequence_axes(), dax::none)} : activations();
  }
  /// A column-parallel matmul's input: the residual stream gathered over 'model' (with sequence
  /// parallelism one all-gather; else nothing to do).
  Array gathered_input(const Array& x) const { return sp ? dax::reshard(x, activations()) : x; }
};

/// GPT-2's initialization: normal(0, 0.02) weights, the residual projections scaled by
/// 1/sqrt(2 layers), zero biases, unit norm gains. The values do not depend on the layout.
inline Model init(const Config& c, const Layout& layout, uint64_t seed) {
  const auto root = dax::random::key(seed);
  uint32_t counter = 0;
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.layers));
  auto normal = [&](const std::string& path, dax::Shape shape, float stddev) {
    const auto s = layout.stored(path, shape);
    return dax::random::normal<float>(dax::random::fold_in(root, counter++), shape, s, 0.0f, stddev);
  };
  auto constant = [&](const std::string& path, dax::Shape shape, float value) {
    return dax::full<float>(shape, value, layout.stored(path, shape));
  };
  const int64_t d = c.d_model, f = c.hidden();
  Array wte = normal("wte", {c.vocab, d}, 0.02f), wpe = normal("wpe", {c.seq, d}, 0.01f);
  std::vector<Layer> layers;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "layers/" + std::to_string(l) + "/";
    Layer layer{constant(p + "ln1_g", {d}, 1), constant(p + "ln1_b", {d}, 0),
                normal(p + "wq", {d, d}, 0.02f), normal(p + "wk", {d, d}, 0.02f),
                normal(p + "wv", {d, d}, 0.02f), normal(p + "wo", {d, d}, residual_std),
                constant(p + "bo", {d}, 0), constant(p + "ln2_g", {d}, 1),
                constant(p + "ln2_b", {d}, 0), {}};
    const std::string m = p + "mlp/";
    const int64_t e = c.experts;
    if (e == 0)
      layer.mlp = {{"w1", normal(m + "w1", {d, f}, 0.02f)}, {"b1", constant(m + "b1", {f}, 0)},
                   {"w2", normal(m + "w2", {f, d}, residual_std)}, {"b2", constant(m + "b2", {d}, 0)}};
    else
      layer.mlp = {{"router", normal(m + "router", {d, e}, 0.02f)}, {"w_in", normal(m + "w_in", {e, d, f}, 0.02f)},
                   {"w_out", normal(m + "w_out", {e, f, d}, residual_std)}};
    layers.push_back(std::move(layer));
  }
  return Model{std::move(wte), std::move(wpe), std::move(layers), constant("lnf_g", {d}, 1),
               constant("lnf_b", {d}, 0), normal("head", {d, c.vocab}, 0.02f)};
}

/// Every parameter at its compute layout: with FSDP, one all-gather over 'data' each, in the
/// policy's compute type (--precision bf16: half the bytes; the tape keeps the gathered copy for
/// the backward, whose pullback reduce-scatters the gradient in float32).
template <class Tree>
Tree gathered(const Config& c, const Tree& stored, const Layout& layout) {
  if (!layout.fsdp) return stored;
  return c.precision().gather(stored, [&](const std::string& path, const Array&) { return layout.compute(path); });
}

/// An array in the compute type T (float: itself) and back: under --precision bf16 / f16 the
/// operands are cast on their own pieces (so an FSDP weight is gathered in 16 bits).
template <class T>
dax::DistArray<T> to_compute(const Array& a) {
  if constexpr (std::is_same_v<T, float>) return a;
  else return dax::astype<T>(a);
}
template <class T>
Array to_float(const dax::DistArray<T>& a) {
  if constexpr (std::is_same_v<T, float>) return a;
  else return dax::astype<float>(a);
}

/// A column-parallel product's input in the compute type T: with sequence parallelism gathered
/// over 'model' in T's bytes (its gradient reduce-scattered back in float32: cast_reshard), else
/// converted where it is.
template <class T>
dax::DistArray<T> compute_input(const Layout& layout, const Array& x) {
  if constexpr (std::is_same_v<T, float>) return layout.gathered_input(x);
  else return layout.sp ? dax::cast_reshard<T>(x, layout.activations()) : dax::astype<T>(x);
}

/// f.template operator()<T>() with T the compute type of c.
template <class F>
Array in_compute_type(const Config& c, F&& f) {
  if (c.compute == dax::DType::bfloat16) return f.template operator()<dax::bfloat16>();
  if (c.compute == dax::DType::float16) return f.template operator()<dax::half>();
  return f.template operator()<float>();
}

/// a @ b in the compute type (--precision bf16 / f16: mixed precision, docs/training.md) with a
/// the input of a column-parallel product (compute_input), the product converted back to float32.
/// The gradients, widened back to float32 before they are summed, are reduced in float32
/// (dax::astype keeps partial sums through a widening conversion).
inline Array mm(const Config& c, const Layout& layout, const Array& a, const Array& b) {
  return in_compute_type(c, [&]<class T>() { return to_float(dax::matmul(compute_input<T>(layout, a), to_compute<T>(b))); });
}

/// Attention with context parallelism (--cp): q, k, v projected on each device's own tokens
/// (its rows' zigzag chunks) and heads, then ring attention over 'context' on each device's rows
/// reshaped to (rows, chunks, heads, head_dim) blocks, inside shard_map; the output (tokens, d)
/// laid out as q.
template <class T>
dax::DistArray<T> ring(const Config& c, const Layout& layout, const dax::DistArray<T>& x, const Layer& p, double scale) {
  const auto q = dax::matmul(x, to_compute<T>(p.wq)), k = dax::matmul(x, to_compute<T>(p.wk)),
             v = dax::matmul(x, to_compute<T>(p.wv));
  const dax::PartitionSpec spec(layout.token_axes(), "model");
  const int64_t rows = c.batch / layout.mesh.axis_size("data"), block = c.seq / layout.mesh.axis_size("context");
  return dax::shard_map(
      [&](const dax::DistArray<T>& qb, const dax::DistArray<T>& kb, const dax::DistArray<T>& vb) {
        const dax::Shape blocks{rows, block, qb.shape()[1] / c.head_dim(), c.head_dim()};
        const auto o = dax::parallel::ring_attention_shard(dax::reshape(qb, blocks), dax::reshape(kb, blocks),
                                                           dax::reshape(vb, blocks), "context", true, scale);
        return dax::reshape(o, qb.shape());
      },
      layout.mesh, {spec, spec, spec}, spec)(q, k, v);
}

/// Causal self-attention of x (tokens, d, on the residual stream's layout), heads split over 'model'.
/// Between the input's cast and the output projection everything stays in the compute type, as
/// torch.autocast keeps it: the projections and the attention, whose scores and softmax the fused
/// kernel computes in float.
inline Array attention(const Config& c, const Layout& layout, const Layer& p, const Array& normed) {
  return in_compute_type(c, [&]<class T>() {
    const auto x = compute_input<T>(layout, normed);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim()));
    // Ring attention: k and v travel in the compute type, each block's softmax runs in float.
    if (layout.context())  // row-parallel output: one all-reduce (SP: reduce-scatter)
      return to_float(dax::matmul(ring(c, layout, x, p, scale), to_compute<T>(p.wo), layout.residual())) + p.bo;
    const dax::Shape heads_shape{c.batch, c.seq, c.heads, c.head_dim()};
    const auto q = dax::reshape(dax::matmul(x, to_compute<T>(p.wq)), heads_shape);
    const auto k = dax::reshape(dax::matmul(x, to_compute<T>(p.wk)), heads_shape);
    const auto v = dax::reshape(dax::matmul(x, to_compute<T>(p.wv)), heads_shape);
    // Fused (FlashAttention) where the backend has a fast kernel: no (seq x seq) scores in memory.
    const auto o = dax::dot_product_attention(q, k, v, {.is_causal = true, .scale = scale, .implementation = c.attention});
    const auto out = dax::reshape(o, {c.tokens(), c.d_model});
    // row-parallel: one all-reduce (SP: reduce-scatter)
    return to_float(dax::matmul(out, to_compute<T>(p.wo), layout.residual())) + p.bo;
  });
}

/// Rows this device sent to other devices' experts or received for its own, in every MoE layer's
/// dispatch since the caller last set it to 0 (each such row crosses twice forward and twice
/// backward: there and back).
inline int64_t& moe_rows_moved() {
  static int64_t rows = 0;
  return rows;
}

/// y unchanged, with the load-balancing loss's gradient attached: aux receives the cotangent
/// `weight`, as if weight * aux were added to the loss (Megatron's MoEAuxLossAutoScaler), so the
/// loss needs no plumbing from every layer, pipelined or not; the loss reported is the model's.
inline Array with_aux_loss(const Array& y, const Array& aux, float weight) {
  return dax::custom_vjp(
      "moe_aux_loss", [](const Array& out, const Array& a) { return std::pair{out, a.sharding()}; },
      [weight, shape = aux.shape()](const dax::NamedSharding& s, const Array& g) {
        return std::tuple{g, dax::full<float>(shape, weight, s)};
      })(y, aux);
}

inline Array mlp(const Config& c, const Layout& layout, const Layer& p, const Array& normed) {
  if (c.experts > 0) {  // on the residual stream's tokens, as they are split (no gather under SP)
    const auto out = dax::parallel::moe(normed, {p.mlp.at("router"), p.mlp.at("w_in"), p.mlp.at("w_out")}, "data",
                                        {.top_k = c.top_k});
    moe_rows_moved() += out.routing.rows_sent + out.routing.rows_received;
    return with_aux_loss(out.y, out.aux_loss, c.aux_weight);
  }
  // The hidden layer in the compute type (its bias and GELU too, as under torch.autocast).
  return in_compute_type(c, [&]<class T>() {
    const auto x = compute_input<T>(layout, normed);
    const auto h = dax::gelu(dax::matmul(x, to_compute<T>(p.mlp.at("w1"))) + to_compute<T>(p.mlp.at("b1")),
                             /*approximate=*/true);
    // row-parallel: one all-reduce (SP: reduce-scatter)
    return to_float(dax::matmul(h, to_compute<T>(p.mlp.at("w2")), layout.residual())) + p.mlp.at("b2");
  });
}

/// The embedding: the vocab-parallel lookup (one all-reduce; SP: a reduce-scatter) plus the
/// positions' rows, looked up where the residual stream's rows are (with SP each device its own
/// tokens' positions: no communication either way, wpe's gradient summed with the others').
inline Array embed(const Layout& layout, const Array& wte, const Array& wpe, const Ids& ids, const Ids& positions) {
  const dax::NamedScope scope("embedding");
  return dax::take(wte, ids, 0, layout.residual()) + dax::take(wpe, dax::reshard(positions, layout.residual_tokens()), 0);
}

/// The layers on the residual stream x.
inline Array blocks(const Config& c, const Layout& layout, const std::vector<Layer>& layers, Array x) {
  // Named scopes: the simulated report and dax::profile say which part of a block each
  // collective (and its gradient's) came from.
  for (const Layer& p : layers) {
    {
      const dax::NamedScope scope("attention");
      x = x + attention(c, layout, p, dax::layer_norm(x, p.ln1_g, p.ln1_b));
    }
    const dax::NamedScope scope(c.experts > 0 ? "experts" : "mlp");
    x = x + mlp(c, layout, p, dax::layer_norm(x, p.ln2_g, p.ln2_b));
  }
  return x;
}

/// The final norm and the vocab-parallel head: logits split by vocabulary.
inline Array head(const Config& c, const Layout& layout, const Array& x, const Array& g, const Array& b, const Array& w) {
  return mm(c, layout, dax::layer_norm(x, g, b), w);
}

/// The residual stream after the last layer (the head's input, before its norm).
inline Array hidden(const Config& c, const Layout& layout, const Model& m, const Ids& ids, const Ids& positions) {
  return blocks(c, layout, m.layers, embed(layout, m.wte, m.wpe, ids, positions));
}

/// The mean next-token cross-entropy of the batch: ids and labels (batch * seq), split over 'data'.
inline Array loss(const Config& c, const Layout& layout, const Model& stored, const Ids& ids, const Ids& positions,
                  const Ids& labels) {
  const Model m = gathered(c, stored, layout);
  const Array x = hidden(c, layout, m, ids, positions);
  const dax::NamedScope scope("head and loss");
  return dax::cross_entropy(head(c, layout, x, m.lnf_g, m.lnf_b, m.head), labels);
}

// ---- The same model cut into pipeline chunks (transformer_lm --pp N, dax::pipeline) ----

/// A pipeline chunk's parameters: a run of layers, with the embeddings ("wte", "wpe") on the first
/// chunk and the final norm and head ("lnf_g", "lnf_b", "head") on the last; the maps are empty
/// elsewhere. Paths end in the same names as Model's, so megatron_spec lays them out alike.
struct Chunk {
  std::map<std::string, Array> embed;
  std::vector<Layer> layers;
  std::map<std::string, Array> final;
};
DAX_TREE(Chunk, embed, layers, final)

/// The layers [first, last) of chunk `chunk` of `chunks`: as even as they go, the first chunks
/// taking one more.
inline std::pair<int64_t, int64_t> chunk_layers(const Config& c, int chunk, int chunks) {
  const int64_t base = c.layers / chunks, extra = c.layers % chunks;
  const int64_t first = chunk * base + std::min<int64_t>(chunk, extra);
  return {first, first + base + (chunk < extra ? 1 : 0)};
}

/// Chunk `chunk`'s parameters on `layout` (its stage's mesh), with the values init gives the whole
/// model, so a pipelined run starts where the unpipelined one does.
inline Chunk init_chunk(const Config& c, const Layout& layout, uint64_t seed, int chunk, int chunks) {
  Model m = init(c, layout, seed);
  const auto [first, last] = chunk_layers(c, chunk, chunks);
  Chunk out;
  if (chunk == 0) out.embed = {{"wte", m.wte}, {"wpe", m.wpe}};
  out.layers.assign(m.layers.begin() + first, m.layers.begin() + last);
  if (chunk == chunks - 1) out.final = {{"lnf_g", m.lnf_g}, {"lnf_b", m.lnf_b}, {"head", m.head}};
  return out;
}

/// A batch's values (rows of c.seq, row-major) in the order the tokens lie with context parallelism
/// (Layout::tokens splits them over 'data' and then 'context'): data group by data group, context
/// block by block, each block its rows' zigzag chunks (dax::parallel::zigzag_order: chunks i and
/// 2c-1-i of every row). Ids, labels and positions alike; without a 'context' axis, unchanged.
template <class V>
std::vector<V> context_order(const Config& c, const Layout& layout, const std::vector<V>& values) {
  if (!layout.context()) return values;
  const int64_t groups = layout.mesh.axis_size("data"), blocks = layout.mesh.axis_size("context");
  const int64_t rows = c.batch / groups, block = c.seq / blocks;
  const std::vector<int64_t> zigzag = dax::parallel::zigzag_order(c.seq, static_cast<int>(blocks));
  std::vector<V> out;
  out.reserve(values.size());
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t t = 0; t < block; ++t)
          out.push_back(values[static_cast<size_t>((g * rows + r) * c.seq + zigzag[static_cast<size_t>(b * block + t)])]);
  return out;
}

/// A chunk's forward for a microbatch (`c.batch` is the microbatch's rows): token ids in on the
/// first chunk, activations (tokens, d_model) otherwise; activations out, or the logits on the last.
template <class In>
Array chunk_forward(const Config& c, const Layout& layout, const Chunk& stored, const In& in) {
  const Chunk p = gathered(c, stored, layout);
  Array x = [&] {
    if constexpr (std::is_same_v<In, Ids>) {
      std::vector<int32_t> positions;
      for (int64_t i = 0; i < c.tokens(); ++i) positions.push_back(static_cast<int32_t>(i % c.seq));
      // With --cp the microbatch's tokens lie in context order (the caller put its ids so).
      const Ids pos = dax::device_put(context_order(c, layout, positions), {c.tokens()}, layout.tokens());
      return embed(layout, p.embed.at("wte"), p.embed.at("wpe"), in, pos);
    } else {
      return in;
    }
  }();
  x = blocks(c, layout, p.layers, x);
  if (p.final.empty()) return x;
  const dax::NamedScope scope("head");
  return head(c, layout, x, p.final.at("lnf_g"), p.final.at("lnf_b"), p.final.at("head"));
}

/// DESIGN §6's bytes for one training step, received per device (ring collectives).
struct StepBytes {
  double megatron = 0;  // all-reduces of activations over 'model'
  double data_parallel = 0;  // all-reduce of the gradients over 'data' (without FSDP)
  double fsdp = 0;  // all-gather of the parameters + reduce-scatter of the gradients over 'data'
  double context = 0;  // --cp: ring attention's k and v blocks around 'context', forward and back
  double total() const { return megatron + data_parallel + fsdp + context; }
};

/// The compute type's bytes per float32 byte (--precision bf16 / f16: 0.5).
inline double compute_share(const Config& c) { return static_cast<double>(dax::itemsize(c.compute)) / 4; }

/// `tokens_here`: the tokens of one device's piece of the batch; `pieces_bytes`: the bytes of its
/// pieces of every parameter at their compute layout.
inline StepBytes formula_bytes(const Config& c, const Layout& layout, double tokens_here, double pieces_bytes) {
  const double n_data = static_cast<double>(layout.mesh.axis_size(layout.mesh.axis_index("data")));
  const double n_model = static_cast<double>(layout.mesh.axis_size(layout.mesh.axis_index("model")));
  const double activation = tokens_here * static_cast<double>(c.d_model) * 4;
  // Forward: the embedding's all-reduce and two per layer (attention and MLP outputs); backward:
  // two per layer (the gradients of the column-parallel inputs) and one for the head's input.
  // Experts in place of the MLP take its two away (they work on every device's tokens whole).
  // With --precision bf16 / f16 the forward's products reduce in the compute type (half the
  // bytes); the embedding's and the backward's in float32 (see mm).
  const double per_layer = c.experts > 0 ? 1 : 2, layers = static_cast<double>(c.layers);
  const double s = compute_share(c);
  const double activation_reduces = per_layer * layers * s + 1 + per_layer * layers + 1;
  StepBytes b;
  b.megatron = activation_reduces * 2 * (n_model - 1) / n_model * activation;
  if (layout.sp) {
    // Each all-reduce a reduce-scatter and an all-gather, (m-1)/m of an activation each, where
    // they run in the compute type: forward, every product's all-gathered input and
    // reduce-scattered output (2 a product), and the head's input; backward, the gathered
    // outputs' cotangents (the transpose of a reduce-scatter). In float32: the inputs' gradients
    // reduce-scattered (cast_reshard widens them first), the embedding's both ways, the head's input's.
    const double units = per_layer * layers * (2 * s + s + 1) + 3 + s;
    b.megatron = units * (n_model - 1) / n_model * activation;
  }
  // With --cp the gradients sum over the tokens of data x context; each layer's ring attention
  // passes its k and v blocks (this device's tokens x its heads' width) c - 1 steps forward and
  // their gradients c - 1 steps back (the tape's backward), in the compute type.
  const double n_context = layout.context() ? static_cast<double>(layout.mesh.axis_size("context")) : 1;
  const double n_tokens = n_data * n_context;
  // FSDP gathers in the compute type and reduce-scatters the gradients in float32.
  if (layout.fsdp) b.fsdp = (s + 1) * (n_data - 1) / n_data * pieces_bytes;
  else b.data_parallel = 2 * (n_tokens - 1) / n_tokens * pieces_bytes;
  const double block = tokens_here * static_cast<double>(c.d_model) / n_model * static_cast<double>(dax::itemsize(c.compute));
  b.context = static_cast<double>(c.layers) * 4 * (n_context - 1) * block;
  return b;
}

/// The bytes of this device's pieces of every parameter at its compute layout that data
/// parallelism reduces: all but the experts, whose gradients are their own devices' alone.
template <class Tree>
double pieces_bytes(const Layout& layout, const Tree& params, int device) {
  double bytes = 0;
  dax::tree_for_each_with_path([&](const std::string& path, const Array& p) {
    if (const std::string name = leaf_name(path); name == "w_in" || name == "w_out") return;
    const auto pieces = layout.compute(path).devices_indices_map(p.shape());
    if (pieces.count(device) != 0) bytes += static_cast<double>(dax::numel(pieces.at(device))) * 4;
  }, params);
  return bytes;
}

/// The bytes of this device's pieces of the experts (w_in, w_out). With sequence parallelism their
/// gradients are summed over 'model' (each device of a 'model' group routes its own tokens to the
/// same experts): 2(m-1)/m of these bytes, counted with the all-reduces over 'model'.
template <class Tree>
double expert_pieces_bytes(const Layout& layout, const Tree& params, int device) {
  double bytes = 0;
  dax::tree_for_each_with_path([&](const std::string& path, const Array& p) {
    if (const std::string name = leaf_name(path); name != "w_in" && name != "w_out") return;
    const auto pieces = layout.compute(path).devices_indices_map(p.shape());
    if (pieces.count(device) != 0) bytes += static_cast<double>(dax::numel(pieces.at(device))) * 4;
  }, params);
  return bytes;
}

/// The bytes of the routers. Their weights' gradient contracts over the tokens, which the planner
/// splits over 'model' too where the tokens are replicated there (halving that matmul): so it is
/// reduced over data x model, like the sequence-summed gradients of SP (data_parallel_formula).
template <class Tree>
double router_bytes(const Tree& params) {
  double bytes = 0;
  dax::tree_for_each_with_path([&](const std::string& path, const Array& p) {
    if (leaf_name(path) == "router") bytes += static_cast<double>(p.size()) * 4;
  }, params);
  return bytes;
}

/// A mixture-of-experts layer's small all-reduces per call, over the g devices that split the
/// tokens: the batch's mean router probabilities (the load-balancing loss) and the tokens per
/// expert with the drops (ring all-reduce bytes).
inline double experts_scalar_bytes(const Config& c, double g) {
  return c.experts > 0 ? 2 * (g - 1) / g * (static_cast<double>(c.experts) * 4 + static_cast<double>(c.experts + 1) * 8)
                       : 0;
}

/// With sequence parallelism, the bytes of the parameters whose gradients sum over the residual
/// stream's tokens (the norms, the row-parallel biases, the position table): replicated over
/// 'model' but with each device's tokens their own, so reduced over 'data' and 'model' together.
template <class Tree>
double sequence_summed_bytes(const Tree& params) {
  double bytes = 0;
  dax::tree_for_each_with_path([&](const std::string& path, const Array& p) {
    if (megatron_spec(path) == dax::P()) bytes += static_cast<double>(p.size()) * 4;  // the replicated ones
  }, params);
  return bytes;
}

/// The gradients' all-reduce (ring): 2(n-1)/n of the pieces over 'data', and with sequence
/// parallelism (n_sp = the model axis) the sequence-summed ones over data x model.
inline double data_parallel_formula(double n_data, double n_sp, double pieces_bytes, double sequence_bytes) {
  const double n = n_data * n_sp;
  return 2 * (n_data - 1) / n_data * (pieces_bytes - sequence_bytes) + 2 * (n - 1) / n * sequence_bytes;
}

/// The gradients' all-reduces in a step's counts: every group but 'model' alone (the
/// activations'): over 'data', with --cp over data x context, the parameters replicated over
/// 'model' (SP's sequence-summed ones, the routers) over those and 'model' too, with --cp the
/// experts over 'context', and the scalars (the loss's mean, the clipping norm).
inline double gradient_reduce_bytes(const dax::CommStats& stats) {
  double bytes = 0;
  for (const auto& [key, count] : stats.entries())
    if (key.first == "all_reduce" && key.second != "('model',)") bytes += static_cast<double>(count.bytes);
  return bytes;
}

/// FSDP with SP, once per backward: the sequence-summed parameters' shards (1/data of `sequence_bytes`
/// after the reduce-scatter) summed over 'model' too, where SP split their tokens: alone (counted
/// with the all-reduces over 'model'), or with --cp (n_context > 1) in one all-reduce over context x
/// model (with the gradients' sums, less the context-only sum FSDP's formula already counts).
struct SequenceSums {
  double over_model = 0, with_gradients = 0;
};
inline SequenceSums fsdp_sequence_sums(double sequence_bytes, double n_data, double n_context, double n_model) {
  const double shard = sequence_bytes / n_data, n_cm = n_context * n_model;
  if (n_context > 1) return {0, (2 * (n_cm - 1) / n_cm - 2 * (n_context - 1) / n_context) * shard};
  return {2 * (n_model - 1) / n_model * shard, 0};
}

/// One training step's bytes (dax::comm_stats of the step) next to the formulas, for this device.
struct BytesCheck {
  double megatron = 0;       // all-reduces over 'model', less the cross-entropy's
  double cross_entropy = 0;  // the vocab-parallel cross-entropy's three all-reduces of a value per token
  double data_parallel = 0;  // all-reduces over 'data' (with SP, over 'data' and 'model' too)
  double fsdp = 0;           // all-gathers + reduce-scatters over 'data'
  double sequence_parallel = 0;  // with SP: the reduce-scatters and all-gathers over 'model' (in `megatron` too)
  double context = 0;        // with --cp: ppermutes over 'context' (ring attention)
  double experts = 0, experts_formula = 0;  // with experts: all_to_allv over 'data', and 2 x the rows
                                            // moved (sent + received) x d_model x 4: each goes there
                                            // and back, forward and backward
  StepBytes formula;
  bool checkable = false;  // the formulas apply: the data axis divides the batch (and, with FSDP, every
                           // parameter splits evenly over it)
  bool fewer = false;      // the activations' bytes are below Megatron's: the planner found cheaper moves
  bool ok = true;          // checkable and as the formulas say (see check_step_bytes), or not checkable
  std::string regime;      // which case it is, in words
  static constexpr double tolerance = 64;  // the scalars: the loss's mean and the clipping norm
};

inline BytesCheck check_step_bytes(const Config& c, const Layout& layout, const Model& params,
                                   const dax::CommStats& stats, int device, int64_t moe_rows = 0) {
  const double pieces_bytes = lm::pieces_bytes(layout, params, device);
  BytesCheck b;
  // This device's own piece of the tokens (uneven when the data axis does not divide them).
  const double tokens_here =
      static_cast<double>(dax::numel(layout.tokens().devices_indices_map({c.tokens()}).at(device)));
  b.formula = formula_bytes(c, layout, tokens_here, pieces_bytes);
  const double token_groups = static_cast<double>(layout.mesh.axis_size(layout.mesh.axis_index("data")) *
                                                  (layout.context() ? layout.mesh.axis_size("context") : 1) *
                                                  (layout.sp ? layout.mesh.axis_size(layout.mesh.axis_index("model")) : 1));
  const double experts_scalars = static_cast<double>(c.layers) * experts_scalar_bytes(c, token_groups);
  const double n_model = static_cast<double>(layout.mesh.axis_size(layout.mesh.axis_index("model")));
  b.cross_entropy = 3 * 2 * (n_model - 1) / n_model * tokens_here * 4;
  b.megatron = static_cast<double>(stats.of("all_reduce", "('model',)").bytes) - b.cross_entropy;
  b.data_parallel = gradient_reduce_bytes(stats);
  if (layout.context()) b.context = static_cast<double>(stats.of("ppermute", "('context',)").bytes);
  const double n_context = layout.context() ? static_cast<double>(layout.mesh.axis_size("context")) : 1;
  const double n_tokens = static_cast<double>(layout.mesh.axis_size(layout.mesh.axis_index("data"))) * n_context;
  if (layout.sp) {
    // Each Megatron all-reduce is a reduce-scatter and an all-gather.
    b.sequence_parallel = static_cast<double>(stats.of("reduce_scatter", "('model',)").bytes +
                                              stats.of("all_gather", "('model',)").bytes);
    b.megatron += b.sequence_parallel;
  }
  // The parameters replicated over 'model' whose gradients contract over tokens split (SP) or
  // splittable (the routers: the planner halves that product over 'model') there: reduced over
  // the token axes and 'model' together.
  if (layout.sp || c.experts > 0)
    b.formula.data_parallel = data_parallel_formula(n_tokens, n_model, pieces_bytes,
                                                    layout.sp ? sequence_summed_bytes(params) : router_bytes(params));
  // The experts' gradients sum over the devices that route tokens to the same experts: with SP
  // the 'model' group (counted with its all-reduces), with --cp the 'context' group (and 'model').
  const double n_expert_group = n_context * (layout.sp ? n_model : 1);
  if (layout.context())
    b.formula.data_parallel += 2 * (n_expert_group - 1) / n_expert_group * expert_pieces_bytes(layout, params, device);
  else if (layout.sp)
    b.formula.megatron += 2 * (n_model - 1) / n_model * expert_pieces_bytes(layout, params, device);
  b.formula.data_parallel += experts_scalars;
  b.fsdp = static_cast<double>(stats.of("all_gather", "('data',)").bytes) +
           static_cast<double>(stats.of("reduce_scatter", "('data',)").bytes);
  // When the data axis does not divide the batch, the attention's reshape to (batch, seq, heads,
  // head_dim) must move rows too, which the formulas leave out; so do FSDP's uneven pieces (a
  // gather moves the largest piece from every device).
  const int64_t n_data = layout.mesh.axis_size(layout.mesh.axis_index("data"));
  bool even = true;
  if (layout.fsdp)
    dax::tree_for_each_with_path([&](const std::string& path, const Array& p) {
      int64_t first = -1;
      for (const auto& [device_id, box] : layout.stored(path, p.shape()).devices_indices_map(p.shape())) {
        if (first < 0) first = dax::numel(box);
        even = even && dax::numel(box) == first;
      }
    }, params);
  b.checkable = c.batch % n_data == 0 && even;
  // FSDP with --cp: each device's shard of the gradients (1/data of its pieces) is then summed
  // over 'context' (HSDP's replica all-reduce): 2(c-1)/c of it.
  if (layout.fsdp)
    b.formula.data_parallel = 2 * (n_context - 1) / n_context * pieces_bytes / static_cast<double>(n_data);
  // FSDP with SP: the sequence-summed parameters' shards (1/data of them, after the reduce-scatter
  // over 'data') are summed over 'model' too, where their tokens were split: alone (counted with
  // the all-reduces over 'model'), or with --cp together with 'context', in one all-reduce.
  if (layout.fsdp && layout.sp) {
    const auto sums = fsdp_sequence_sums(sequence_summed_bytes(params), static_cast<double>(n_data), n_context, n_model);
    b.formula.megatron += sums.over_model;
    b.formula.data_parallel += sums.with_gradients;
  }
  const bool weights_ok = (!layout.fsdp || std::abs(b.fsdp - b.formula.fsdp) <= BytesCheck::tolerance) &&
                          std::abs(b.data_parallel - b.formula.data_parallel) <= BytesCheck::tolerance;
  // Megatron all-reduces every activation; with many tokens per device the planner moves the
  // (smaller) weights instead, at fewer bytes, which the check accepts and names. More bytes
  // than Megatron's never pass.
  b.fewer = b.megatron < b.formula.megatron - BytesCheck::tolerance;
  const bool activations_ok = b.megatron <= b.formula.megatron + BytesCheck::tolerance;
  b.experts = static_cast<double>(stats.of("all_to_allv", "('data',)").bytes);
  b.experts_formula = 2.0 * static_cast<double>(moe_rows) * static_cast<double>(c.d_model) * 4;
  b.ok = !b.checkable ||
         (weights_ok && activations_ok && b.experts == b.experts_formula &&
          std::abs(b.context - b.formula.context) <= BytesCheck::tolerance);
  if (!b.checkable)
    b.regime = c.batch % n_data != 0 ? "not checked: the data axis does not divide the batch"
                                      : "not checked: FSDP splits some parameters unevenly over the data axis";
  else if (b.fewer)
    b.regime = "fewer bytes than Megatron's formula: with this many tokens per device the planner moves weights "
               "rather than all-reducing every activation";
  else
    b.regime = "Megatron's bytes";
  return b;
}

}  // namespace lm
