// The CUDA backend next to the raw CUDA libraries, on one GPU, in the same run. Each figure is a
// ratio of two timings taken by turns on dax's stream (cudaEvents, warm-up first, median over the
// samples), or a count:
//   a. per-shard GEMM: dax::matmul on a 1-device mesh (P(): no communication) vs cublasGemmEx on
//      the same shape, dtype and cuBLAS handle (same settings), on buffers of its own;
//   b. x + y, x * y and gelu(x) on 256 MiB float arrays vs a device-to-device cudaMemcpyAsync of
//      the output's bytes, as effective bandwidths (bytes moved: 3 N*4 for the add and the
//      multiply, 2 N*4 for gelu and the copy);
//   c. host overhead per eager op: x + y on 8 floats, 10k calls, host wall clock with one
//      synchronize at the end, next to 10k launches of an empty kernel timed the same way;
//   d. cudaMalloc calls in the steady state (the caching allocator's system allocations across
//      every timed loop, after warm-up): must be 0;
//   e. a 2-layer MLP training step written with dax ops (forward, MSE loss, backward by hand, SGD)
//      vs its five GEMMs alone through cuBLAS; benchmarks/mlp_torch.py times the same step in
//      PyTorch (scripts/gpu-check.sh puts the two side by side);
//   f. reductions: dax::sum of a 256 MiB float array (all of it, along its rows and along its
//      columns) vs the same device-to-device copy, as effective bandwidths (bytes read N*4 for the
//      sum);
//   f2. argmax along the last dimension of float32 logits (a block per line, a warp per line) vs
//      the same copy, next to the one-thread-per-line kernel on the same data;
//   g. reshard (2 or more ranks only): P('x') -> P() and P('x') -> P(None, 'x') on a mesh of
//      every rank vs the group communicator's own all_gatherv / all_to_allv moving the same bytes
//      between plain device buffers, and vs raw MPI_Allgather / MPI_Alltoall on pinned host
//      buffers; host wall clock of the slowest rank, raw time / dax time;
//   h. a group of one member (1 rank only): creating its communicator and an all-reduce of 8
//      floats through it, dax's (device copies) vs NCCL's communicator of the same one member:
//      setup wall time, device memory taken while it lives, host time per call.
// Skips (exit 0) without a GPU. One GPU per rank: under mpirun (DAX_TRANSPORT=mpi when ranks share
// a GPU) every rank measures on a 1-device mesh of its own, and rank 0 prints.
//   ./cuda_bench [--json FILE] [--samples N] [--warmup N] [--iters N] [--sections a,b,...]
//   (attention) causal attention in bfloat16 of GPT-2 small's shape: dot_product_attention fused
//      against the composite, forward and forward + backward, ms and TFLOP/s.
// Sections: gemm, elementwise, overhead, mlp, reduction, attention, argmax, reshard, groups (default: all; reshard
// needs 2+ ranks and is left out at one, groups runs at one rank only).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <dax/dax.hpp>

#if !DAX_CUDA_BACKEND
#error "cuda_bench measures the CUDA backend: compile it with nvcc and link dax::dax_cuda (DAX_HAS_CUDA)"
#endif

namespace {

namespace cu = dax::detail::cuda;
using Clock = std::chrono::steady_clock;

constexpr double gemm_target = 0.97;        // dax / raw cuBLAS, TFLOP/s
constexpr double bandwidth_target = 0.85;   // add / copy, effective GB/s
constexpr double reduction_target = 0.8;    // sum / copy, effective GB/s
constexpr double reshard_target = 0.8;      // raw MPI time / dax time
constexpr double overhead_target_us = 5.0;  // host time per eager op

struct Options {
  std::string json;
  int samples = 15;
  int warmup = 3;
  int iters = 10000;
  std::string sections = "gemm,elementwise,overhead,mlp,reduction,attention,argmax,reshard,groups";
  bool runs(const std::string& section) const { return ("," + sections + ",").find("," + section + ",") != std::string::npos; }
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--json" && has_value) {
      o.json = argv[++i];
    } else if (arg == "--samples" && has_value) {
      o.samples = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--warmup" && has_value) {
      o.warmup = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--iters" && has_value) {
      o.iters = std::max(10, std::atoi(argv[++i]));
    } else if (arg == "--sections" && has_value) {
      o.sections = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--json FILE] [--samples N] [--warmup N] [--iters N] [--sections a,b,...]\n",
                   argv[0]);
      return false;
    }
  }
  return true;
}

/// The launcher's rank before MPI starts (Open MPI, MPICH/PMI, Slurm); 0 when launched alone.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream s;
  s.precision(6);
  s << v;
  return s.str();
}

/// Device memory of the raw side: cudaMalloc'd outside dax's caching allocator.
class DeviceBlock {
 public:
  explicit DeviceBlock(size_t bytes) : bytes_(bytes) { DAX_CUDA_CHECK(cudaMalloc(&ptr_, bytes)); }
  ~DeviceBlock() { (void)cudaFree(ptr_); }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  float* f() const { return static_cast<float*>(ptr_); }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

__global__ void empty_kernel() {}

/// Values in [-1, 1) from a hash of the index: raw buffers hold data, not zeros (power, clocks).
__global__ void fill_kernel(float* p, int64_t n, uint32_t seed) {
  for (int64_t i = cu::grid_first(); i < n; i += cu::grid_step()) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B9u ^ seed;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    p[i] = static_cast<float>(h) * (2.0f / 4294967296.0f) - 1.0f;
  }
}

void fill(const DeviceBlock& b, uint32_t seed) {
  const int64_t n = static_cast<int64_t>(b.bytes() / sizeof(float));
  fill_kernel<<<cu::grid_blocks(n), cu::block_threads, 0, cu::context().stream()>>>(b.f(), n, seed);
  cu::check_launch("fill_kernel");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

using Op = std::function<void()>;

/// Calls every op `warmup` times, then returns how many calls of ops[0] make one sample of about
/// `target_ms` of GPU time (at least 1).
int warm_up(const std::vector<Op>& ops, int warmup, double target_ms) {
  for (int i = 0; i < warmup; ++i)
    for (const Op& op : ops) op();
  const cudaStream_t s = cu::context().stream();
  cudaEvent_t start = nullptr, stop = nullptr;
  DAX_CUDA_CHECK(cudaEventCreate(&start));
  DAX_CUDA_CHECK(cudaEventCreate(&stop));
  DAX_CUDA_CHECK(cudaEventRecord(start, s));
  ops[0]();
  DAX_CUDA_CHECK(cudaEventRecord(stop, s));
  DAX_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  DAX_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  DAX_CUDA_CHECK(cudaEventDestroy(start));
  DAX_CUDA_CHECK(cudaEventDestroy(stop));
  return static_cast<int>(std::clamp(std::ceil(target_ms / std::max(static_cast<double>(ms), 1e-4)), 1.0, 1000.0));
}

/// ms per call of each op in each of `samples` rounds; in each round every op gets one sample of
/// `reps` back-to-back calls between two events on the stream, the ops in turn, their order
/// reversed every other round (so neither side always runs right after the other). Nothing waits
/// inside the loop, so the host runs ahead and the events see GPU time.
std::vector<std::vector<double>> samples_by_turns(const std::vector<Op>& ops, int reps, int samples) {
  const cudaStream_t s = cu::context().stream();
  const size_t k = ops.size();
  std::vector<cudaEvent_t> events(2 * k * samples, nullptr);
  for (cudaEvent_t& e : events) DAX_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < samples; ++i)
    for (size_t turn = 0; turn < k; ++turn) {
      const size_t j = i % 2 == 0 ? turn : k - 1 - turn;
      const size_t e = 2 * (i * k + j);
      DAX_CUDA_CHECK(cudaEventRecord(events[e], s));
      for (int r = 0; r < reps; ++r) ops[j]();
      DAX_CUDA_CHECK(cudaEventRecord(events[e + 1], s));
    }
  DAX_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<std::vector<double>> ms(k);
  for (int i = 0; i < samples; ++i)
    for (size_t j = 0; j < k; ++j) {
      const size_t e = 2 * (i * k + j);
      float t = 0;
      DAX_CUDA_CHECK(cudaEventElapsedTime(&t, events[e], events[e + 1]));
      ms[j].push_back(static_cast<double>(t) / reps);
    }
  for (cudaEvent_t e : events) DAX_CUDA_CHECK(cudaEventDestroy(e));
  return ms;
}

/// ms per call of each op, the median of samples_by_turns.
std::vector<double> time_by_turns(const std::vector<Op>& ops, int reps, int samples) {
  std::vector<double> out;
  for (auto& v : samples_by_turns(ops, reps, samples)) out.push_back(median(std::move(v)));
  return out;
}

/// The median over rounds of b's time over a's in the same round: a drifting clock or a busy
/// neighbour moves both sides of a round alike, so the pairs cancel what the medians alone keep.
double paired_ratio(const std::vector<std::vector<double>>& ms, size_t a, size_t b) {
  std::vector<double> r;
  for (size_t i = 0; i < ms[a].size(); ++i) r.push_back(ms[b][i] / ms[a][i]);
  return median(std::move(r));
}

/// Host wall-clock ms of `op` with the stream synchronized before and after, median over samples
/// (the timing PyTorch's side uses: torch.cuda.synchronize around each step).
double synchronized_wall_ms(const Op& op, int samples) {
  std::vector<double> ms;
  for (int i = 0; i < samples; ++i) {
    cu::synchronize();
    const auto t0 = Clock::now();
    op();
    cu::synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return median(std::move(ms));
}

/// Largest |got - want| over the largest |want|, both device arrays of `count` elements.
template <class T>
double relative_difference(const T* got, const T* want, int64_t count) {
  std::vector<T> g(count), w(count);
  cu::copy_to_host(g.data(), got, count * sizeof(T));
  cu::copy_to_host(w.data(), want, count * sizeof(T));
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double gi = static_cast<float>(g[i]), wi = static_cast<float>(w[i]);
    const double d = std::abs(gi - wi);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::abs(wi));
  }
  return scale > 0 ? diff / scale : diff;
}

/// cudaMalloc calls made by dax's caching allocator so far.
int64_t system_allocations() { return cu::device_allocator()->stats().system_allocations; }

/// Row-major C(m, n) = op(A) op(B) through cublasGemmEx in T storage (float accumulation for the
/// 16-bit types, as dax), on the dax handle: the column-major C^T = op(B)^T op(A)^T. `ta`: A is
/// stored (k, m) and used transposed; `tb`: B is stored (n, k) and used transposed.
template <class T = float>
void raw_gemm(const T* a, bool ta, const T* b, bool tb, T* c, int64_t m, int64_t n, int64_t k,
              cublasComputeType_t compute) {
  using Scalar = typename cu::BlasType<T>::Scalar;
  constexpr cudaDataType_t type = cu::BlasType<T>::data;
  const Scalar alpha = 1, beta = 0;
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  DAX_CUBLAS_CHECK(cublasGemmEx(cu::context().blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                in, im, ik, &alpha, b, type, tb ? ik : in, a, type, ta ? im : ik, &beta, c, type, in,
                                compute, CUBLAS_GEMM_DEFAULT));
}

/// What the raw side runs with at `precision`: the same compute type and handle math mode that
/// dax's GEMM (backend/cuda/gemm.cuh) sets.
template <class T = float>
cublasComputeType_t raw_settings(dax::MatmulPrecision precision) {
  DAX_CUBLAS_CHECK(cublasSetMathMode(cu::context().blas(),
                                     cu::DeviceContext::math_mode(precision == dax::MatmulPrecision::highest)));
  return cu::compute_type<T>(precision);
}

template <class T>
const char* gemm_label(dax::MatmulPrecision p) {
  if constexpr (std::is_same_v<T, dax::bfloat16>) return "bf16";
  if constexpr (std::is_same_v<T, double>) return "f64";
  return p == dax::MatmulPrecision::highest ? "f32" : "f32/tf32";
}

/// The GEMM shapes (m, n, k): squares, then a transformer layer's with 8192 tokens, model width
/// 1024 and MLP width 4096: the up projection, the down projection and a weight gradient (k = tokens).
struct GemmShape {
  int64_t m, n, k;
};
constexpr GemmShape gemm_shapes[] = {{1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096}, {8192, 8192, 8192},
                                     {8192, 4096, 1024}, {8192, 1024, 4096}, {1024, 4096, 8192}};

struct Report {
  bool print = false;
  std::vector<std::string> json_sections;
  std::vector<std::pair<std::string, int64_t>> allocations;  // per steady-state loop
  int targets = 0, met = 0;

  [[gnu::format(printf, 2, 3)]] void line(const char* fmt, ...) {
    if (!print) return;
    va_list args;
    va_start(args, fmt);
    std::vprintf(fmt, args);
    va_end(args);
    std::fflush(stdout);
  }
  const char* judge(bool ok) {
    ++targets;
    met += ok;
    return ok ? "ok" : "BELOW TARGET";
  }
};

/// Counts the cudaMalloc calls made while it is alive into the report, under `name`.
class SteadyState {
 public:
  SteadyState(Report& r, std::string name) : report_(r), name_(std::move(name)), before_(system_allocations()) {}
  ~SteadyState() { report_.allocations.emplace_back(name_, system_allocations() - before_); }

 private:
  Report& report_;
  std::string name_;
  int64_t before_;
};

// ---- a. per-shard GEMM ----

/// One GEMM row per size at one dtype and precision, appended to `rows` (JSON).
template <class T>
void gemm_rows(const dax::NamedSharding& rep, dax::MatmulPrecision precision, const Options& o, Report& r,
               std::string& rows) {
  dax::set_matmul_precision(precision);
  for (const GemmShape shape : gemm_shapes) {
    const int64_t m = shape.m, n = shape.n, k = shape.k;
    const std::string s = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    const auto a = dax::random::normal<T>(dax::random::key(1), {m, k}, rep);
    const auto b = dax::random::normal<T>(dax::random::key(2), {k, n}, rep);
    DeviceBlock ra(m * k * sizeof(T)), rb(k * n * sizeof(T)), rc(m * n * sizeof(T));
    cu::copy_device(ra.get(), a.local_data().data(), ra.bytes());
    cu::copy_device(rb.get(), b.local_data().data(), rb.bytes());
    T* const raw_a = static_cast<T*>(ra.get());
    T* const raw_b = static_cast<T*>(rb.get());
    T* const raw_c = static_cast<T*>(rc.get());
    const cublasComputeType_t compute = raw_settings<T>(precision);
    const Op ours = [&] { (void)dax::matmul(a, b); };
    const Op raw = [&] { raw_gemm(raw_a, false, raw_b, false, raw_c, m, n, k, compute); };
    // The same product on both sides, or the ratio means nothing.
    const auto c = dax::matmul(a, b);
    raw();
    const double diff = relative_difference(c.local_data().data(), raw_c, m * n);
    const int reps = warm_up({ours, raw}, o.warmup, 2.0);
    std::vector<std::vector<double>> samples;
    {
      SteadyState steady(r, std::string("gemm ") + gemm_label<T>(precision) + " " + s);
      samples = samples_by_turns({ours, raw}, reps, o.samples);
    }
    const std::vector<double> ms{median(samples[0]), median(samples[1])};
    const double flops = 2.0 * m * n * k;
    const double dax_tf = flops / (ms[0] * 1e-3) / 1e12, raw_tf = flops / (ms[1] * 1e-3) / 1e12;
    const double ratio = paired_ratio(samples, 0, 1);  // raw time / dax time, round by round
    const bool same = diff <= 1e-2;
    r.line("%-9s %6lld %6lld %6lld %10.4f %10.4f %10.2f %10.2f %8.3f %10.2e  %s\n", gemm_label<T>(precision),
           static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), ms[0], ms[1], dax_tf,
           raw_tf, ratio, diff, same ? r.judge(ratio >= gemm_target) : "RESULTS DIFFER");
    if (!same) throw dax::Error("GEMM " + s + ": dax and cuBLAS results differ (relative " +
                                std::to_string(diff) + ")");
    rows += std::string(rows.empty() ? "" : ", ") + "{\"dtype\": " + json_string(dax::to_string(dax::dtype_v<T>)) +
            ", \"precision\": " + json_string(dax::to_string(precision)) + ", \"m\": " + std::to_string(m) +
            ", \"n\": " + std::to_string(n) + ", \"k\": " + std::to_string(k) + ", \"dax_ms\": " + json_number(ms[0]) +
            ", \"raw_ms\": " + json_number(ms[1]) + ", \"dax_tflops\": " + json_number(dax_tf) +
            ", \"raw_tflops\": " + json_number(raw_tf) + ", \"ratio\": " + json_number(ratio) +
            ", \"max_rel_diff\": " + json_number(diff) + ", \"target\": " + json_number(gemm_target) +
            ", \"meets_target\": " + (ratio >= gemm_target ? "true" : "false") + "}";
  }
}

void bench_gemm(const dax::Mesh& mesh, const Options& o, Report& r) {
  const dax::NamedSharding rep(mesh, dax::P());
  r.line("#\n# a. GEMM C(m,n) = A(m,k) B(k,n): dax::matmul on a 1-device mesh, P() (no communication) vs\n"
         "#    cublasGemmEx, same handle and settings, own buffers; bf16 accumulates in f32 on both sides;\n"
         "#    squares, then 8192 tokens through a 1024 -> 4096 -> 1024 MLP (up, down, a weight gradient);\n"
         "#    median of %d rounds (cudaEvent), dax/raw the median of each round's raw time over dax's\n"
         "# dtype        m      n      k    dax(ms)    raw(ms)  dax(TF/s)  raw(TF/s)  dax/raw  max|diff|  target %.2f\n",
         o.samples, gemm_target);
  std::string rows;
  gemm_rows<float>(rep, dax::MatmulPrecision::highest, o, r, rows);
  gemm_rows<float>(rep, dax::MatmulPrecision::high, o, r, rows);
  gemm_rows<dax::bfloat16>(rep, dax::MatmulPrecision::highest, o, r, rows);
  gemm_rows<double>(rep, dax::MatmulPrecision::highest, o, r, rows);
  dax::set_matmul_precision(dax::MatmulPrecision::highest);
  r.json_sections.push_back("\"gemm\": [" + rows + "]");
}

// ---- b. elementwise bandwidth ----

void bench_elementwise(const dax::Mesh& mesh, const Options& o, Report& r) {
  const dax::NamedSharding rep(mesh, dax::P());
  const int64_t n = (int64_t{256} << 20) / sizeof(float);  // 256 MiB per array
  const auto x = dax::random::normal<float>(dax::random::key(3), {n}, rep);
  const auto y = dax::random::normal<float>(dax::random::key(4), {n}, rep);
  DeviceBlock src(n * sizeof(float)), dst(n * sizeof(float));
  fill(src, 5);
  const cudaStream_t stream = cu::context().stream();
  const Op raw = [&] {
    DAX_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), dst.bytes(), cudaMemcpyDeviceToDevice, stream));
  };
  {  // the kernels compute what they should (a prefix is enough to catch a wrong launch)
    const int64_t head = 1 << 16;
    std::vector<float> hx(head), hy(head), hs(head), hp(head), hg(head);
    cu::copy_to_host(hx.data(), x.local_data().data(), head * sizeof(float));
    cu::copy_to_host(hy.data(), y.local_data().data(), head * sizeof(float));
    cu::copy_to_host(hs.data(), (x + y).local_data().data(), head * sizeof(float));
    cu::copy_to_host(hp.data(), (x * y).local_data().data(), head * sizeof(float));
    cu::copy_to_host(hg.data(), dax::gelu(x).local_data().data(), head * sizeof(float));
    for (int64_t i = 0; i < head; ++i) {
      const double g = 0.5 * hx[i] * (1 + std::tanh(0.7978845608028654 * (hx[i] + 0.044715 * hx[i] * hx[i] * hx[i])));
      if (hs[i] != hx[i] + hy[i] || hp[i] != hx[i] * hy[i] || std::abs(hg[i] - g) > 1e-5 * (1 + std::abs(g)))
        throw dax::Error("elementwise: element " + std::to_string(i) + " is wrong");
    }
  }
  struct Case {
    const char* name;
    int arrays;  // arrays of N floats read or written
    Op op;
  };
  const Case cases[] = {{"add", 3, [&] { (void)(x + y); }},
                        {"multiply", 3, [&] { (void)(x * y); }},
                        {"gelu", 2, [&] { (void)dax::gelu(x); }}};
  const double bytes = static_cast<double>(n) * sizeof(float);
  r.line("#\n# b. elementwise ops (float32, 256 MiB per array, P() on 1 device) vs cudaMemcpyAsync D2D of the\n"
         "#    output's 256 MiB; GB/s counting bytes moved (add, multiply 3 N*4; gelu 2 N*4; copy 2 N*4);\n"
         "#    median of %d samples, each op timed by turns with the copy\n"
         "# op           ms      GB/s  copy GB/s  ratio  target %.2f\n",
         o.samples, bandwidth_target);
  std::string rows;
  double add_ratio = 0;
  for (const Case& c : cases) {
    const int reps = warm_up({c.op, raw}, o.warmup, 5.0);
    std::vector<double> ms;
    {
      SteadyState steady(r, std::string(c.name) + " 256 MiB");
      ms = time_by_turns({c.op, raw}, reps, o.samples);
    }
    const double op_gbs = c.arrays * bytes / (ms[0] * 1e-3) / 1e9, copy_gbs = 2 * bytes / (ms[1] * 1e-3) / 1e9;
    const double ratio = op_gbs / copy_gbs;
    if (std::string(c.name) == "add") add_ratio = ratio;
    r.line("%-9s %8.4f %9.1f %10.1f %6.3f  %s\n", c.name, ms[0], op_gbs, copy_gbs, ratio,
           r.judge(ratio >= bandwidth_target));
    rows += std::string(rows.empty() ? "" : ", ") + json_string(c.name) + ": {\"ms\": " + json_number(ms[0]) +
            ", \"gbps\": " + json_number(op_gbs) + ", \"copy_ms\": " + json_number(ms[1]) +
            ", \"copy_gbps\": " + json_number(copy_gbs) + ", \"ratio\": " + json_number(ratio) +
            ", \"meets_target\": " + (ratio >= bandwidth_target ? "true" : "false") + "}";
  }
  // "ratio" stays the add's, as the results file has always read it.
  r.json_sections.push_back("\"elementwise\": {\"bytes_per_array\": " + json_number(bytes) +
                            ", \"ratio\": " + json_number(add_ratio) + ", \"target\": " +
                            json_number(bandwidth_target) + ", \"ops\": {" + rows + "}}");
}

// ---- c. host overhead per eager op ----

struct HostTiming {
  double loop_us;   // per call, host loop alone
  double total_us;  // per call, with the final synchronize
};

HostTiming host_loop(const Op& op, int iters) {
  for (int i = 0; i < std::max(1, iters / 10); ++i) op();
  cu::synchronize();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) op();
  const auto t1 = Clock::now();
  cu::synchronize();
  const auto t2 = Clock::now();
  return {std::chrono::duration<double, std::micro>(t1 - t0).count() / iters,
          std::chrono::duration<double, std::micro>(t2 - t0).count() / iters};
}

void bench_overhead(const dax::Mesh& mesh, const Options& o, Report& r) {
  const dax::NamedSharding rep(mesh, dax::P());
  const auto x = dax::arange<float>({8}, rep), y = dax::ones<float>({8}, rep);
  const cudaStream_t stream = cu::context().stream();
  HostTiming ours{}, launch{};
  (void)(x + y);  // the first add of this size takes its output block from the system; later ones reuse it
  cu::synchronize();
  {
    SteadyState steady(r, "add 8 floats");
    ours = host_loop([&] { (void)(x + y); }, o.iters);
  }
  launch = host_loop([&] { empty_kernel<<<1, 1, 0, stream>>>(); }, o.iters);
  cu::check_launch("empty_kernel");
  r.line("#\n# c. host overhead per eager op: x + y on 8 floats, %d calls, no synchronize inside the loop, one at the\n"
         "#    end; host wall clock per call, next to an empty kernel launched the same way\n"
         "# op              loop(us)    w/ sync(us)\n"
         "dax x + y        %9.3f %14.3f  (target <= %.1f us) %s\n"
         "empty kernel     %9.3f %14.3f\n"
         "dax over a bare launch: %+.3f us per op\n",
         o.iters, ours.loop_us, ours.total_us, overhead_target_us, r.judge(ours.total_us <= overhead_target_us),
         launch.loop_us, launch.total_us, ours.total_us - launch.total_us);
  r.json_sections.push_back("\"host_overhead\": {\"iters\": " + std::to_string(o.iters) +
                            ", \"dax_add_us\": " + json_number(ours.total_us) +
                            ", \"dax_add_loop_us\": " + json_number(ours.loop_us) +
                            ", \"empty_kernel_us\": " + json_number(launch.total_us) +
                            ", \"empty_kernel_loop_us\": " + json_number(launch.loop_us) +
                            ", \"target_us\": " + json_number(overhead_target_us) +
                            ", \"meets_target\": " + (ours.total_us <= overhead_target_us ? "true" : "false") + "}");
}

// ---- attention: fused (FlashAttention on tensor cores) against the composite ----

/// Causal attention of GPT-2 small's shape in bfloat16, (8, 1024, 12, 64): dot_product_attention
/// fused (one kernel each way, no scores in memory) against the composite (two batched cuBLAS
/// products around the fused causal softmax), the forward alone and forward + backward (a
/// value_and_grad of sum(o * w)); TFLOP/s counting the products' multiply-adds (the backward 2.5
/// times the forward's).
void bench_attention(const dax::Mesh& mesh, const Options& o, Report& r) {
  using T = dax::bfloat16;
  const dax::NamedSharding rep(mesh, dax::P());
  const dax::Shape shape{8, 1024, 12, 64};
  const auto q = dax::random::normal<T>(dax::random::key(1), shape, rep);
  const auto k = dax::random::normal<T>(dax::random::key(2), shape, rep);
  const auto v = dax::random::normal<T>(dax::random::key(3), shape, rep);
  const auto w = dax::random::normal<T>(dax::random::key(4), shape, rep);
  const auto attend = [&](dax::AttentionImplementation how) {
    return [&, how](const dax::DistArray<T>& qq, const dax::DistArray<T>& kk, const dax::DistArray<T>& vv) {
      return dax::dot_product_attention(qq, kk, vv, {.is_causal = true, .implementation = how});
    };
  };
  const auto fused = attend(dax::AttentionImplementation::fused), composite = attend(dax::AttentionImplementation::composite);
  const auto step = [&](const auto& f) {
    return [&, f] {
      (void)dax::value_and_grad([&](const std::vector<dax::DistArray<T>>& p) { return dax::sum(f(p[0], p[1], p[2]) * w); })(
          std::vector<dax::DistArray<T>>{q, k, v});
    };
  };
  const Op fused_forward = [&] { (void)fused(q, k, v); }, composite_forward = [&] { (void)composite(q, k, v); };
  const Op fused_step = step(fused), composite_step = step(composite);
  const auto a = fused(q, k, v), b = composite(q, k, v);
  const double diff = relative_difference(a.local_data().data(), b.local_data().data(), a.size());
  const int reps = warm_up({composite_step, fused_step, fused_forward, composite_forward}, o.warmup, 20.0);
  std::vector<double> ms;
  {
    SteadyState steady(r, "attention");
    ms = time_by_turns({fused_forward, composite_forward, fused_step, composite_step}, reps, o.samples);
  }
  dax::detail::AttentionShape geo;
  geo.batch = shape[0], geo.q_len = geo.k_len = shape[1], geo.heads = shape[2], geo.head_dim = shape[3];
  geo.causal = true;
  const double forward_tf = geo.forward_flops() / 1e12, step_tf = 3.5 * forward_tf;
  r.line("#\n# g. causal attention, bfloat16 (8, 1024, 12, 64): fused (tensor cores) vs composite (cuBLAS + fused\n"
         "#    softmax); forward, and value_and_grad of sum(o * w); median of %d samples; fused vs composite\n"
         "#    outputs differ by %.2e of the largest\n"
         "# pass          fused ms  TFLOP/s  composite ms  TFLOP/s  composite / fused\n",
         o.samples, diff);
  r.line("forward       %8.3f %8.1f %13.3f %8.1f %10.3f\n", ms[0], forward_tf / (ms[0] * 1e-3), ms[1],
         forward_tf / (ms[1] * 1e-3), ms[1] / ms[0]);
  r.line("fwd + bwd     %8.3f %8.1f %13.3f %8.1f %10.3f\n", ms[2], step_tf / (ms[2] * 1e-3), ms[3],
         step_tf / (ms[3] * 1e-3), ms[3] / ms[2]);
  r.json_sections.push_back("\"attention\": {\"shape\": [8, 1024, 12, 64], \"dtype\": \"bfloat16\", \"causal\": true"
                            ", \"fused_forward_ms\": " + json_number(ms[0]) + ", \"composite_forward_ms\": " +
                            json_number(ms[1]) + ", \"fused_step_ms\": " + json_number(ms[2]) +
                            ", \"composite_step_ms\": " + json_number(ms[3]) + ", \"forward_ratio\": " +
                            json_number(ms[1] / ms[0]) + ", \"step_ratio\": " + json_number(ms[3] / ms[2]) +
                            ", \"max_rel_diff\": " + json_number(diff) + "}");
}

// ---- f. reductions ----

void bench_reduction(const dax::Mesh& mesh, const Options& o, Report& r) {
  const dax::NamedSharding rep(mesh, dax::P());
  const int64_t rows = 16384, cols = (int64_t{256} << 20) / sizeof(float) / rows;  // 256 MiB
  const auto x = dax::random::normal<float>(dax::random::key(7), {rows, cols}, rep);
  DeviceBlock src(rows * cols * sizeof(float)), dst(rows * cols * sizeof(float));
  fill(src, 9);
  const cudaStream_t stream = cu::context().stream();
  const Op all = [&] { (void)dax::sum(x); };
  const Op by_row = [&] { (void)dax::sum(x, {1}); };
  const Op by_column = [&] { (void)dax::sum(x, {0}); };
  const Op raw = [&] {
    DAX_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), dst.bytes(), cudaMemcpyDeviceToDevice, stream));
  };
  {  // the sums are right: rows and columns against double sums on the host, and the total
    const auto host = x.to_host();
    const auto row_sums = dax::sum(x, {1}).to_host(), column_sums = dax::sum(x, {0}).to_host();
    const float total = dax::sum(x).to_host()[0];
    std::vector<double> column_want(cols, 0.0), column_magnitude(cols, 0.0);
    double total_want = 0, total_magnitude = 0;
    for (int64_t i = 0; i < rows; ++i) {
      double want = 0, magnitude = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const double v = host[i * cols + j];
        want += v, magnitude += std::abs(v);
        column_want[j] += v, column_magnitude[j] += std::abs(v);
      }
      total_want += want, total_magnitude += magnitude;
      if (std::abs(row_sums[i] - want) > 1e-5 * magnitude) throw dax::Error("sum along rows: row " + std::to_string(i) + " is wrong");
    }
    for (int64_t j = 0; j < cols; ++j)
      if (std::abs(column_sums[j] - column_want[j]) > 1e-5 * column_magnitude[j])
        throw dax::Error("sum along columns: column " + std::to_string(j) + " is wrong");
    if (std::abs(total - total_want) > 1e-5 * total_magnitude) throw dax::Error("sum of everything is wrong");
  }
  const int reps = warm_up({all, by_row, by_column, raw}, o.warmup, 5.0);
  std::vector<double> ms;
  {
    SteadyState steady(r, "sum 256 MiB");
    ms = time_by_turns({all, by_row, by_column, raw}, reps, o.samples);
  }
  const double bytes = static_cast<double>(rows * cols) * sizeof(float);
  const double copy_gbs = 2 * bytes / (ms[3] * 1e-3) / 1e9;
  const double gbs[3] = {bytes / (ms[0] * 1e-3) / 1e9, bytes / (ms[1] * 1e-3) / 1e9, bytes / (ms[2] * 1e-3) / 1e9};
  r.line("#\n# f. reductions of a (%lld, %lld) float32 array (256 MiB, P() on 1 device) vs cudaMemcpyAsync D2D of\n"
         "#    256 MiB; GB/s counting bytes moved (sum reads N*4, copy 2 N*4); median of %d samples\n"
         "# op              ms      GB/s  ratio to copy  target %.2f\n",
         static_cast<long long>(rows), static_cast<long long>(cols), o.samples, reduction_target);
  const char* names[3] = {"sum(x)", "sum(x, {1})", "sum(x, {0})"};
  for (int i = 0; i < 3; ++i)
    r.line("%-11s %8.4f %9.1f %8.3f       %s\n", names[i], ms[i], gbs[i], gbs[i] / copy_gbs,
           r.judge(gbs[i] / copy_gbs >= reduction_target));
  r.line("copy        %8.4f %9.1f\n", ms[3], copy_gbs);
  r.json_sections.push_back("\"reduction\": {\"rows\": " + std::to_string(rows) + ", \"cols\": " + std::to_string(cols) +
                            ", \"sum_all_ms\": " + json_number(ms[0]) + ", \"sum_rows_ms\": " + json_number(ms[1]) +
                            ", \"sum_columns_ms\": " + json_number(ms[2]) + ", \"copy_ms\": " + json_number(ms[3]) +
                            ", \"sum_all_gbps\": " + json_number(gbs[0]) + ", \"sum_rows_gbps\": " + json_number(gbs[1]) +
                            ", \"sum_columns_gbps\": " + json_number(gbs[2]) + ", \"copy_gbps\": " + json_number(copy_gbs) +
                            ", \"sum_all_ratio\": " + json_number(gbs[0] / copy_gbs) +
                            ", \"sum_rows_ratio\": " + json_number(gbs[1] / copy_gbs) +
                            ", \"sum_columns_ratio\": " + json_number(gbs[2] / copy_gbs) +
                            ", \"target\": " + json_number(reduction_target) + "}");
}

/// argmax along the last dimension of (lines, len) float32 logits against the copy's bandwidth
/// (argmax reads N*4 bytes), next to the earlier kernel (one thread per line, which every layout
/// other than contiguous lines still takes) launched on the same data.
void bench_argmax(const dax::Mesh& mesh, const Options& o, Report& r, int64_t lines, int64_t len, std::string& rows) {
  const dax::NamedSharding rep(mesh, dax::P());
  const auto x = dax::random::normal<float>(dax::random::key(11), {lines, len}, rep);
  const int64_t n = lines * len;
  DeviceBlock src(n * sizeof(float)), dst(n * sizeof(float)), values(lines * sizeof(float)),
      indices(lines * sizeof(int64_t));
  fill(src, 5);
  const cudaStream_t stream = cu::context().stream();
  {  // the answer is the host's: the first largest element of each line
    const auto host = x.to_host();
    const auto got = dax::argmax(x, 1).to_host();
    for (int64_t i = 0; i < lines; ++i) {
      const auto* line = host.data() + i * len;
      if (got[i] != std::max_element(line, line + len) - line)
        throw dax::Error("argmax: line " + std::to_string(i) + " is wrong");
    }
  }
  const float* in = x.local_data().data();
  const Op ours = [&] { (void)dax::argmax(x, 1); };
  const Op per_thread = [&] {
    cu::arg_reduce_kernel<<<cu::grid_blocks(lines), cu::block_threads, 0, stream>>>(
        in, lines, len, int64_t{1}, dax::detail::fn::Greater{}, values.f(), static_cast<int64_t*>(indices.get()));
  };
  const Op raw = [&] {
    DAX_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), dst.bytes(), cudaMemcpyDeviceToDevice, stream));
  };
  const int reps = warm_up({ours, per_thread, raw}, o.warmup, 5.0);
  std::vector<double> ms;
  {
    SteadyState steady(r, "argmax " + std::to_string(lines) + "x" + std::to_string(len));
    ms = time_by_turns({ours, per_thread, raw}, reps, o.samples);
  }
  const double bytes = static_cast<double>(n) * sizeof(float);
  const double ours_gbs = bytes / (ms[0] * 1e-3) / 1e9, thread_gbs = bytes / (ms[1] * 1e-3) / 1e9;
  const double copy_gbs = 2 * bytes / (ms[2] * 1e-3) / 1e9;
  r.line("argmax(x, 1) of (%lld, %lld): %8.4f ms %9.1f GB/s, %6.3f of copy  %s; one thread per line %8.4f ms "
         "(%.3f of copy)\n",
         static_cast<long long>(lines), static_cast<long long>(len), ms[0], ours_gbs, ours_gbs / copy_gbs,
         r.judge(ours_gbs / copy_gbs >= reduction_target), ms[1], thread_gbs / copy_gbs);
  rows += std::string(rows.empty() ? "" : ", ") + "{\"lines\": " + std::to_string(lines) + ", \"len\": " +
          std::to_string(len) + ", \"ms\": " + json_number(ms[0]) + ", \"thread_per_line_ms\": " +
          json_number(ms[1]) + ", \"copy_ms\": " + json_number(ms[2]) + ", \"ratio\": " +
          json_number(ours_gbs / copy_gbs) + ", \"thread_per_line_ratio\": " + json_number(thread_gbs / copy_gbs) +
          ", \"target\": " + json_number(reduction_target) + "}";
}

void bench_argmax(const dax::Mesh& mesh, const Options& o, Report& r) {
  r.line("#\n# f2. argmax along the last dimension (float32 logits) vs cudaMemcpyAsync D2D of the same bytes;\n"
         "#     GB/s counting bytes moved (argmax reads N*4, copy 2 N*4); median of %d samples\n",
         o.samples);
  std::string rows;
  bench_argmax(mesh, o, r, 4096, 32768, rows);   // vocabulary-long lines: a block per line
  bench_argmax(mesh, o, r, 65536, 1024, rows);   // short lines: a warp per line
  r.json_sections.push_back("\"argmax\": [" + rows + "]");
}

// ---- g. reshard against the transport's own call ----

/// Host wall-clock ms of the slowest rank for `op` (device synchronized and ranks lined up before,
/// device synchronized after), median over samples.
double slowest_rank_ms(const Op& op, int samples) {
  std::vector<double> ms;
  for (int i = 0; i < samples; ++i) {
    cu::synchronize();
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    op();
    cu::synchronize();
    double mine = std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    ms.push_back(slowest);
  }
  return median(std::move(ms));
}

void bench_reshard(dax::Runtime& rt, const Options& o, Report& r) {
  const int n = rt.size();
  const dax::Mesh mesh({n}, {"x"});
  const int64_t rows = 1024 * n, cols = 4096;  // 16 MiB per rank's piece, float32
  const auto x = dax::random::normal<float>(dax::random::key(8), {rows, cols}, dax::NamedSharding(mesh, dax::P("x")));
  const dax::NamedSharding to_all(mesh, dax::P()), to_cols(mesh, dax::P(dax::none, "x"));
  auto& comm = rt.group(mesh, {0});
  const int64_t piece = rows * cols / n;  // elements per rank
  DeviceBlock send(piece * sizeof(float)), recv(piece * n * sizeof(float));
  fill(send, 11);
  std::vector<int64_t> counts(n, piece), displs(n), block(n, piece / n), block_displs(n);
  for (int j = 0; j < n; ++j) displs[j] = j * piece, block_displs[j] = j * (piece / n);
  const Op gather = [&] { (void)dax::reshard(x, to_all); };
  const Op raw_gather = [&] { comm.all_gatherv(send.get(), recv.get(), counts, displs, dax::DType::float32); };
  const Op to_columns = [&] { (void)dax::reshard(x, to_cols); };
  const Op raw_all_to_all = [&] {
    comm.all_to_allv(send.get(), block, block_displs, recv.get(), block, block_displs, dax::DType::float32);
  };
  // Raw MPI on pinned host buffers of the same sizes: what the transport's own staging calls,
  // without the copies to and from the GPU (the floor for ranks that share a GPU over MPI).
  float *host_send = nullptr, *host_recv = nullptr;
  DAX_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_send), piece * sizeof(float)));
  DAX_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_recv), piece * n * sizeof(float)));
  std::fill(host_send, host_send + piece, 1.0f);
  const int piece32 = static_cast<int>(piece), block32 = static_cast<int>(piece / n);
  const Op mpi_gather = [&] {
    MPI_Allgather(host_send, piece32, MPI_FLOAT, host_recv, piece32, MPI_FLOAT, MPI_COMM_WORLD);
  };
  const Op mpi_all_to_all = [&] {
    MPI_Alltoall(host_send, block32, MPI_FLOAT, host_recv, block32, MPI_FLOAT, MPI_COMM_WORLD);
  };
  if (dax::reshard(x, to_all).to_host() != x.to_host()) throw dax::Error("reshard P('x') -> P(): values differ");
  for (const Op* op : {&gather, &raw_gather, &to_columns, &raw_all_to_all, &mpi_gather, &mpi_all_to_all})
    for (int i = 0; i < o.warmup; ++i) (*op)();
  double ms[6];
  {
    SteadyState steady(r, "reshard");
    ms[0] = slowest_rank_ms(gather, o.samples);
    ms[1] = slowest_rank_ms(raw_gather, o.samples);
    ms[2] = slowest_rank_ms(to_columns, o.samples);
    ms[3] = slowest_rank_ms(raw_all_to_all, o.samples);
    ms[4] = slowest_rank_ms(mpi_gather, o.samples);
    ms[5] = slowest_rank_ms(mpi_all_to_all, o.samples);
  }
  DAX_CUDA_CHECK(cudaFreeHost(host_send));
  DAX_CUDA_CHECK(cudaFreeHost(host_recv));
  const char* transport = std::getenv("DAX_TRANSPORT") ? std::getenv("DAX_TRANSPORT") : "nccl";
  r.line("#\n# g. reshard of a (%lld, %lld) float32 array on %d ranks (DAX_TRANSPORT=%s) vs the group communicator's own\n"
         "#    call on plain device buffers moving the same bytes, and vs raw MPI (MPI_Allgather / MPI_Alltoall) on\n"
         "#    pinned host buffers of the same sizes; host wall clock of the slowest rank, median of %d\n"
         "# transition             dax(ms)    raw(ms)  raw/dax    mpi(ms)  mpi/dax  target %.2f\n",
         static_cast<long long>(rows), static_cast<long long>(cols), n, transport, o.samples, reshard_target);
  r.line("P('x') -> P()         %9.3f %10.3f %8.3f %10.3f %8.3f  %s\n", ms[0], ms[1], ms[1] / ms[0], ms[4],
         ms[4] / ms[0], r.judge(ms[4] / ms[0] >= reshard_target));
  r.line("P('x') -> P(None,'x') %9.3f %10.3f %8.3f %10.3f %8.3f  %s\n", ms[2], ms[3], ms[3] / ms[2], ms[5],
         ms[5] / ms[2], r.judge(ms[5] / ms[2] >= reshard_target));
  r.json_sections.push_back(
      "\"reshard\": {\"ranks\": " + std::to_string(n) + ", \"transport\": " + json_string(transport) +
      ", \"rows\": " + std::to_string(rows) + ", \"cols\": " + std::to_string(cols) +
      ", \"all_gather_dax_ms\": " + json_number(ms[0]) + ", \"all_gather_raw_ms\": " + json_number(ms[1]) +
      ", \"all_gather_ratio\": " + json_number(ms[1] / ms[0]) + ", \"all_gather_mpi_ms\": " + json_number(ms[4]) +
      ", \"all_gather_mpi_ratio\": " + json_number(ms[4] / ms[0]) + ", \"all_to_all_dax_ms\": " + json_number(ms[2]) +
      ", \"all_to_all_raw_ms\": " + json_number(ms[3]) + ", \"all_to_all_ratio\": " + json_number(ms[3] / ms[2]) +
      ", \"all_to_all_mpi_ms\": " + json_number(ms[5]) + ", \"all_to_all_mpi_ratio\": " + json_number(ms[5] / ms[2]) +
      ", \"target\": " + json_number(reshard_target) + "}");
}

// ---- e. MLP training step ----

struct Mlp {
  int64_t batch = 4096, din = 1024, hidden = 4096;
  float lr = 0.01f;
};

struct MlpState {
  dax::DistArray<float> x, y, w1, w2, zero;
};

/// The values one step's GEMMs read and wrote, for checking the raw side against them.
struct MlpTrace {
  dax::DistArray<float> x, w1, a, w2, dy, dz;  // GEMM inputs
  dax::DistArray<float> z, out, gw2, da, gw1;  // GEMM outputs
};

/// One SGD step of y ~ relu(x w1) w2 with the MSE loss, the backward pass written by hand (as in
/// examples/data_parallel.cpp). Five GEMMs: two forward, three backward.
void mlp_step(const Mlp& p, MlpState& s, std::optional<MlpTrace>* trace = nullptr) {
  const auto z = dax::matmul(s.x, s.w1);  // (B, H)
  const auto a = dax::relu(z);
  const auto out = dax::matmul(a, s.w2);  // (B, D)
  const auto err = out - s.y;
  const auto loss = dax::mean(dax::square(err));
  const auto dy = err * (2.0f / static_cast<float>(p.batch * p.din));
  const auto gw2 = dax::matmul(a.T(), dy);    // (H, D)
  const auto da = dax::matmul(dy, s.w2.T());  // (B, H)
  const auto dz = dax::where(z > s.zero, da, s.zero);
  const auto gw1 = dax::matmul(s.x.T(), dz);  // (D, H)
  if (trace) trace->emplace(MlpTrace{s.x, s.w1, a, s.w2, dy, dz, z, out, gw2, da, gw1});
  s.w1 = s.w1 - gw1 * p.lr;
  s.w2 = s.w2 - gw2 * p.lr;
}

void bench_mlp(const dax::Mesh& mesh, const Options& o, Report& r) {
  const dax::NamedSharding rep(mesh, dax::P());
  const Mlp p;
  const int64_t B = p.batch, D = p.din, H = p.hidden;
  // Raw side: the step's GEMMs alone, with the transposes folded into cuBLAS (what PyTorch does).
  DeviceBlock x(B * D * 4), w1(D * H * 4), z(B * H * 4), a(B * H * 4), w2(H * D * 4), out(B * D * 4), dy(B * D * 4),
      gw2(H * D * 4), da(B * H * 4), dz(B * H * 4), gw1(D * H * 4);
  const double flops = 5 * 2.0 * B * D * H;
  r.line("#\n# e. 2-layer MLP step (B=%lld, D=%lld, H=%lld, float32): z = x w1, relu, out = a w2, MSE loss, backward by\n"
         "#    hand (3 GEMMs), SGD; dax ops vs its 5 GEMMs alone through cublasGemmEx (transposes folded in);\n"
         "#    event: GPU time by turns, median of %d; wall: host clock, synchronized around each step\n"
         "# dtype      dax(ms)  gemms(ms)  gemms/dax  dax(TF/s)  dax wall(ms)\n",
         static_cast<long long>(B), static_cast<long long>(D), static_cast<long long>(H), o.samples);
  std::string rows;
  for (const dax::MatmulPrecision precision : {dax::MatmulPrecision::highest, dax::MatmulPrecision::high}) {
    dax::set_matmul_precision(precision);
    const cublasComputeType_t compute = raw_settings(precision);
    MlpState s{dax::random::normal<float>(dax::random::key(7), {B, D}, rep),
               dax::random::normal<float>(dax::random::key(8), {B, D}, rep),
               dax::random::normal<float>(dax::random::key(9), {D, H}, rep) * (1.0f / std::sqrt(float(D))),
               dax::random::normal<float>(dax::random::key(10), {H, D}, rep) * (1.0f / std::sqrt(float(H))),
               dax::zeros<float>({}, rep)};
    const Op raw = [&] {
      raw_gemm(x.f(), false, w1.f(), false, z.f(), B, H, D, compute);     // z = x w1
      raw_gemm(a.f(), false, w2.f(), false, out.f(), B, D, H, compute);   // out = a w2
      raw_gemm(a.f(), true, dy.f(), false, gw2.f(), H, D, B, compute);    // gw2 = a^T dy
      raw_gemm(dy.f(), false, w2.f(), true, da.f(), B, H, D, compute);    // da = dy w2^T
      raw_gemm(x.f(), true, dz.f(), false, gw1.f(), D, H, B, compute);    // gw1 = x^T dz
    };
    {  // one step's GEMM inputs into the raw buffers; the raw GEMMs must give its outputs
      std::optional<MlpTrace> t;
      mlp_step(p, s, &t);
      const std::pair<const DeviceBlock*, const dax::DistArray<float>*> inputs[] = {
          {&x, &t->x}, {&w1, &t->w1}, {&a, &t->a}, {&w2, &t->w2}, {&dy, &t->dy}, {&dz, &t->dz}};
      for (const auto& [block, array] : inputs) cu::copy_device(block->get(), array->local_data().data(), block->bytes());
      raw();
      const std::pair<const DeviceBlock*, const dax::DistArray<float>*> outputs[] = {
          {&z, &t->z}, {&out, &t->out}, {&gw2, &t->gw2}, {&da, &t->da}, {&gw1, &t->gw1}};
      const char* names[] = {"z", "out", "gw2", "da", "gw1"};
      for (int i = 0; i < 5; ++i) {
        const auto& [block, array] = outputs[i];
        const double diff =
            relative_difference(block->f(), array->local_data().data(), static_cast<int64_t>(block->bytes() / 4));
        if (!(diff <= 1e-2))
          throw dax::Error(std::string("MLP: the raw GEMM for ") + names[i] + " differs from dax's (relative " +
                           std::to_string(diff) + ")");
      }
    }
    const Op ours = [&] { mlp_step(p, s); };
    (void)warm_up({ours, raw}, o.warmup, 1.0);
    std::vector<double> ms;
    double wall = 0;
    {
      SteadyState steady(r, std::string("mlp ") + gemm_label<float>(precision));
      ms = time_by_turns({ours, raw}, 1, o.samples);
      wall = synchronized_wall_ms(ours, o.samples);
    }
    const double tf = flops / (ms[0] * 1e-3) / 1e12;
    r.line("%-9s %10.3f %10.3f %10.3f %10.2f %13.3f\n", gemm_label<float>(precision), ms[0], ms[1], ms[1] / ms[0], tf,
           wall);
    rows += std::string(rows.empty() ? "" : ", ") + "{\"precision\": " + json_string(dax::to_string(precision)) +
            ", \"dax_ms\": " + json_number(ms[0]) + ", \"raw_gemms_ms\": " + json_number(ms[1]) +
            ", \"gemm_share\": " + json_number(ms[1] / ms[0]) + ", \"dax_tflops\": " + json_number(tf) +
            ", \"dax_wall_ms\": " + json_number(wall) + "}";
  }
  dax::set_matmul_precision(dax::MatmulPrecision::highest);
  r.json_sections.push_back("\"mlp\": {\"batch\": " + std::to_string(B) + ", \"din\": " + std::to_string(D) +
                            ", \"hidden\": " + std::to_string(H) + ", \"flops_per_step\": " + json_number(flops) +
                            ", \"rows\": [" + rows + "]}");
}

// ---- d. steady-state allocations, reported last: every loop above counted its own ----

void report_allocations(Report& r) {
  int64_t total = 0;
  std::string rows;
  r.line("#\n# d. cudaMalloc calls inside the timed loops (dax's caching allocator, system allocations after warm-up)\n"
         "# loop                 new cudaMalloc\n");
  for (const auto& [name, count] : r.allocations) {
    total += count;
    r.line("%-22s %14lld\n", name.c_str(), static_cast<long long>(count));
    rows += std::string(rows.empty() ? "" : ", ") + "{\"loop\": " + json_string(name) +
            ", \"new_system_allocations\": " + std::to_string(count) + "}";
  }
  r.line("steady-state cudaMalloc calls: %lld  (target 0) %s\n", static_cast<long long>(total), r.judge(total == 0));
  const auto stats = cu::device_allocator()->stats();
  r.json_sections.push_back("\"allocator\": {\"steady_state_system_allocations\": " + std::to_string(total) +
                            ", \"meets_target\": " + (total == 0 ? "true" : "false") + ", \"loops\": [" + rows +
                            "], \"system_allocations\": " + std::to_string(stats.system_allocations) +
                            ", \"requests\": " + std::to_string(stats.requests) + "}");
}

// ---- h. a group of one member ----

/// Device memory in use now (cudaMemGetInfo: total - free), bytes.
double device_bytes_in_use() {
  size_t free = 0, total = 0;
  DAX_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<double>(total - free);
}

MPI_Comm dup_self() {
  MPI_Comm self = MPI_COMM_NULL;
  dax::detail::mpi_check(MPI_Comm_dup(MPI_COMM_SELF, &self), "MPI_Comm_dup");
  return self;
}

/// What a one-member group costs: dax's communicator for it (device copies) against NCCL's
/// communicator of the same member, which is what such a group got before. NCCL's first creation
/// in the process (its library start-up included) is reported apart from the median of the next.
void bench_groups(const Options& o, Report& r) {
  struct Cost {
    double first_ms, setup_ms, device_mib, all_reduce_us;
  };
  const auto measure = [&](const std::function<std::unique_ptr<dax::detail::Communicator>()>& make) {
    Cost c{};
    std::vector<double> setups;
    DeviceBlock values(8 * sizeof(float));  // before the memory readings
    fill(values, 7);
    float* v = values.f();
    const int creations = std::max(3, std::min(o.samples, 7));
    for (int i = 0; i <= creations; ++i) {
      cu::synchronize();
      const double before = device_bytes_in_use();
      const auto t0 = Clock::now();
      auto comm = make();
      cu::synchronize();
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (i == 0) {
        c.first_ms = ms;
      } else {
        setups.push_back(ms);
      }
      if (i < creations) continue;
      // The last one is used, then measured while it lives: NCCL may take buffers at first use.
      const HostTiming t = host_loop(
          [&] { comm->all_reduce(nullptr, v, 8, dax::DType::float32, dax::detail::ReduceOp::sum); }, o.iters);
      c.all_reduce_us = t.total_us;
      c.device_mib = (device_bytes_in_use() - before) / double(1 << 20);
    }
    std::sort(setups.begin(), setups.end());
    c.setup_ms = setups[setups.size() / 2];
    return c;
  };
  const Cost nccl = measure([] {
    return std::make_unique<cu::NcclCommunicator>(std::make_unique<dax::detail::MpiCommunicator>(dup_self()));
  });
  const Cost solo = measure([] { return cu::make_gpu_communicator(dup_self(), "('one',)", {0}, nullptr); });
  r.line("#\n# h. a group of one member: creating its communicator (the process's first creation, then the median\n"
         "#    of the next), device memory it holds after use, an in-place all-reduce of 8 floats (%d calls)\n"
         "# communicator        first(ms)  setup(ms)  device MiB  all-reduce(us)\n"
         "dax (device copies) %10.3f %10.3f %11.1f %15.3f\n"
         "NCCL, one member    %10.3f %10.3f %11.1f %15.3f\n",
         o.iters, solo.first_ms, solo.setup_ms, solo.device_mib, solo.all_reduce_us, nccl.first_ms, nccl.setup_ms,
         nccl.device_mib, nccl.all_reduce_us);
  r.json_sections.push_back("\"one_member_group\": {\"dax_first_ms\": " + json_number(solo.first_ms) +
                            ", \"nccl_first_ms\": " + json_number(nccl.first_ms) +
                            ", \"dax_setup_ms\": " + json_number(solo.setup_ms) +
                            ", \"nccl_setup_ms\": " + json_number(nccl.setup_ms) +
                            ", \"dax_device_mib\": " + json_number(solo.device_mib) +
                            ", \"nccl_device_mib\": " + json_number(nccl.device_mib) +
                            ", \"dax_all_reduce_us\": " + json_number(solo.all_reduce_us) +
                            ", \"nccl_all_reduce_us\": " + json_number(nccl.all_reduce_us) + "}");
}

void write_json(const std::string& path, const std::string& body) {
  if (path.empty()) return;
  std::ofstream out(path);
  out << body;
  if (!out) throw dax::Error("cuda_bench: cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return 2;
  // Before MPI and the runtime: a machine without a GPU skips at once, saying why (CUDA's error).
  if (const dax::detail::GpuQuery q = cu::query_gpus(); q.count == 0) {
    if (launcher_rank() == 0) {
      const std::string why = dax::detail::describe_gpu_query(q);
      std::printf("SKIPPED: %s\n", why.c_str());
      write_json(o.json, "{\"benchmark\": \"cuda\", \"skipped\": " + json_string(why) + "}\n");
    }
    return 0;
  }
  dax::Runtime rt(argc, argv);
  Report r;
  r.print = rt.rank() == 0;
  if (rt.backend() != dax::Backend::cuda) {
    r.line("SKIPPED: dax runs on the %s backend (DAX_BACKEND); cuda_bench measures the CUDA backend\n",
           dax::to_string(rt.backend()).c_str());
    if (r.print) write_json(o.json, "{\"benchmark\": \"cuda\", \"skipped\": \"not on the CUDA backend\"}\n");
    return 0;
  }
  try {
    const dax::Mesh mesh({1}, {"x"}, {rt.rank()});  // this rank's GPU alone: nothing to communicate
    cudaDeviceProp prop{};
    DAX_CUDA_CHECK(cudaGetDeviceProperties(&prop, cu::context().device()));
    int runtime_version = 0, driver_version = 0, blas_version = 0;
    DAX_CUDA_CHECK(cudaRuntimeGetVersion(&runtime_version));
    DAX_CUDA_CHECK(cudaDriverGetVersion(&driver_version));
    DAX_CUBLAS_CHECK(cublasGetVersion(cu::context().blas(), &blas_version));
    r.line("# dax CUDA benchmark: %s (%.0f GiB, sm_%d%d), CUDA runtime %d, driver %d, cuBLAS %d\n"
           "# %d rank(s), each on a 1-device mesh of its own; rank 0 reports; ratios are dax / raw in this run\n",
           prop.name, prop.totalGlobalMem / double(1 << 30), prop.major, prop.minor, runtime_version, driver_version,
           blas_version, rt.size());
    r.json_sections.push_back("\"benchmark\": \"cuda\", \"device\": " + json_string(prop.name) +
                              ", \"cuda_runtime\": " + std::to_string(runtime_version) +
                              ", \"cuda_driver\": " + std::to_string(driver_version) +
                              ", \"cublas\": " + std::to_string(blas_version) + ", \"ranks\": " +
                              std::to_string(rt.size()) + ", \"samples\": " + std::to_string(o.samples) +
                              ", \"warmup\": " + std::to_string(o.warmup));
    if (o.runs("gemm")) bench_gemm(mesh, o, r);
    if (o.runs("elementwise")) bench_elementwise(mesh, o, r);
    if (o.runs("overhead")) bench_overhead(mesh, o, r);
    if (o.runs("mlp")) bench_mlp(mesh, o, r);
    if (o.runs("reduction")) bench_reduction(mesh, o, r);
    if (o.runs("attention")) bench_attention(mesh, o, r);
    if (o.runs("argmax")) bench_argmax(mesh, o, r);
    if (o.runs("reshard") && rt.size() > 1) bench_reshard(rt, o, r);
    if (o.runs("groups") && rt.size() == 1) bench_groups(o, r);
    report_allocations(r);
    r.line("#\n# targets met: %d of %d\n", r.met, r.targets);
    r.json_sections.push_back("\"targets\": " + std::to_string(r.targets) + ", \"targets_met\": " + std::to_string(r.met));
    if (r.print) {
      std::string body = "{";
      for (size_t i = 0; i < r.json_sections.size(); ++i) body += (i ? ", " : "") + r.json_sections[i];
      write_json(o.json, body + "}\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_bench (rank %d): %s\n", rt.rank(), e.what());
    return 1;
  }
  return 0;
}
