// The CUDA kernels on dax::half arrays of more than 2^31 elements (past any int index, 4 GiB) and
// of more than 2^32 (past the kernels' uint32 fast path, 8 GiB): an elementwise map (flat and
// broadcast), a sum over either dimension, and transposes (tiled, with more than 65535 tile rows,
// and the general permute). Inputs are integer patterns exact in half, so every expectation is
// exact and computed on the host without a pass over the array: windows of the output around the
// 2^31 and 2^32 boundaries, at both ends and at random places are compared element by element,
// and every sum against its count of residues.
// Standalone (no runtime, no MPI): exit 77 without a GPU; a case is skipped, saying so, only when
// cudaMemGetInfo reports too little free memory for it.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <dax/backend/cuda/backend.cuh>
#include <dax/core/float16.hpp>
#include <dax/core/shape.hpp>

#include "skip_without_gpu.hpp"

namespace gpu = dax::detail::cuda;
using Half = dax::half;  // not `half`: cuda_fp16.h declares one
using dax::Shape;
using dax::detail::cat;

namespace {

int failures = 0, ran = 0, skipped = 0;

void report(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

constexpr int64_t two_to(int e) { return int64_t{1} << e; }

double gib(double bytes) { return bytes / double(two_to(30)); }

// ---- patterns and ops: integers small enough to be exact in half (|v| <= 2048) and in float sums ----

/// flat % period + offset.
struct Cycle {
  int64_t period, offset;
  DAX_HOST_DEVICE Half operator()(uint64_t flat) const {
    return Half(static_cast<float>(static_cast<int64_t>(flat % static_cast<uint64_t>(period)) + offset));
  }
};
/// (3 r + c) % 17 + 1 at (r, c) of a (rows, cols) array: 1..17, so a lost or repeated element
/// always changes a sum; every row and column sees every residue.
struct Grid17 {
  int64_t cols;
  DAX_HOST_DEVICE Half operator()(uint64_t flat) const {
    const auto c = static_cast<int64_t>(flat % static_cast<uint64_t>(cols));
    const auto r = static_cast<int64_t>(flat / static_cast<uint64_t>(cols));
    return Half(static_cast<float>((3 * r + c) % 17 + 1));
  }
};
struct TwicePlusOne {
  DAX_HOST_DEVICE Half operator()(Half x) const { return Half(2.0f * static_cast<float>(x) + 1.0f); }
};
struct AddHalf {
  DAX_HOST_DEVICE Half operator()(Half x, Half y) const { return Half(static_cast<float>(x) + static_cast<float>(y)); }
};
struct SumFloat {
  DAX_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};

// ---- memory ----

template <class T>
struct DeviceArray {
  std::shared_ptr<dax::detail::Buffer> buffer;
  int64_t count = 0;
  T* data() const { return static_cast<T*>(buffer->data()); }
};

template <class T>
DeviceArray<T> allocate(int64_t count) {
  return {gpu::allocate(static_cast<size_t>(count) * sizeof(T)), count};
}

/// Whether the GPU has `bytes` free for the case `what` (after handing back every cached block);
/// if not, says so and counts the case as skipped. Headroom for cuBLAS, scratch and fragmentation.
bool fits(const std::string& what, double bytes) {
  gpu::synchronize();
  gpu::device_allocator()->release_cached();
  size_t free_bytes = 0, total_bytes = 0;
  DAX_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const double need = bytes + double(two_to(29));
  if (double(free_bytes) >= need) return true;
  std::printf("SKIPPED %s: needs %.2f GiB of device memory, cudaMemGetInfo reports %.2f GiB free of %.2f GiB\n",
              what.c_str(), gib(need), gib(double(free_bytes)), gib(double(total_bytes)));
  ++skipped;
  return false;
}

/// Runs one case, timed; an exception fails it with its message.
void run(const std::string& what, double bytes, const std::function<void()>& body) {
  try {
    if (!fits(what, bytes)) return;
    ++ran;
    const auto start = std::chrono::steady_clock::now();
    body();
    gpu::synchronize();
    std::printf("  (%s: %.1f s)\n", what.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  } catch (const std::exception& e) {
    report(false, cat(what, ": threw ", e.what()));
  }
}

// ---- checks ----

std::mt19937_64 rng(20261123);

/// Starts of the windows of `width` elements checked in an array of n: both ends, around 2^31
/// and 2^32, and a few random places.
std::vector<int64_t> window_starts(int64_t n, int64_t width) {
  std::vector<int64_t> starts{0, n - width};
  for (int64_t boundary : {two_to(31), two_to(32)})
    if (boundary < n) starts.push_back(boundary - width / 2);
  for (int k = 0; k < 4; ++k) starts.push_back(std::uniform_int_distribution<int64_t>(0, n - width)(rng));
  for (auto& s : starts) s = std::clamp<int64_t>(s, 0, std::max<int64_t>(n - width, 0));
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  return starts;
}

/// Compares windows of device array `got` (n elements) with want(flat), exactly.
void check_windows(const std::string& what, const Half* got, int64_t n, const std::function<float(int64_t)>& want) {
  const int64_t width = std::min<int64_t>(n, two_to(20));
  std::vector<Half> host(static_cast<size_t>(width));
  int64_t checked = 0;
  for (int64_t start : window_starts(n, width)) {
    gpu::copy_to_host(host.data(), got + start, static_cast<size_t>(width) * sizeof(Half));
    for (int64_t k = 0; k < width; ++k) {
      const float g = static_cast<float>(host[static_cast<size_t>(k)]), w = want(start + k);
      if (!(g == w)) {
        report(false, cat(what, ": element ", start + k, " of ", n, " is ", g, ", expected ", w));
        return;
      }
    }
    checked += width;
  }
  report(true, cat(what, " (", checked, " elements of ", n, " checked, around 2^31, 2^32, both ends and random)"));
}

// ---- cases ----

/// out = 2 x + 1 on the flat path, then out = x + bias[c] with bias (cols,) broadcast over rows: the
/// strided path, indexed in uint32 below 2^32 elements and in int64 past it.
void elementwise_case(int64_t rows, int64_t cols) {
  const Shape shape{rows, cols};
  const int64_t n = rows * cols;
  const Cycle pattern{2039, -1019}, bias_pattern{5, 1};
  const auto x = allocate<Half>(n), out = allocate<Half>(n), bias = allocate<Half>(cols);
  gpu::generate(x.data(), shape, dax::full_box(shape), pattern);
  gpu::generate(bias.data(), Shape{cols}, dax::full_box(Shape{cols}), bias_pattern);
  const auto dense = dax::detail::row_major_strides(shape);

  gpu::broadcast_map(out.data(), shape, {dense}, TwicePlusOne{}, static_cast<const Half*>(x.data()));
  check_windows(cat("elementwise 2x+1 over ", rows, " x ", cols), out.data(), n, [&](int64_t flat) {
    return 2.0f * static_cast<float>(pattern(static_cast<uint64_t>(flat))) + 1.0f;
  });

  gpu::broadcast_map(out.data(), shape, {dense, std::vector<int64_t>{0, 1}}, AddHalf{},
                     static_cast<const Half*>(x.data()), static_cast<const Half*>(bias.data()));
  check_windows(cat("elementwise x + bias[c] broadcast over ", rows, " x ", cols), out.data(), n, [&](int64_t flat) {
    return static_cast<float>(pattern(static_cast<uint64_t>(flat))) +
           static_cast<float>(bias_pattern(static_cast<uint64_t>(flat % cols)));
  });
}

/// Sums over the columns (a block per row) and over the rows (a thread per column), accumulated in
/// float, every output checked. The expectation counts residues: row r sums ((3r + c) % 17 + 1)
/// over c, which depends only on how many c < cols fall in each class mod 17.
void reduce_case(int64_t rows, int64_t cols) {
  const Shape shape{rows, cols};
  const int64_t n = rows * cols;
  const auto x = allocate<Half>(n);
  gpu::generate(x.data(), shape, dax::full_box(shape), Grid17{cols});
  auto classes = [](int64_t count) {
    std::vector<int64_t> k(17, count / 17);
    for (int64_t i = 0; i < count % 17; ++i) ++k[static_cast<size_t>(i)];
    return k;
  };
  const std::vector<int64_t> col_class = classes(cols), row_class = classes(rows);

  const auto row_sums = allocate<float>(rows), col_sums = allocate<float>(cols);
  gpu::fill(row_sums.data(), rows, 0.0f);
  gpu::fill(col_sums.data(), cols, 0.0f);
  gpu::reduce_dims(static_cast<const Half*>(x.data()), shape, {false, true}, row_sums.data(), SumFloat{});
  gpu::reduce_dims(static_cast<const Half*>(x.data()), shape, {true, false}, col_sums.data(), SumFloat{});

  auto check = [](const std::string& what, const DeviceArray<float>& got, const std::function<int64_t(int64_t)>& want) {
    std::vector<float> host(static_cast<size_t>(got.count));
    gpu::copy_to_host(host.data(), got.data(), host.size() * sizeof(float));
    for (int64_t i = 0; i < got.count; ++i) {
      if (host[static_cast<size_t>(i)] != static_cast<float>(want(i))) {
        report(false, cat(what, ": output ", i, " is ", host[static_cast<size_t>(i)], ", expected ", want(i)));
        return;
      }
    }
    report(true, cat(what, " (all ", got.count, " outputs)"));
  };
  check(cat("sum over dim 1 of ", rows, " x ", cols, " half"), row_sums, [&](int64_t r) {
    int64_t s = 0;
    for (int64_t k = 0; k < 17; ++k) s += col_class[static_cast<size_t>(k)] * ((3 * r + k) % 17 + 1);
    return s;
  });
  check(cat("sum over dim 0 of ", rows, " x ", cols, " half"), col_sums, [&](int64_t c) {
    int64_t s = 0;
    for (int64_t k = 0; k < 17; ++k) s += row_class[static_cast<size_t>(k)] * ((3 * k + c) % 17 + 1);
    return s;
  });
}

/// (rows, cols) -> (cols, rows): out[c, r] = x[r, c]. Wide sides take the tiled kernel (with more
/// than 65535 tile rows its grid's y is clamped and looped); 3 columns take the general permute.
void transpose_case(int64_t rows, int64_t cols) {
  const Shape shape{rows, cols};
  const int64_t n = rows * cols;
  const Cycle pattern{2039, -1019};
  const auto x = allocate<Half>(n), out = allocate<Half>(n);
  gpu::generate(x.data(), shape, dax::full_box(shape), pattern);
  gpu::permute(static_cast<const Half*>(x.data()), shape, {1, 0}, out.data());
  const char* kernel = cols >= 16 && rows >= 16 ? "tiled" : "general";
  check_windows(cat("transpose (", kernel, ") of ", rows, " x ", cols), out.data(), n, [&](int64_t o) {
    const int64_t c = o / rows, r = o - c * rows;
    return static_cast<float>(pattern(static_cast<uint64_t>(r * cols + c)));
  });
}

}  // namespace

int main() {
  dax::test::gpus_or_skip("the large-array CUDA tests");
  try {
    gpu::context().init(0);
  } catch (const std::exception& e) {
    std::printf("FAIL device setup: %s\n", e.what());
    return 1;
  }
  std::printf("GPU %d of %d\n", gpu::context().device(), gpu::visible_gpus());
  constexpr double h = sizeof(Half);

  // Past 2^31 elements: every int index would have wrapped.
  run("elementwise, 2^31+ elements", 2 * h * 32769.0 * 65539, [] { elementwise_case(32769, 65539); });
  run("reduction, 2^31+ elements", h * 32769.0 * 65539, [] { reduce_case(32769, 65539); });
  run("tiled transpose, 2^31+ elements, 98305 tile rows", 2 * h * 3145733.0 * 700,
      [] { transpose_case(3145733, 700); });
  run("general transpose, 2^31+1 elements", 2 * h * 715827883.0 * 3, [] { transpose_case(715827883, 3); });
  // Past 2^32 elements: the kernels switch from uint32 to int64 indices.
  run("elementwise, 2^32+ elements", 2 * h * 65537.0 * 65539, [] { elementwise_case(65537, 65539); });
  run("reduction, 2^32+ elements", h * 65537.0 * 65539, [] { reduce_case(65537, 65539); });
  run("tiled transpose, 2^32+ elements", 2 * h * 65537.0 * 65539, [] { transpose_case(65537, 65539); });
  run("general transpose, 2^32+2 elements", 2 * h * 1431655766.0 * 3, [] { transpose_case(1431655766, 3); });

  try {
    gpu::synchronize();
    gpu::check_cuda(cudaGetLastError(), "cudaGetLastError at the end");
    gpu::device_allocator()->release_cached();
    gpu::context().shutdown();
  } catch (const std::exception& e) {
    report(false, cat("shutdown: ", e.what()));
  }

  std::printf("%d case(s) run, %d skipped for lack of device memory, %d check(s) failed\n", ran, skipped, failures);
  if (failures) return 1;
  if (ran == 0) {
    std::printf("SKIPPED: no case fits in this GPU's free memory\n");
    return 77;
  }
  return 0;
}
