// The CUDA backend's kernels, each checked against its CPU counterpart in backend/cpu on random
// (non-zero) inputs and uneven shapes; plus the device allocator's caching and out-of-memory text.
// Standalone (no runtime, no MPI calls): skips with exit code 77 when no GPU is visible.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <dax/backend/cpu/adamw.hpp>
#include <dax/backend/cpu/arg_reduce.hpp>
#include <dax/backend/cpu/attention.hpp>
#include <dax/backend/cpu/copy.hpp>
#include <dax/backend/cpu/elementwise.hpp>
#include <dax/backend/cpu/gather.hpp>
#include <dax/backend/cpu/gemm.hpp>
#include <dax/backend/cpu/norm.hpp>
#include <dax/backend/cpu/reduce.hpp>
#include <dax/backend/cpu/softmax.hpp>
#include <dax/backend/cpu/transpose.hpp>
#include <dax/backend/cuda/backend.cuh>
#include <dax/backend/matmul_precision.hpp>
#include <dax/core/philox.hpp>
#include <dax/core/shape.hpp>
#include <dax/ops/functors.hpp>

#include "../common/ulp.hpp"
#include "skip_without_gpu.hpp"

namespace cpu = dax::detail::cpu;
namespace gpu = dax::detail::cuda;
using dax::Box;
using dax::Shape;
using dax::detail::cat;

namespace {

int failures = 0;

void report(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

/// Runs one group of checks; an exception fails the group with its message instead of ending the run.
void run(const std::string& group, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    report(false, cat(group, ": threw ", e.what()));
  }
}

std::mt19937_64 rng(20240601);

int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

/// Non-zero values of both signs: magnitudes 1..9 for integers, [0.5, 1.5) otherwise.
template <class T>
T random_value() {
  const bool negative = uniform(0, 1) == 1;
  if constexpr (std::is_integral_v<T>) {
    const auto v = static_cast<T>(uniform(1, 9));
    return negative ? static_cast<T>(-v) : v;
  } else {
    const double v = std::uniform_real_distribution<double>(0.5, 1.5)(rng) * (negative ? -1 : 1);
    if constexpr (std::is_same_v<T, double>)
      return v;
    else
      return T(static_cast<float>(v));
  }
}

template <class T>
std::vector<T> random_vector(int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) x = random_value<T>();
  return v;
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
  else if constexpr (std::is_same_v<T, int32_t>)
    return "int32_t";
  else if constexpr (std::is_same_v<T, int64_t>)
    return "int64_t";
  else if constexpr (std::is_same_v<T, Eigen::half>)
    return "half";
  else if constexpr (std::is_same_v<T, Eigen::bfloat16>)
    return "bfloat16";
  else
    return "?";
}

template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>)
    return static_cast<float>(v);
  else
    return static_cast<double>(v);
}

template <class T>
struct DeviceArray {
  std::shared_ptr<dax::detail::Buffer> buffer;
  size_t size = 0;
  T* data() const { return static_cast<T*>(buffer->data()); }
};

template <class T>
DeviceArray<T> upload(const std::vector<T>& host) {
  DeviceArray<T> d{gpu::allocate(std::max<size_t>(host.size(), 1) * sizeof(T)), host.size()};
  gpu::copy_from_host(d.data(), host.data(), host.size() * sizeof(T));
  return d;
}

template <class T>
std::vector<T> download(const DeviceArray<T>& d) {
  std::vector<T> host(d.size);
  gpu::copy_to_host(host.data(), d.data(), host.size() * sizeof(T));
  return host;
}

/// Empty when equal, else where and how they differ.
template <class T>
std::string difference(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return cat("sizes ", got.size(), " vs ", want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return cat("element ", i, ": gpu ", to_double(got[i]), ", cpu ", to_double(want[i]));
  return "";
}

/// Empty when |got - want| <= tol[i] everywhere.
template <class T>
std::string difference(const std::vector<T>& got, const std::vector<double>& want, const std::vector<double>& tol) {
  if (got.size() != want.size()) return cat("sizes ", got.size(), " vs ", want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(to_double(got[i]) - want[i]) <= tol[i]))
      return cat("element ", i, ": gpu ", to_double(got[i]), ", reference ", want[i], ", tolerance ", tol[i]);
  return "";
}

void expect_same(const std::string& what, const std::string& diff) {
  report(diff.empty(), diff.empty() ? what : what + ": " + diff);
}

// ---- functors: trivially copyable, DAX_HOST_DEVICE ----

struct SubMul {  // no a * b + c form, so nvcc cannot contract it into an FMA the CPU does not do
  DAX_HOST_DEVICE float operator()(float a, float b, float c) const { return (a - b) * c; }
};
struct Scale {
  double s;
  DAX_HOST_DEVICE double operator()(float a) const { return a * s; }
};
struct Combine {
  DAX_HOST_DEVICE int64_t operator()(int32_t a, int64_t b) const { return a * 3 - b; }
};
struct Less {
  DAX_HOST_DEVICE uint8_t operator()(float a, double b) const { return a < b; }
};
template <class T>
struct Sum {
  DAX_HOST_DEVICE T operator()(T a, T b) const { return a + b; }
};
template <class T>
struct Max {
  DAX_HOST_DEVICE T operator()(T a, T b) const { return a > b ? a : b; }
};
struct PhiloxBits {
  uint32_t k0, k1;
  DAX_HOST_DEVICE uint32_t operator()(uint64_t flat) const {
    const auto r = dax::detail::philox4x32_10(
        dax::detail::Philox4x32{{static_cast<uint32_t>(flat), static_cast<uint32_t>(flat >> 32), 0u, 0u}}, k0, k1);
    return r.c[0] ^ r.c[3];
  }
};
struct PhiloxUniform {  // [0, 1) from 24 random bits: exact in float on both sides
  PhiloxBits bits;
  DAX_HOST_DEVICE float operator()(uint64_t flat) const {
    return static_cast<float>(bits(flat) >> 8) * (1.0f / 16777216.0f);
  }
};

// ---- memory ----

void test_memory() {
  const auto host = random_vector<double>(100003);
  const auto a = upload(host);
  DeviceArray<double> b{gpu::allocate(host.size() * sizeof(double)), host.size()};
  gpu::copy_device(b.data(), a.data(), host.size() * sizeof(double));
  expect_same("memory: upload, device copy, download", difference(download(b), host));

  auto pinned = gpu::allocate_pinned(host.size() * sizeof(double));
  gpu::copy_device(pinned->data(), b.data(), host.size() * sizeof(double));  // device -> pinned, on the stream
  gpu::synchronize();
  std::vector<double> back(host.size());
  std::memcpy(back.data(), pinned->data(), back.size() * sizeof(double));
  expect_same("memory: device to pinned through copy_device", difference(back, host));

  try {
    [[maybe_unused]] auto huge = gpu::allocate(size_t(1) << 50);
    report(false, "memory: allocating 2^50 bytes should fail");
  } catch (const dax::Error& e) {
    const std::string text = e.what();
    report(text.find("out of device memory") != std::string::npos && text.find("1125899906842624") != std::string::npos,
           "memory: out-of-memory error says: " + text);
  }
  const auto after = upload(std::vector<float>{1.5f, -2.5f});
  expect_same("memory: allocation after the out-of-memory error", difference(download(after), {1.5f, -2.5f}));

  // Steady state: the same sizes over and over (with a reduction's scratch too) allocate nothing new.
  const auto& allocator = gpu::device_allocator();
  const std::vector<size_t> sizes{77, 1000, 4096, size_t(1) << 20, (size_t(3) << 20) + 5};
  const auto input = upload(random_vector<float>(1 << 20));
  int64_t after_first = 0;
  for (int it = 0; it < 100; ++it) {
    std::vector<std::shared_ptr<dax::detail::Buffer>> held;
    for (size_t s : sizes) held.push_back(gpu::allocate(s));
    gpu::fill(static_cast<float*>(held[3]->data()), int64_t(1) << 18, 0.0f);
    gpu::reduce_dims(input.data(), Shape{1 << 20}, {true}, static_cast<float*>(held[3]->data()), Sum<float>{});
    held.clear();
    if (it == 0) after_first = allocator->stats().system_allocations;
  }
  gpu::synchronize();
  const int64_t now = allocator->stats().system_allocations;
  report(now == after_first,
         cat("memory: 99 steady-state iterations made ", now - after_first, " new cudaMalloc calls"));
}

// ---- copy ----

Box random_box_within(const Shape& g) {
  Box box(g.size());
  for (size_t d = 0; d < g.size(); ++d) {
    const int64_t start = uniform(0, g[d] - 1);
    box[d] = {start, uniform(start + 1, g[d])};
  }
  return box;
}

Box random_box_around(const Box& region, const Shape& g) {
  Box box(g.size());
  for (size_t d = 0; d < g.size(); ++d) box[d] = {uniform(0, region[d].start), uniform(region[d].stop, g[d])};
  return box;
}

template <class T>
std::string check_copy(const Box& src_block, const Box& dst_block, const Box& region, dax::detail::CopyMode mode) {
  const auto src = random_vector<T>(dax::numel(src_block));
  auto want = random_vector<T>(dax::numel(dst_block));
  const auto d_src = upload(src);
  const auto d_dst = upload(want);
  cpu::copy_region(src.data(), src_block, want.data(), dst_block, region, mode);
  gpu::copy_region(d_src.data(), src_block, d_dst.data(), dst_block, region, mode);
  const std::string diff = difference(download(d_dst), want);
  return diff.empty() ? ""
                      : cat(dax::to_string(region), " from ", dax::to_string(src_block), " to ",
                            dax::to_string(dst_block), ": ", diff);
}

template <class T>
void test_copy() {
  const char* type = type_name<T>();
  for (auto mode : {dax::detail::CopyMode::assign, dax::detail::CopyMode::add}) {
    const char* name = mode == dax::detail::CopyMode::add ? "add" : "assign";
    std::string diff;
    int cases = 0;
    for (int rank = 0; rank <= 4 && diff.empty(); ++rank) {
      for (int c = 0; c < 40 && diff.empty(); ++c, ++cases) {
        Shape g(rank);
        for (auto& e : g) e = uniform(1, 13);
        const Box region = random_box_within(g);
        diff = check_copy<T>(random_box_around(region, g), random_box_around(region, g), region, mode);
      }
    }
    expect_same(cat("copy_region<", type, "> ", name, ": ", cases, " random regions of rank 0-4"), diff);
  }
}

void test_copy_edges() {
  using dax::detail::CopyMode;
  // Full 9-d pieces merge into one run; a 9-d region strided in every dimension cannot merge.
  const Shape g(9, 3);
  const Box full = dax::full_box(g);
  expect_same("copy_region: 9-d full pieces (merged into one run)", check_copy<float>(full, full, full, CopyMode::add));
  const Box inner(9, dax::Slice{0, 2});
  try {
    check_copy<float>(full, full, inner, CopyMode::assign);
    report(false, "copy_region: 9 unmergeable dimensions should be refused");
  } catch (const dax::Error& e) {
    report(std::string(e.what()).find("at most 8") != std::string::npos,
           cat("copy_region: refuses 9-d walks: ", e.what()));
  }
  // An empty region touches nothing.
  expect_same("copy_region: empty region", check_copy<float>(full, full, Box(9, dax::Slice{1, 1}), CopyMode::assign));

  for (int64_t count : {int64_t(1), int64_t(1000003)}) {
    DeviceArray<int64_t> d{gpu::allocate(count * sizeof(int64_t)), static_cast<size_t>(count)};
    gpu::fill(d.data(), count, int64_t(-7));
    expect_same(cat("fill<int64_t> of ", count), difference(download(d), std::vector<int64_t>(count, -7)));
  }
}

// ---- elementwise ----

template <class Out, class F, class... In>
void check_map(const std::string& what, const Shape& shape, F f, const std::pair<Shape, std::vector<In>>&... ins) {
  const std::array<std::vector<int64_t>, sizeof...(In)> strides{dax::detail::broadcast_strides(ins.first, shape)...};
  std::vector<Out> want(static_cast<size_t>(dax::numel(shape)));
  cpu::broadcast_map(want.data(), shape, strides, f, ins.second.data()...);
  const auto inputs = std::make_tuple(upload(ins.second)...);
  DeviceArray<Out> out{gpu::allocate(std::max<size_t>(want.size(), 1) * sizeof(Out)), want.size()};
  std::apply([&](const auto&... d) { gpu::broadcast_map(out.data(), shape, strides, f, d.data()...); }, inputs);
  expect_same(cat("broadcast_map ", what, " to ", dax::to_string(shape)), difference(download(out), want));
}

template <class T>
std::pair<Shape, std::vector<T>> operand(const Shape& shape) {
  return {shape, random_vector<T>(dax::numel(shape))};
}

void test_elementwise() {
  const Shape s{6, 7, 5};
  check_map<float>("3 same-shape operands (flat path)", s, SubMul{}, operand<float>(s), operand<float>(s),
                   operand<float>(s));
  check_map<float>("(6,7,5) (7,1) (5,)", s, SubMul{}, operand<float>(s), operand<float>({7, 1}), operand<float>({5}));
  check_map<float>("(1,7,5) (6,1,1) ()", s, SubMul{}, operand<float>({1, 7, 5}), operand<float>({6, 1, 1}),
                   operand<float>({}));
  check_map<float>("0-d operands", {}, SubMul{}, operand<float>({}), operand<float>({}), operand<float>({}));
  const Shape big{33, 1025, 17};
  check_map<double>("float -> double, one operand", big, Scale{0.37}, operand<float>(big));
  check_map<double>("transposed-looking broadcast (33,1,17)", big, Scale{-2.5}, operand<float>({33, 1, 17}));
  check_map<int64_t>("int32 (1025,1) with int64 (33,1025,17)", big, Combine{}, operand<int32_t>({1025, 1}),
                     operand<int64_t>(big));
  check_map<uint8_t>("comparison (1,1,17) < (33,1025,1)", big, Less{}, operand<float>({1, 1, 17}),
                     operand<double>({33, 1025, 1}));
  check_map<float>("size-1 output dimensions (4,1,9,1)", {4, 1, 9, 1}, SubMul{}, operand<float>({4, 1, 9, 1}),
                   operand<float>({9, 1}), operand<float>({4, 1, 1, 1}));
  check_map<float>("empty output", {3, 0, 5}, SubMul{}, operand<float>({3, 0, 5}), operand<float>({5}),
                   operand<float>({}));
  // The flat kernel: operands laid out like the output or broadcast scalars, 16-byte accesses and
  // a tail of count % V elements.
  check_map<float>("dense, scalar, dense, odd count", {1000003}, SubMul{}, operand<float>({1000003}),
                   operand<float>({}), operand<float>({1000003}));
  check_map<uint8_t>("comparison of (67,61) with a scalar", {67, 61}, Less{}, operand<float>({67, 61}),
                     operand<double>({1, 1}));
  check_map<double>("float -> double with a tail", {4097}, Scale{0.5}, operand<float>({4097}));
  {  // a dense operand one element past an aligned start takes the strided walk, same values
    const Shape shape{1027};
    const auto in = random_vector<float>(1028);
    const std::array<std::vector<int64_t>, 1> strides{dax::detail::row_major_strides(shape)};
    std::vector<double> want(1027);
    cpu::broadcast_map(want.data(), shape, strides, Scale{3.0}, in.data() + 1);
    const auto d_in = upload(in);
    DeviceArray<double> out{gpu::allocate(want.size() * sizeof(double)), want.size()};
    gpu::broadcast_map(out.data(), shape, strides, Scale{3.0}, d_in.data() + 1);
    expect_same("broadcast_map from an unaligned operand", difference(download(out), want));
  }
}

// The transcendental functors: GPU (CUDA's libm, FMA contraction) against the same functor on the
// CPU (glibc), within the ULPs of tests/common/ulp.hpp, the table the shared tests use; the
// correctly rounded ones (sqrt, rsqrt, division) exactly.
template <class T, class F>
std::string check_libm(const char* op, F f, double lo, double hi, bool at_scale = false) {
  std::vector<T> in(100003);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (auto& v : in) v = static_cast<T>(dist(rng));
  const Shape shape{static_cast<int64_t>(in.size())};
  const std::array<std::vector<int64_t>, 1> strides{dax::detail::row_major_strides(shape)};
  std::vector<T> want(in.size());
  cpu::broadcast_map(want.data(), shape, strides, f, in.data());
  const auto d_in = upload(in);
  DeviceArray<T> out{gpu::allocate(in.size() * sizeof(T)), in.size()};
  gpu::broadcast_map(out.data(), shape, strides, f, d_in.data());
  const auto got = download(out);
  if (op == nullptr) return difference(got, want);
  return dax::test::ulp_mismatch(got, want, op, 1, at_scale ? in : std::vector<T>{});
}

template <class T>
void test_libm() {
  namespace fn = dax::detail::fn;
  const std::string type = type_name<T>();
  expect_same("exp<" + type + ">", check_libm<T>("exp", fn::Exp{}, -80, 80));
  expect_same("log<" + type + ">", check_libm<T>("log", fn::Log{}, 1e-6, 1e6));
  expect_same("tanh<" + type + ">", check_libm<T>("tanh", fn::Tanh{}, -12, 12));
  expect_same("sin<" + type + ">", check_libm<T>("sin", fn::Sin{}, -100, 100));
  expect_same("cos<" + type + ">", check_libm<T>("cos", fn::Cos{}, -100, 100));
  expect_same("sigmoid<" + type + ">", check_libm<T>("sigmoid", fn::Sigmoid{}, -80, 80));
  expect_same("gelu<" + type + ">", check_libm<T>("gelu", fn::Gelu{}, -12, 12, true));
  expect_same("gelu_erf<" + type + ">", check_libm<T>("gelu_erf", fn::GeluErf{}, -12, 12, true));
  expect_same("silu<" + type + ">", check_libm<T>("silu", fn::Silu{}, -80, 80));
  expect_same("sqrt<" + type + "> (exact)", check_libm<T>(nullptr, fn::Sqrt{}, 0, 1e6));
  expect_same("rsqrt<" + type + "> (exact)", check_libm<T>(nullptr, fn::Rsqrt{}, 1e-6, 1e6));
}

// ---- reductions ----

std::vector<bool> flags(size_t rank, unsigned mask) {
  std::vector<bool> f(rank);
  for (size_t d = 0; d < rank; ++d) f[d] = (mask >> d) & 1u;
  return f;
}

Shape reduced_shape(const Shape& shape, const std::vector<bool>& reduced) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d)
    if (!reduced[d]) out.push_back(shape[d]);
  return out;
}

/// Float sums against a double reference, tolerance 1e-5 of the sum of magnitudes; the same
/// reduction twice gives the same bits.
std::string check_sum_float(const Shape& shape, const std::vector<bool>& reduced) {
  const auto in = random_vector<float>(dax::numel(shape));
  const int64_t outputs = dax::numel(reduced_shape(shape, reduced));
  std::vector<double> in_d(in.begin(), in.end()), abs_d(in.size());
  std::transform(in.begin(), in.end(), abs_d.begin(), [](float x) { return std::abs(double(x)); });
  std::vector<double> want(outputs, 0.0), magnitude(outputs, 0.0);
  cpu::reduce_dims(in_d.data(), shape, reduced, want.data(), Sum<double>{});
  cpu::reduce_dims(abs_d.data(), shape, reduced, magnitude.data(), Sum<double>{});
  for (auto& m : magnitude) m = 1e-5 * m + 1e-30;
  const auto d_in = upload(in);
  const auto out1 = upload(std::vector<float>(outputs, 0.0f));
  const auto out2 = upload(std::vector<float>(outputs, 0.0f));
  gpu::reduce_dims(d_in.data(), shape, reduced, out1.data(), Sum<float>{});
  gpu::reduce_dims(d_in.data(), shape, reduced, out2.data(), Sum<float>{});
  const auto got = download(out1);
  const std::string diff = difference(got, want, magnitude);
  if (!diff.empty()) return diff;
  const std::string again = difference(download(out2), got);
  return again.empty() ? "" : "not deterministic: " + again;
}

template <class T, class Op>
std::string check_reduce_exact(const Shape& shape, const std::vector<bool>& reduced, Op op, T identity) {
  const auto in = random_vector<T>(dax::numel(shape));
  std::vector<T> want(dax::numel(reduced_shape(shape, reduced)), identity);
  const auto d_in = upload(in);
  const auto d_out = upload(want);
  cpu::reduce_dims(in.data(), shape, reduced, want.data(), op);
  gpu::reduce_dims(d_in.data(), shape, reduced, d_out.data(), op);
  return difference(download(d_out), want);
}

void check_reductions(const Shape& shape, const std::vector<bool>& reduced) {
  std::string dims;
  for (size_t d = 0; d < reduced.size(); ++d)
    if (reduced[d]) dims += cat(dims.empty() ? "" : ",", d);
  const std::string what = cat(dax::to_string(shape), " over {", dims, "}");
  expect_same("reduce_dims sum<float> " + what, check_sum_float(shape, reduced));
  expect_same("reduce_dims max<float> " + what,
              check_reduce_exact<float>(shape, reduced, Max<float>{}, -std::numeric_limits<float>::infinity()));
  expect_same("reduce_dims sum<int64_t> " + what, check_reduce_exact<int64_t>(shape, reduced, Sum<int64_t>{}, 0));
}

/// 16-bit input folded in float (Acc != In): max exactly as on the CPU, and a sum of ones that
/// half itself could not hold (2048 + 1 rounds back to 2048).
void check_reduce_widening(const Shape& shape, const std::vector<bool>& reduced) {
  const std::string what = cat(dax::to_string(shape), " (half in, float out)");
  const auto in = random_vector<Eigen::half>(dax::numel(shape));
  std::vector<float> want(dax::numel(reduced_shape(shape, reduced)), -std::numeric_limits<float>::infinity());
  const auto d_in = upload(in);
  const auto d_out = upload(want);
  cpu::reduce_dims(in.data(), shape, reduced, want.data(), Max<float>{});
  gpu::reduce_dims(d_in.data(), shape, reduced, d_out.data(), Max<float>{});
  expect_same("reduce_dims max " + what, difference(download(d_out), want));
  const std::vector<Eigen::half> ones(5000, Eigen::half(1.0f));
  const auto d_ones = upload(ones);
  const auto d_sum = upload(std::vector<float>{0.0f});
  gpu::reduce_dims(d_ones.data(), Shape{5000}, {true}, d_sum.data(), Sum<float>{});
  expect_same("reduce_dims sum of 5000 half ones in float", difference(download(d_sum), std::vector<float>{5000.0f}));
}

void test_reduce() {
  check_reduce_widening({300, 41}, {false, true});
  check_reduce_widening({7, 3000}, {true, false});
  const Shape s{67, 129, 45};
  for (unsigned mask = 0; mask < 8; ++mask) check_reductions(s, flags(3, mask));
  // Shapes that split the elements of few outputs into parts, in both kernels.
  check_reductions({1 << 21}, {true});
  check_reductions({300007, 3}, {true, false});
  check_reductions({3, 300007}, {false, true});
  check_reductions({2, 5000, 70}, {false, true, false});
  check_reductions({3000, 40}, {false, true});  // short rows: a thread per output
  check_reductions({4096, 768}, {false, true});  // many medium rows: a warp per output, 16-byte loads
  check_reductions({2500, 129}, {false, true});  // the same without (129 is no multiple of a pack)
  check_reductions({2048, 4096}, {false, true}); // the longest rows a warp takes
  check_reductions({2048, 68}, {false, true});   // fewer packs than lanes (17 of 4 floats)
  check_reduce_widening({8192, 768}, {false, true});
  // The layouts with kernels of their own (backend/cuda/reduce_contiguous.cuh): rows and columns,
  // with 16-byte loads (widths that divide) and without, in one pass and in parts.
  check_reductions({5, 100000}, {false, true});
  check_reductions({4, 100001}, {false, true});
  check_reductions({(1 << 20) + 3}, {true});
  check_reductions({20000, 64}, {true, false});
  check_reductions({1000, 37}, {true, false});
  check_reductions({64, 2, 96}, {true, true, false});
  check_reduce_widening({300, 4096}, {false, true});
  check_reduce_widening({4096, 64}, {true, false});
  {  // an input one element past an aligned start: 16-byte loads would fault, so none are used
    const auto in = random_vector<float>(4 * 4096 + 1);
    const auto d_in = upload(in);
    std::vector<double> want(4, 0.0), column_want(4096, 0.0), row_tol(4, 1e-30), column_tol(4096, 1e-30);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 4096; ++j) {
        const double x = in[1 + i * 4096 + j];
        want[i] += x, column_want[j] += x;
        row_tol[i] += 1e-5 * std::abs(x), column_tol[j] += 1e-5 * std::abs(x);  // 1e-5 of the magnitudes
      }
    const auto rows = upload(std::vector<float>(4, 0.0f)), columns = upload(std::vector<float>(4096, 0.0f));
    gpu::reduce_dims(d_in.data() + 1, Shape{4, 4096}, {false, true}, rows.data(), Sum<float>{});
    gpu::reduce_dims(d_in.data() + 1, Shape{4, 4096}, {true, false}, columns.data(), Sum<float>{});
    expect_same("reduce_dims rows from an unaligned start", difference(download(rows), want, row_tol));
    expect_same("reduce_dims columns from an unaligned start", difference(download(columns), column_want, column_tol));
  }
  check_reductions({3, 4, 5, 6}, {true, false, true, false});
  check_reductions({5, 1, 7}, {false, true, true});
  check_reductions({}, {});
  expect_same("reduce_dims on an empty shape leaves out alone",
              check_reduce_exact<int64_t>({4, 0, 3}, {false, true, false}, Sum<int64_t>{}, 0));
}

// ---- argmax / argmin ----

/// The GPU's winners (index and value per output) equal the CPU's, ties included (values 1..9 for
/// integers, and for floating types when `coarse`). `nans`: a NaN planted at 1-3 places in about a
/// third of the lines (the first NaN must win, on both sides).
template <class T, class Better>
void check_arg_reduce(int64_t outer, int64_t len, int64_t inner, Better better, const char* name, bool coarse = false,
                      bool nans = false) {
  auto in = random_vector<T>(outer * len * inner);
  if (coarse)
    for (auto& v : in) v = static_cast<T>(random_value<int32_t>());
  if (nans && len > 0)
    for (int64_t line = 0; line < outer * inner; ++line) {
      if (uniform(0, 2) != 0) continue;
      const int64_t o = line / inner, i = line % inner;
      for (int64_t planted = uniform(1, 3); planted > 0; --planted)
        in[(o * len + uniform(0, len - 1)) * inner + i] = std::numeric_limits<T>::quiet_NaN();
    }
  const int64_t outputs = outer * inner;
  std::vector<T> want_value(outputs);
  std::vector<int64_t> want_index(outputs);
  cpu::arg_reduce(in.data(), outer, len, inner, better, want_value.data(), want_index.data());
  const auto d_in = upload(in);
  const auto d_value = upload(std::vector<T>(outputs));
  const auto d_index = upload(std::vector<int64_t>(outputs));
  gpu::arg_reduce(d_in.data(), outer, len, inner, better, d_value.data(), d_index.data());
  const std::string what = cat(name, "<", type_name<T>(), "> (", outer, ", ", len, ", ", inner, ")",
                               coarse ? " coarse" : "", nans ? " with NaNs" : "");
  expect_same(what + " indices", difference(download(d_index), want_index));
  expect_same(what + " values", difference(download(d_value), want_value));
}

void test_arg_reduce() {
  using dax::detail::fn::Greater;
  using dax::detail::fn::Less;
  check_arg_reduce<float>(37, 101, 5, Greater{}, "argmax");
  check_arg_reduce<float>(1, 100000, 1, Less{}, "argmin");
  check_arg_reduce<int32_t>(3000, 7, 1, Greater{}, "argmax");
  check_arg_reduce<int64_t>(1, 9, 4000, Less{}, "argmin");
  check_arg_reduce<Eigen::half>(64, 33, 3, Greater{}, "argmax");
  check_arg_reduce<Eigen::bfloat16>(5, 129, 7, Less{}, "argmin");
  check_arg_reduce<double>(4, 0, 3, Greater{}, "argmax");  // an empty piece: index -1 everywhere
  // Contiguous lines: a warp per line (64 to 4095 elements), a block per line (4096 and more).
  check_arg_reduce<float>(300, 64, 1, Greater{}, "argmax", true);
  check_arg_reduce<float>(1000, 257, 1, Less{}, "argmin", true);
  check_arg_reduce<int32_t>(77, 4095, 1, Greater{}, "argmax");
  check_arg_reduce<int64_t>(9, 4096, 1, Less{}, "argmin");
  check_arg_reduce<float>(600000, 64, 1, Greater{}, "argmax", true);  // more lines than one pass of the grid covers
  check_arg_reduce<double>(3, 50001, 1, Greater{}, "argmax", true);
  check_arg_reduce<Eigen::half>(40, 1000, 1, Greater{}, "argmax");
  check_arg_reduce<Eigen::bfloat16>(6, 9000, 1, Less{}, "argmin");
  // NaNs win, the first one among several, on every path.
  check_arg_reduce<float>(500, 300, 1, Greater{}, "argmax", true, true);
  check_arg_reduce<float>(40, 20000, 1, Less{}, "argmin", false, true);
  check_arg_reduce<double>(30, 17, 6, Greater{}, "argmax", true, true);
  check_arg_reduce<double>(200, 10, 1, Less{}, "argmin", false, true);
}

// ---- permutations ----

template <class T>
void check_permute(const Shape& shape, const std::vector<int>& perm) {
  const auto in = random_vector<T>(dax::numel(shape));
  std::vector<T> want(in.size());
  cpu::permute(in.data(), shape, perm, want.data());
  const auto d_in = upload(in);
  DeviceArray<T> d_out{gpu::allocate(std::max<size_t>(in.size(), 1) * sizeof(T)), in.size()};
  gpu::permute(d_in.data(), shape, perm, d_out.data());
  std::string p;
  for (int x : perm) p += cat(p.empty() ? "" : ",", x);
  expect_same(cat("permute ", dax::to_string(shape), " by (", p, ")"), difference(download(d_out), want));
}

void test_permute() {
  std::vector<int> perm{0, 1, 2};
  do check_permute<float>({33, 65, 17}, perm);
  while (std::next_permutation(perm.begin(), perm.end()));
  check_permute<float>({100, 37}, {1, 0});         // tiled
  check_permute<double>({37, 100}, {1, 0});        // tiled
  check_permute<float>({1000, 3}, {1, 0});         // too narrow for tiles
  check_permute<int64_t>({3, 70, 45}, {0, 2, 1});  // batched tiles
  check_permute<int32_t>({1, 40, 1, 50}, {3, 2, 1, 0});
  check_permute<float>({}, {});
  check_permute<float>({4, 0, 3}, {2, 0, 1});
  perm = {0, 1, 2, 3};
  do check_permute<int32_t>({5, 6, 7, 8}, perm);
  while (std::next_permutation(perm.begin(), perm.end()));
}

// ---- gather / scatter-add (take and its gradient) ----

// One piece (outer, rows, inner) holding global rows [first, first + rows), ids with repeats and
// some outside the piece: the GPU's gather and (deterministic) scatter-add against the CPU's.
template <class T, class I>
void check_gather(int64_t outer, int64_t rows, int64_t inner, int64_t count, int64_t first, int64_t chunk = 65536,
                  bool one_id = false) {
  const auto table = random_vector<T>(outer * rows * inner);
  const auto g = random_vector<T>(outer * count * inner);
  std::vector<I> ids(count);
  for (auto& id : ids) id = static_cast<I>(uniform(first - 2, first + rows + 1));
  if (one_id) std::fill(ids.begin(), ids.end(), static_cast<I>(first + rows / 2));
  std::vector<T> want(outer * count * inner), want_scatter(outer * rows * inner);
  cpu::gather_rows(table.data(), outer, rows, inner, ids.data(), count, first, want.data());
  cpu::scatter_add_rows(g.data(), outer, count, inner, ids.data(), rows, first, want_scatter.data());
  const auto d_table = upload(table), d_g = upload(g);
  const auto d_ids = upload(ids);
  DeviceArray<T> out{gpu::allocate(std::max<size_t>(want.size(), 1) * sizeof(T)), want.size()};
  DeviceArray<T> scattered{gpu::allocate(std::max<size_t>(want_scatter.size(), 1) * sizeof(T)), want_scatter.size()};
  gpu::gather_rows(d_table.data(), outer, rows, inner, d_ids.data(), count, first, out.data());
  gpu::scatter_add_rows(d_g.data(), outer, count, inner, d_ids.data(), rows, first, scattered.data(), chunk);
  const std::string shape = cat("(", outer, ", ", rows, ", ", inner, ") first ", first, ", ", count, " ids",
                                one_id ? " all alike" : "", " in chunks of ", chunk);
  expect_same("gather_rows " + shape, difference(download(out), want));
  // Sums in the same order (j ascending); the GPU accumulates 16-bit types in float.
  const auto got = download(scattered);
  std::vector<double> want_d, tol(want_scatter.size(), 0.0);
  for (const T& v : want_scatter) want_d.push_back(to_double(v));
  if constexpr (dax::detail::is_float16_v<T>)
    for (auto& t : tol) t = 0.05;
  expect_same("scatter_add_rows " + shape, difference(got, want_d, tol));
}

void test_gather() {
  check_gather<float, int32_t>(1, 37, 65, 100, 0);
  check_gather<float, int64_t>(3, 11, 5, 17, 20);
  check_gather<double, int32_t>(2, 9, 1, 40, 5);
  check_gather<Eigen::half, int32_t>(1, 8, 16, 30, 0);
  check_gather<float, int32_t>(1, 0, 4, 6, 3);  // a device holding no rows: zeros
  check_gather<float, int64_t>(2, 5, 3, 0, 0);  // no ids
  check_gather<float, int32_t>(1, 3, 33, 5000, 0);  // many repeats per row
  check_gather<float, int32_t>(2, 50, 7, 301, 10, 7);  // chunks of 7 ids, each adding to the last
  check_gather<double, int64_t>(1, 40, 9, 2000, 0, 2000, true);  // every id the same row
  check_gather<Eigen::half, int32_t>(1, 6, 16, 48, 0, 13);  // 16 bits rounded once per chunk
  check_gather<float, int32_t>(1, 1001, 768, 4096, 0);  // an embedding's gradient (rows x d_model)
}

// ---- fused softmax rows (causal_softmax) ----

// The GPU's softmax over rows and its gradient against the CPU's: causal or not, pieces holding
// queries from an offset (a split query dimension), rows shorter than a warp and uneven ones.
template <class T>
void check_softmax_rows(int64_t rows, int64_t length, bool causal, int64_t q_count, int64_t q_first, int64_t q_total,
                        double scale, double rel) {
  dax::detail::SoftmaxRows geo;
  geo.rows = rows, geo.length = length, geo.scale = scale, geo.causal = causal;
  geo.q_count = q_count, geo.q_first = q_first, geo.q_total = q_total;
  const auto x = random_vector<T>(rows * length), g = random_vector<T>(rows * length);
  std::vector<T> want(x.size()), want_dx(x.size());
  cpu::softmax_rows(x.data(), geo, want.data());
  cpu::softmax_rows_grad(want.data(), g.data(), geo, want_dx.data());
  const auto d_x = upload(x), d_g = upload(g), d_y = upload(want);
  DeviceArray<T> y{gpu::allocate(std::max<size_t>(x.size(), 1) * sizeof(T)), x.size()};
  DeviceArray<T> dx{gpu::allocate(std::max<size_t>(x.size(), 1) * sizeof(T)), x.size()};
  gpu::softmax_rows(d_x.data(), geo, y.data());
  gpu::softmax_rows_grad(d_y.data(), d_g.data(), geo, dx.data());  // from the CPU's y: the grad alone
  const std::string what = cat(type_name<T>(), " ", rows, " rows of ", length, causal ? " causal" : "", " queries ",
                               q_first, "+", q_count, " of ", q_total, " scale ", scale);
  std::vector<double> want_d, want_dx_d, tol, tol_dx;
  for (size_t i = 0; i < want.size(); ++i) {
    want_d.push_back(to_double(want[i]));
    want_dx_d.push_back(to_double(want_dx[i]));
    tol.push_back(rel * std::abs(to_double(want[i])) + rel * 1e-3);
    tol_dx.push_back(rel * std::abs(to_double(want_dx[i])) + rel * 1e-2);
  }
  expect_same("softmax_rows " + what, difference(download(y), want_d, tol));
  expect_same("softmax_rows_grad " + what, difference(download(dx), want_dx_d, tol_dx));
}

/// cross_entropy's row statistics: the GPU's logsumexp and picked logit against the CPU's, labels
/// inside and outside [0, length).
template <class T, class L>
void check_logsumexp_pick(int64_t rows, int64_t length, double rel) {
  const auto x = random_vector<T>(rows * length);
  std::vector<L> labels(static_cast<size_t>(rows));
  for (auto& l : labels) l = static_cast<L>(uniform(-1, length));  // -1 and length pick nothing
  std::vector<T> lse(labels.size()), picked(labels.size());
  cpu::logsumexp_pick_rows(x.data(), labels.data(), rows, length, lse.data(), picked.data());
  const auto d_x = upload(x);
  const auto d_labels = upload(labels);
  DeviceArray<T> d_lse{gpu::allocate(std::max<size_t>(lse.size(), 1) * sizeof(T)), lse.size()};
  DeviceArray<T> d_picked{gpu::allocate(std::max<size_t>(lse.size(), 1) * sizeof(T)), lse.size()};
  gpu::logsumexp_pick_rows(d_x.data(), d_labels.data(), rows, length, d_lse.data(), d_picked.data());
  const std::string what = cat(type_name<T>(), " ", rows, " rows of ", length);
  std::vector<double> want, tol;
  for (const T& v : lse) want.push_back(to_double(v)), tol.push_back(rel * std::abs(to_double(v)) + rel);
  expect_same("logsumexp_pick_rows lse " + what, difference(download(d_lse), want, tol));
  expect_same("logsumexp_pick_rows picked " + what + " (bit-identical)", difference(download(d_picked), picked));
}

void test_softmax_rows() {
  check_logsumexp_pick<float, int32_t>(37, 1000, 1e-6);
  check_logsumexp_pick<double, int64_t>(5, 50304, 1e-13);  // GPT-2's vocabulary
  check_logsumexp_pick<Eigen::bfloat16, int32_t>(64, 300, 1e-2);
  check_logsumexp_pick<float, int64_t>(3, 7, 1e-6);       // rows shorter than a warp
  check_softmax_rows<float>(37, 100, false, 1, 0, 1, 1.0, 1e-5);
  check_softmax_rows<float>(2 * 3 * 64, 64, true, 64, 0, 64, 0.125, 1e-5);  // (b, h, q, k), q == k
  check_softmax_rows<float>(2 * 5, 9, true, 5, 3, 8, 0.7, 1e-5);            // queries 3..7 of 8, 9 keys
  check_softmax_rows<double>(3 * 40, 1031, true, 40, 990, 1031, 0.3, 1e-12);  // the last 40 queries
  check_softmax_rows<float>(4 * 1024, 1024, true, 1024, 0, 1024, 0.125, 1e-5);  // GPT-2's rows
  check_softmax_rows<Eigen::bfloat16>(2 * 33, 33, true, 33, 0, 33, 1.0, 1e-2);
  check_softmax_rows<Eigen::half>(7, 3, false, 1, 0, 1, 2.0, 2e-3);
  check_softmax_rows<float>(0, 16, true, 1, 0, 1, 1.0, 0);  // nothing to do
}

// ---- fused normalization (layer_norm, rms_norm) ----

/// Within rel of each value plus rel / 10 of the largest (sums of terms of both signs).
template <class T>
std::string close_to(const std::vector<T>& got, const std::vector<T>& want, double rel) {
  double top = 0;
  for (const T& w : want) top = std::max(top, std::abs(to_double(w)));
  std::vector<double> want_d, tol;
  for (const T& w : want) {
    want_d.push_back(to_double(w));
    tol.push_back(rel * std::abs(to_double(w)) + rel * 0.1 * top + 1e-30);
  }
  return difference(got, want_d, tol);
}

/// The GPU's norm_rows and norm_rows_grad against the CPU's: y, the statistics, dx and g * xhat,
/// with and without the mean (layer_norm / rms_norm) and beta; dx and gx each also alone.
template <class T>
void check_norm_rows(int64_t rows, int64_t length, bool centered, bool with_beta, double rel) {
  using C = dax::detail::compute_t<T>;
  const dax::detail::NormRows geo{rows, length, 1e-5, centered};
  const auto x = random_vector<T>(rows * length), g = random_vector<T>(rows * length);
  const auto gamma = random_vector<T>(length), beta = random_vector<T>(length);
  const size_t n = x.size(), r = static_cast<size_t>(rows);
  std::vector<T> y(n), dx(n), gx(n);
  std::vector<C> mean(r), rstd(r);
  // rms_norm keeps no mean: null there, as the op passes it.
  cpu::norm_rows(x.data(), gamma.data(), with_beta ? beta.data() : nullptr, geo, y.data(),
                 centered ? mean.data() : nullptr, rstd.data());
  cpu::norm_rows_grad(x.data(), gamma.data(), mean.data(), rstd.data(), g.data(), geo, dx.data(), gx.data());
  const auto d_x = upload(x), d_g = upload(g), d_gamma = upload(gamma), d_beta = upload(beta);
  auto device = [](size_t count) { return DeviceArray<T>{gpu::allocate(std::max<size_t>(count, 1) * sizeof(T)), count}; };
  auto stats = [](size_t count) { return DeviceArray<C>{gpu::allocate(std::max<size_t>(count, 1) * sizeof(C)), count}; };
  const auto d_y = device(n), d_dx = device(n), d_gx = device(n), d_dx_alone = device(n), d_gx_alone = device(n);
  const auto d_mean = stats(r), d_rstd = stats(r);
  gpu::norm_rows(d_x.data(), d_gamma.data(), with_beta ? d_beta.data() : nullptr, geo, d_y.data(),
                 centered ? d_mean.data() : nullptr, d_rstd.data());
  const auto d_cpu_mean = upload(mean), d_cpu_rstd = upload(rstd);  // the backward from the CPU's statistics
  gpu::norm_rows_grad(d_x.data(), d_gamma.data(), d_cpu_mean.data(), d_cpu_rstd.data(), d_g.data(), geo, d_dx.data(),
                      d_gx.data());
  gpu::norm_rows_grad(d_x.data(), d_gamma.data(), d_cpu_mean.data(), d_cpu_rstd.data(), d_g.data(), geo,
                      d_dx_alone.data(), static_cast<T*>(nullptr));
  gpu::norm_rows_grad(d_x.data(), d_gamma.data(), d_cpu_mean.data(), d_cpu_rstd.data(), d_g.data(), geo,
                      static_cast<T*>(nullptr), d_gx_alone.data());
  const std::string what = cat(type_name<T>(), " ", rows, " rows of ", length, centered ? " layer_norm" : " rms_norm",
                               with_beta ? " with beta" : "");
  expect_same("norm_rows y " + what, close_to(download(d_y), y, rel));
  if (centered) expect_same("norm_rows mean " + what, close_to(download(d_mean), mean, rel));
  expect_same("norm_rows rstd " + what, close_to(download(d_rstd), rstd, rel));
  expect_same("norm_rows_grad dx " + what, close_to(download(d_dx), dx, rel));
  expect_same("norm_rows_grad g * xhat " + what, close_to(download(d_gx), gx, rel));
  expect_same("norm_rows_grad dx alone " + what, difference(download(d_dx_alone), download(d_dx)));
  expect_same("norm_rows_grad g * xhat alone " + what, difference(download(d_gx_alone), download(d_gx)));
}

void test_norm_rows() {
  check_norm_rows<float>(37, 768, true, true, 1e-5);        // GPT-2's d_model
  check_norm_rows<double>(5, 1031, true, true, 1e-12);
  check_norm_rows<double>(9, 7, false, false, 1e-12);       // rows shorter than a warp, rms_norm
  check_norm_rows<Eigen::bfloat16>(64, 768, true, true, 1e-2);
  check_norm_rows<Eigen::half>(3, 300, false, false, 2e-3);
  check_norm_rows<float>(0, 16, true, false, 0);            // nothing to do
}

// ---- AdamW over many tensors ----

/// The GPU's multi-tensor AdamW against the CPU's: more tensors than a launch takes (so two
/// batches), uneven sizes, an empty one, and one updated in place (outputs = inputs).
template <class T>
void check_adamw(double rel) {
  using C = dax::detail::compute_t<T>;
  const dax::detail::AdamWCoefficients<C> k{C(0.9), C(0.1), C(0.999), C(0.001), C(0.999), C(0.01), C(1.2), C(1e-8)};
  const int count = gpu::kAdamWBatch + 5;
  std::vector<std::vector<T>> p, g, m, v;
  std::vector<std::vector<T>> cpu_p, cpu_m, cpu_v;
  std::vector<dax::detail::AdamWTensor<T>> cpu_list, gpu_list;
  std::vector<DeviceArray<T>> keep;
  std::vector<std::array<size_t, 3>> out_at;  // where each tensor's outputs are in keep
  for (int t = 0; t < count; ++t) {
    const int64_t n = t == 3 ? 0 : uniform(1, 3000);
    p.push_back(random_vector<T>(n)), g.push_back(random_vector<T>(n)), m.push_back(random_vector<T>(n));
    v.push_back(random_vector<T>(n));
    for (auto& x : v.back()) x = static_cast<T>(std::abs(to_double(x)));  // a second moment is >= 0
  }
  for (int t = 0; t < count; ++t) {
    const size_t i = static_cast<size_t>(t), n = p[i].size();
    cpu_p.push_back(std::vector<T>(n)), cpu_m.push_back(std::vector<T>(n)), cpu_v.push_back(std::vector<T>(n));
    cpu_list.push_back({p[i].data(), g[i].data(), m[i].data(), v[i].data(), cpu_p[i].data(), cpu_m[i].data(),
                        cpu_v[i].data(), static_cast<int64_t>(n)});
    const size_t at = keep.size();
    keep.push_back(upload(p[i])), keep.push_back(upload(g[i])), keep.push_back(upload(m[i])), keep.push_back(upload(v[i]));
    const bool in_place = t % 7 == 1;
    if (!in_place)
      for (int j = 0; j < 3; ++j) keep.push_back(DeviceArray<T>{gpu::allocate(std::max<size_t>(n, 1) * sizeof(T)), n});
    out_at.push_back(in_place ? std::array<size_t, 3>{at, at + 2, at + 3} : std::array<size_t, 3>{at + 4, at + 5, at + 6});
    gpu_list.push_back({keep[at].data(), keep[at + 1].data(), keep[at + 2].data(), keep[at + 3].data(),
                        keep[out_at.back()[0]].data(), keep[out_at.back()[1]].data(), keep[out_at.back()[2]].data(),
                        static_cast<int64_t>(n)});
  }
  cpu::adamw_update(cpu_list.data(), count, k);
  gpu::adamw_update(gpu_list.data(), count, k);
  for (int t = 0; t < count; ++t) {
    const size_t i = static_cast<size_t>(t);
    const std::string what = cat(type_name<T>(), " tensor ", t, " of ", count, " (", p[i].size(), " elements",
                                 t % 7 == 1 ? ", in place)" : ")");
    expect_same("adamw_update p " + what, close_to(download(keep[out_at[i][0]]), cpu_p[i], rel));
    expect_same("adamw_update m " + what, close_to(download(keep[out_at[i][1]]), cpu_m[i], rel));
    expect_same("adamw_update v " + what, close_to(download(keep[out_at[i][2]]), cpu_v[i], rel));
  }
}

void test_adamw() {
  check_adamw<float>(1e-6);
  check_adamw<double>(1e-14);
  check_adamw<Eigen::bfloat16>(1e-2);
}

// ---- fused attention (dot_product_attention) ----

/// The GPU's attention forward and backward against the CPU's (backend/cpu/attention.hpp): the
/// tensor-core kernels for 16-bit types at head_dim 64 and 128 (partial tiles, q_len < k_len,
/// causal or not), a warp per row otherwise. The backward runs from the CPU's o and lse.
template <class T>
void check_attention(int64_t batch, int64_t q_len, int64_t k_len, int64_t heads, int64_t head_dim, bool causal,
                     double rel) {
  using C = dax::detail::compute_t<T>;
  dax::detail::AttentionShape geo;
  geo.batch = batch, geo.q_len = q_len, geo.k_len = k_len, geo.heads = heads, geo.head_dim = head_dim;
  geo.scale = 1.0 / std::sqrt(double(head_dim)), geo.causal = causal;
  const int64_t qn = batch * q_len * heads * head_dim, kn = batch * k_len * heads * head_dim;
  const auto q = random_vector<T>(qn), k = random_vector<T>(kn), v = random_vector<T>(kn), g = random_vector<T>(qn);
  std::vector<T> o(qn), dq(qn), dk(kn), dv(kn);
  std::vector<C> lse(static_cast<size_t>(batch * heads * q_len));
  cpu::attention_forward(q.data(), k.data(), v.data(), geo, o.data(), lse.data());
  cpu::attention_backward(q.data(), k.data(), v.data(), o.data(), lse.data(), g.data(), geo, dq.data(), dk.data(),
                          dv.data());
  const auto d_q = upload(q), d_k = upload(k), d_v = upload(v), d_g = upload(g), d_o_cpu = upload(o);
  const auto d_lse_cpu = upload(lse);
  DeviceArray<T> d_o{gpu::allocate(o.size() * sizeof(T)), o.size()}, d_dq{gpu::allocate(dq.size() * sizeof(T)), dq.size()},
      d_dk{gpu::allocate(dk.size() * sizeof(T)), dk.size()}, d_dv{gpu::allocate(dv.size() * sizeof(T)), dv.size()};
  DeviceArray<C> d_lse{gpu::allocate(lse.size() * sizeof(C)), lse.size()};
  gpu::attention_forward(d_q.data(), d_k.data(), d_v.data(), geo, d_o.data(), d_lse.data());
  gpu::attention_backward(d_q.data(), d_k.data(), d_v.data(), d_o_cpu.data(), d_lse_cpu.data(), d_g.data(), geo,
                          d_dq.data(), d_dk.data(), d_dv.data());
  const std::string what = cat(type_name<T>(), " batch ", batch, " q ", q_len, " k ", k_len, " heads ", heads,
                               " head_dim ", head_dim, causal ? " causal" : "",
                               gpu::fused_attention_is_fast<T>(head_dim) ? " (tensor cores)" : " (a warp a row)");
  expect_same("attention o " + what, close_to(download(d_o), o, rel));
  expect_same("attention lse " + what, close_to(download(d_lse), lse, rel * 0.1));
  expect_same("attention dq " + what, close_to(download(d_dq), dq, rel));
  expect_same("attention dk " + what, close_to(download(d_dk), dk, rel));
  expect_same("attention dv " + what, close_to(download(d_dv), dv, rel));
}

void test_attention() {
  check_attention<float>(2, 37, 37, 3, 20, true, 1e-4);
  check_attention<float>(2, 5, 9, 1, 64, false, 1e-4);
  check_attention<double>(1, 70, 90, 2, 33, true, 1e-11);
  check_attention<Eigen::bfloat16>(1, 33, 33, 2, 48, true, 3e-2);      // 16-bit, no tensor-core shape
  check_attention<Eigen::bfloat16>(2, 100, 130, 2, 64, true, 3e-2);    // partial tiles, q_len < k_len
  check_attention<Eigen::half>(1, 192, 192, 3, 128, true, 5e-3);
  check_attention<Eigen::bfloat16>(1, 65, 70, 1, 128, false, 3e-2);
  check_attention<Eigen::bfloat16>(1, 1024, 1024, 2, 64, true, 3e-2);  // GPT-2's heads
}

// ---- generate ----

template <class T, class F>
void check_generate(const Shape& shape, const Box& box, F f) {
  std::vector<T> want(static_cast<size_t>(dax::numel(box)));
  dax::for_each_in_box(shape, box, [&](int64_t k, int64_t flat) { want[k] = f(static_cast<uint64_t>(flat)); });
  DeviceArray<T> d{gpu::allocate(std::max<size_t>(want.size(), 1) * sizeof(T)), want.size()};
  gpu::generate(d.data(), shape, box, f);
  expect_same(cat("generate ", dax::to_string(box), " of ", dax::to_string(shape), " (bit-identical)"),
              difference(download(d), want));
}

void test_generate() {
  const PhiloxBits bits{0x12345678u, 0x9abcdef0u};
  const Shape s{13, 17, 19};
  check_generate<uint32_t>(s, {{2, 11}, {0, 17}, {5, 19}}, bits);
  check_generate<float>(s, dax::full_box(s), PhiloxUniform{bits});
  check_generate<float>(s, {{12, 13}, {3, 4}, {0, 19}}, PhiloxUniform{bits});
  check_generate<uint32_t>({1000003}, {{1000, 1000003}}, bits);
  check_generate<float>({}, {}, PhiloxUniform{bits});
  check_generate<float>(s, {{2, 2}, {0, 17}, {0, 19}}, PhiloxUniform{bits});
}

// ---- GEMM ----

/// c = a @ b on both sides; floating types compared with |gpu - cpu| <= rel * k * max(1, |cpu|).
/// `ta` / `tb`: the operand is stored with its last two dimensions swapped (a transpose flag); the
/// CPU side's flags are checked against loops by the MPI tests (tests/mpi/transpose_gemm_test.cpp).
template <class T>
void check_gemm(const Shape& a_shape, const Shape& b_shape, const Shape& c_shape, double rel, bool ta = false,
                bool tb = false) {
  const auto a = random_vector<T>(dax::numel(a_shape)), b = random_vector<T>(dax::numel(b_shape));
  auto want = random_vector<T>(dax::numel(c_shape));  // garbage, overwritten by both
  const auto d_a = upload(a), d_b = upload(b), d_c = upload(want);
  const int64_t k = a_shape.back();
  const std::string what =
      cat("batched_gemm<", type_name<T>(), "> ", dax::to_string(a_shape), " @ ", dax::to_string(b_shape),
          dax::detail::matmul_precision() == dax::MatmulPrecision::high ? " (TF32)" : "", ta ? " A stored transposed" : "",
          tb ? " B stored transposed" : "");
  gpu::batched_gemm(d_a.data(), a_shape, d_b.data(), b_shape, d_c.data(), c_shape, ta, tb);
  const auto got = download(d_c);
  if constexpr (std::is_integral_v<T>) {
    cpu::batched_gemm(a.data(), a_shape, b.data(), b_shape, want.data(), c_shape, ta, tb);
    expect_same(what, difference(got, want));
  } else {
    // 16-bit types: the reference multiplies the same values in float.
    using Ref = std::conditional_t<std::is_same_v<T, double>, double, float>;
    std::vector<Ref> ra(a.size()), rb(b.size()), rc(want.size());
    for (size_t i = 0; i < a.size(); ++i) ra[i] = static_cast<Ref>(to_double(a[i]));
    for (size_t i = 0; i < b.size(); ++i) rb[i] = static_cast<Ref>(to_double(b[i]));
    cpu::batched_gemm(ra.data(), a_shape, rb.data(), b_shape, rc.data(), c_shape, ta, tb);
    std::vector<double> ref(rc.begin(), rc.end()), tol(rc.size());
    for (size_t i = 0; i < rc.size(); ++i) tol[i] = rel * std::max<double>(k, 1) * std::max(1.0, std::abs(ref[i]));
    expect_same(what, difference(got, ref, tol));
  }
}

template <class T>
void test_gemm(double rel) {
  const int64_t m = 37, k = 53, n = 29;
  check_gemm<T>({m, k}, {k, n}, {m, n}, rel);
  check_gemm<T>({1, 1}, {1, 1}, {1, 1}, rel);
  check_gemm<T>({4, m, k}, {4, k, n}, {4, m, n}, rel);        // equal batches: one strided call
  check_gemm<T>({4, m, k}, {k, n}, {4, m, n}, rel);           // b broadcast (stride 0)
  check_gemm<T>({m, k}, {3, k, n}, {3, m, n}, rel);           // a broadcast
  check_gemm<T>({3, 1, m, k}, {4, k, n}, {3, 4, m, n}, rel);  // both broadcast: host loop
  check_gemm<T>({2, 1, 3, m, k}, {2, 5, 1, k, n}, {2, 5, 3, m, n}, rel);
  check_gemm<T>({64, 128}, {128, 96}, {64, 96}, rel);
  check_gemm<T>({m, 0}, {0, n}, {m, n}, rel);           // k == 0: zeros
  check_gemm<T>({2, 0, k}, {2, k, n}, {2, 0, n}, rel);  // m == 0: nothing
  // Transposed operands (x.T() views): CUBLAS_OP_T with the other leading dimension, no copy.
  for (const auto& [ta, tb] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
    check_gemm<T>({m, k}, {k, n}, {m, n}, rel, ta, tb);
    check_gemm<T>({4, m, k}, {4, k, n}, {4, m, n}, rel, ta, tb);
    check_gemm<T>({3, 1, m, k}, {4, k, n}, {3, 4, m, n}, rel, ta, tb);
  }
}

}  // namespace

int main() {
  dax::test::gpus_or_skip("the CUDA kernel tests");
  try {
    gpu::context().init(0);
  } catch (const std::exception& e) {
    std::printf("FAIL device setup: %s\n", e.what());
    return 1;
  }
  std::printf("GPU %d of %d\n", gpu::context().device(), gpu::visible_gpus());

  run("memory", test_memory);
  run("copy_region<float>", [] { test_copy<float>(); });
  run("copy_region<double>", [] { test_copy<double>(); });
  run("copy_region<int32_t>", [] { test_copy<int32_t>(); });
  run("copy_region<half>", [] { test_copy<Eigen::half>(); });
  run("copy_region edges and fill", test_copy_edges);
  run("broadcast_map", test_elementwise);
  run("libm functors<float>", test_libm<float>);
  run("libm functors<double>", test_libm<double>);
  run("reduce_dims", test_reduce);
  run("arg_reduce", test_arg_reduce);
  run("permute", test_permute);
  run("generate", test_generate);
  run("gather_rows / scatter_add_rows", test_gather);
  run("softmax_rows / softmax_rows_grad", test_softmax_rows);
  run("norm_rows / norm_rows_grad", test_norm_rows);
  run("adamw_update", test_adamw);
  run("attention_forward / attention_backward", test_attention);
  run("batched_gemm<float>", [] { test_gemm<float>(1e-5); });
  run("batched_gemm<double>", [] { test_gemm<double>(1e-12); });
  run("batched_gemm<int32_t>", [] { test_gemm<int32_t>(0); });
  run("batched_gemm<int64_t>", [] { test_gemm<int64_t>(0); });
  run("batched_gemm<half>", [] { test_gemm<Eigen::half>(2e-3); });  // float accumulation, half rounding
  run("batched_gemm<bfloat16>", [] { test_gemm<Eigen::bfloat16>(1e-2); });
  run("batched_gemm<float> TF32", [] {
    dax::set_matmul_precision(dax::MatmulPrecision::high);
    try {
      check_gemm<float>({4, 64, 128}, {128, 96}, {4, 64, 96}, 2e-3);
    } catch (...) {
      dax::set_matmul_precision(dax::MatmulPrecision::highest);
      throw;
    }
    dax::set_matmul_precision(dax::MatmulPrecision::highest);
  });

  run("shutdown", [] {
    gpu::synchronize();
    gpu::check_cuda(cudaGetLastError(), "cudaGetLastError at the end");
    gpu::device_allocator()->release_cached();
    gpu::pinned_allocator()->release_cached();
    gpu::context().shutdown();
    gpu::context().shutdown();  // idempotent
    report(!gpu::context().initialized(), "context shutdown (twice)");
  });

  if (failures) {
    std::printf("%d check(s) FAILED\n", failures);
    return 1;
  }
  std::printf("all CUDA kernel checks passed\n");
  return 0;
}
