// How much communication the collective matmuls hide behind their GEMMs, on a 1-d mesh of every
// rank, float32. For all_gather_matmul (a P('x', None) @ b P(None, 'x') -> P(None, 'x')) and
// matmul_reduce_scatter (a P(None, 'x') @ b P('x', None) -> P('x', None)) it times (max over
// ranks, median over iterations): the local GEMMs alone (the same per-rank work, one call and in
// the ring's tiles), the communication alone (the all-gather of a; the reduce-scatter of the
// partial product), the unfused op (reshard then matmul; the split-K matmul left unreduced, then
// reshard: a reduce-scatter) and the collective one. hidden = (unfused - collective) / comm: 1
// means the communication cost nothing, 0 that it was not overlapped at all. Then the same for
// reshard_async of a separate array against a tiled GEMM with ready() between tiles, and for an
// FSDP forward (4 layers of (k, k) weights split by rows) with and without dax::prefetch.
// Usage: mpirun -np 2 --bind-to core overlap_bench [--m 4096] [--k 4096] [--n 4096] [--iters 7]
//                                                   [--fsdp-batch 512] [--json overlap_bench.json]
#include <dax/dax.hpp>

#include "bench_common.hpp"

#include <algorithm>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Row {
  std::string name;
  double gemm_s = 0, tiled_gemm_s = 0, comm_s = 0, unfused_s = 0, overlapped_s = 0;
  double hidden() const { return (unfused_s - overlapped_s) / comm_s; }
  double ratio() const { return overlapped_s / unfused_s; }
};

/// The median over `iters` rounds of each call's slowest-rank time, the calls taking turns within
/// a round so that drift in the machine's load reaches all of them alike (after one warm-up round:
/// plans, rules, communicators and pooled buffers made).
std::vector<double> time_rounds(const std::vector<std::function<void()>>& calls, int iters) {
  for (const auto& call : calls) dax::bench::slowest_rank_seconds(call);
  std::vector<std::vector<double>> times(calls.size());
  for (int i = 0; i < iters; ++i)
    for (size_t c = 0; c < calls.size(); ++c) times[c].push_back(dax::bench::slowest_rank_seconds(calls[c]));
  std::vector<double> medians;
  for (const auto& t : times) medians.push_back(dax::bench::median(t));
  return medians;
}

/// c (rows, n) = a (rows, k) @ b (k, n), host float32 buffers: in one call, or (`tiled`) as the
/// ring of `parts` members runs it, each row block in its tiles, calling `between()` after each
/// tile but the last.
void local_gemm(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& c, int64_t rows,
                int64_t k, int64_t n, bool tiled, int parts, const std::function<void()>& between = {}) {
  auto gemm = [&](int64_t r, int64_t h) {
    dax::detail::dev::batched_gemm(a.data() + r * k, dax::Shape{h, k}, b.data(), dax::Shape{k, n},
                                   c.data() + r * n, dax::Shape{h, n});
  };
  if (!tiled) return gemm(0, rows);
  for (int part = 0; part < parts; ++part) {
    const dax::Slice block = dax::detail::chunk_piece(rows, parts, part);
    const int64_t tile = dax::detail::ring_tile_rows(block.size());
    for (int64_t r = block.start; r < block.stop; r += tile) {
      gemm(r, std::min(tile, block.stop - r));
      if (between && (r + tile < block.stop || part + 1 < parts)) between();
    }
  }
}

std::vector<float> filled(int64_t count, int seed) {
  std::vector<float> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = float((i * 7 + seed) % 17) * 0.125f - 1.0f;
  return v;
}

/// The line of explain_matmul's table the rule chose.
std::string chosen_line(const std::string& explanation) {
  std::istringstream in(explanation);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("* ", 0) == 0) return line;
  return "(none)";
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  int64_t m = 4096, k = 4096, n = 4096;
  int iters = 7;
  int64_t fsdp_batch = 512;
  std::string json = "overlap_bench.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--m") m = std::stoll(argv[i + 1]);
    else if (flag == "--k") k = std::stoll(argv[i + 1]);
    else if (flag == "--n") n = std::stoll(argv[i + 1]);
    else if (flag == "--iters") iters = std::stoi(argv[i + 1]);
    else if (flag == "--fsdp-batch") fsdp_batch = std::stoll(argv[i + 1]);
    else if (flag == "--json") json = argv[i + 1];
  }
  const int p = rt.size();
  const bool lead = rt.rank() == 0;
  const dax::Mesh line({p}, {"x"});
  auto on = [&](dax::P spec) { return dax::NamedSharding(line, spec); };
  const auto a_host = filled(m * k, 1), b_host = filled(k * n, 2);
  std::vector<Row> table;
  std::ostringstream notes;

  {  // all_gather_matmul: a's rows gathered while the blocks already here are multiplied.
    const auto a = dax::device_put(a_host, {m, k}, on(dax::P("x")));
    const auto b = dax::device_put(b_host, {k, n}, on(dax::P(dax::none, "x")));
    const auto out = on(dax::P(dax::none, "x"));
    notes << "# all_gather_matmul, unfused: reshard(a, P()) then matmul; the rule for matmul(a, b, P(None, 'x')),\n"
          << "#   free to avoid the all-gather, chooses "
          << chosen_line(dax::explain_matmul(a, b, out)) << "\n";
    const int64_t n_piece = b.local_shape()[1];
    const std::vector<float> whole_a(a_host), b_piece(b.local_to_host());
    std::vector<float> c(m * n_piece);
    Row row;
    row.name = "all_gather_matmul";
    const auto t = time_rounds(
        {[&] { local_gemm(whole_a, b_piece, c, m, k, n_piece, false, p); },
         [&] { local_gemm(whole_a, b_piece, c, m, k, n_piece, true, p); },
         [&] { dax::reshard(a, on(dax::P())); },
         [&] { dax::matmul(dax::reshard(a, on(dax::P())), b, out); },
         [&] { dax::all_gather_matmul(a, b, "x"); }},
        iters);
    row.gemm_s = t[0], row.tiled_gemm_s = t[1], row.comm_s = t[2], row.unfused_s = t[3], row.overlapped_s = t[4];
    table.push_back(row);
  }

  {  // matmul_reduce_scatter: each row block's partial sums travel on while the next is multiplied.
    const auto a = dax::device_put(a_host, {m, k}, on(dax::P(dax::none, "x")));
    const auto b = dax::device_put(b_host, {k, n}, on(dax::P("x")));
    const auto out = on(dax::P("x"));
    const auto partial_sums = on(dax::P().with_unreduced("x"));
    notes << "# matmul_reduce_scatter, unfused: matmul(a, b, P(unreduced 'x')), then reshard to P('x'); the rule\n"
          << "#   for matmul(a, b, P(unreduced 'x')): " << chosen_line(dax::explain_matmul(a, b, partial_sums)) << "\n"
          << "#   for matmul(a, b, P('x')), free to avoid the reduce-scatter: "
          << chosen_line(dax::explain_matmul(a, b, out)) << "\n";
    const int64_t k_piece = a.local_shape()[1];
    const std::vector<float> a_piece(a.local_to_host()), b_piece(b.local_to_host());
    std::vector<float> c(m * n);
    const auto partial = dax::from_local(filled(m * n, 3), {m, n}, on(dax::P().with_unreduced("x")));
    Row row;
    row.name = "matmul_reduce_scatter";
    const auto t = time_rounds(
        {[&] { local_gemm(a_piece, b_piece, c, m, k_piece, n, false, p); },
         [&] { local_gemm(a_piece, b_piece, c, m, k_piece, n, true, p); },
         [&] { dax::reshard(partial, out); },
         [&] { dax::reshard(dax::matmul(a, b, partial_sums), out); },
         [&] { dax::matmul_reduce_scatter(a, b, "x"); }},
        iters);
    row.gemm_s = t[0], row.tiled_gemm_s = t[1], row.comm_s = t[2], row.unfused_s = t[3], row.overlapped_s = t[4];
    table.push_back(row);
  }

  {  // reshard_async of a separate array behind the GEMM of all_gather_matmul's per-rank work.
    const auto z = dax::device_put(a_host, {m, k}, on(dax::P("x")));
    const auto b = dax::device_put(b_host, {k, n}, on(dax::P(dax::none, "x")));
    const int64_t n_piece = b.local_shape()[1];
    const std::vector<float> whole_a(a_host), b_piece(b.local_to_host());
    std::vector<float> c(m * n_piece);
    Row row;
    row.name = "reshard_async + GEMM";
    const auto t = time_rounds(
        {[&] { local_gemm(whole_a, b_piece, c, m, k, n_piece, false, p); },
         [&] { local_gemm(whole_a, b_piece, c, m, k, n_piece, true, p); },
         [&] { dax::reshard(z, on(dax::P())); },
         [&] {
           dax::reshard(z, on(dax::P()));
           local_gemm(whole_a, b_piece, c, m, k, n_piece, true, p);
         },
         [&] {
           auto pending = dax::reshard_async(z, on(dax::P()));
           local_gemm(whole_a, b_piece, c, m, k, n_piece, true, p, [&] { pending.ready(); });
           pending.wait();
         }},
        iters);
    row.gemm_s = t[0], row.tiled_gemm_s = t[1], row.comm_s = t[2], row.unfused_s = t[3], row.overlapped_s = t[4];
    table.push_back(row);
  }

  {  // FSDP forward: each layer's weight (k, k) split by rows, all-gathered for its matmul; the
     // batch (fsdp_batch, k) split by rows. unfused: reshard then matmul per layer; overlapped:
     // dax::prefetch, layer l + 1's all-gather in flight while layer l multiplies.
    const int layers = 4;
    std::vector<dax::DistArray<float>> shards, gathered;
    for (int l = 0; l < layers; ++l) {
      shards.push_back(dax::device_put(filled(k * k, 10 + l), {k, k}, on(dax::P("x"))));
      gathered.push_back(dax::reshard(shards.back(), on(dax::P())));
    }
    const auto x = dax::device_put(filled(fsdp_batch * k, 4), {fsdp_batch, k}, on(dax::P("x")));
    auto forward = [&](auto&& weight) {
      auto h = x;
      for (int l = 0; l < layers; ++l) h = dax::tanh(dax::matmul(h, weight(l)));
      return h;
    };
    Row row;
    row.name = "FSDP prefetch";
    const auto t = time_rounds(
        {[&] { forward([&](int l) { return gathered[l]; }); },
         [&] {
           for (int l = 0; l < layers; ++l) dax::reshard(shards[l], on(dax::P()));
         },
         [&] { forward([&](int l) { return dax::reshard(shards[l], on(dax::P())); }); },
         [&] {
           auto weights = dax::prefetch(shards, on(dax::P()));
           forward([&](int) { return weights.next(); });
         }},
        iters);
    row.gemm_s = row.tiled_gemm_s = t[0], row.comm_s = t[1], row.unfused_s = t[2], row.overlapped_s = t[3];
    notes << "# FSDP prefetch: " << layers << " layers of tanh(h @ W), W (" << k << ", " << k
          << ") split by rows, batch (" << fsdp_batch << ", " << k << ") split by rows; gemm = the forward with\n"
          << "#   the weights already gathered, comm = the " << layers << " all-gathers, unfused = reshard then matmul,"
          << " overlapped = dax::prefetch\n";
    table.push_back(row);
  }

  if (lead) {
    std::cout << "# overlap benchmark: float32 a (" << m << ", " << k << ") @ b (" << k << ", " << n << "), " << p
              << " ranks, median of " << iters << " iterations (max over ranks), seconds\n"
              << notes.str() << "# reshard_async + GEMM: unfused = reshard then the tiled GEMM; overlapped = "
              << "reshard_async, the tiled GEMM calling ready() between tiles, wait()\n";
    std::cout << std::left << std::setw(24) << "# case" << std::right << std::setw(10) << "gemm" << std::setw(12)
              << "gemm_tiled" << std::setw(10) << "comm" << std::setw(10) << "unfused" << std::setw(12)
              << "overlapped" << std::setw(9) << "hidden" << std::setw(12) << "ovl/unfused" << "\n";
    std::ostringstream js;
    js << "{\n  \"benchmark\": \"overlap\", \"ranks\": " << p << ", \"dtype\": \"float32\", \"m\": " << m
       << ", \"k\": " << k << ", \"n\": " << n << ", \"iters\": " << iters << ",\n  \"rows\": [\n";
    for (size_t i = 0; i < table.size(); ++i) {
      const Row& r = table[i];
      std::cout << std::left << std::setw(24) << r.name << std::right << std::fixed << std::setprecision(4)
                << std::setw(10) << r.gemm_s << std::setw(12) << r.tiled_gemm_s << std::setw(10) << r.comm_s
                << std::setw(10) << r.unfused_s << std::setw(12) << r.overlapped_s << std::setprecision(3)
                << std::setw(9) << r.hidden() << std::setw(12) << r.ratio() << "\n";
      js << "    {\"case\": \"" << r.name << "\", \"gemm_s\": " << r.gemm_s << ", \"gemm_tiled_s\": " << r.tiled_gemm_s
         << ", \"comm_s\": " << r.comm_s << ", \"unfused_s\": " << r.unfused_s
         << ", \"overlapped_s\": " << r.overlapped_s << ", \"hidden\": " << r.hidden()
         << ", \"overlapped_over_unfused\": " << r.ratio() << "}" << (i + 1 < table.size() ? "," : "") << "\n";
    }
    js << "  ]\n}\n";
    std::ofstream(json) << js.str();
    std::cout << "# hidden = (unfused - overlapped) / comm; JSON in " << json << "\n";
  }
  return 0;
}
