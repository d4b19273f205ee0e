// The words for a GPU query (include/dax/backend/gpu_query.hpp) and the run / skip / fail verdict
// of the GPU tests (tests/common/gpu_verdict.hpp): CUDA's own error reaches the message, a query
// that fails is never reported as a plain "no GPU", and a test never skips where a GPU is visible.
#include <catch2/catch.hpp>

#include <dax/backend/gpu_query.hpp>
#include <dax/backend/choice.hpp>

#include "../common/error_of.hpp"
#include "../common/gpu_verdict.hpp"

using dax::detail::describe_gpu_query;
using dax::detail::GpuQuery;
using dax::test::gpu_verdict;
using dax::test::GpuVerdict;

namespace {

GpuQuery failed(const std::string& name, const std::string& text) {
  GpuQuery q;
  q.call = "cudaGetDeviceCount";
  q.error_name = name;
  q.error_text = text;
  return q;
}

GpuQuery found(int count) {
  GpuQuery q;
  q.call = "cudaGetDeviceCount";
  q.count = count;
  return q;
}

}  // namespace

TEST_CASE("a failed GPU query says CUDA's error and what to do", "[gpu]") {
  CHECK(describe_gpu_query(failed("cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version")) ==
        "no usable CUDA device: cudaGetDeviceCount failed with cudaErrorInsufficientDriver (CUDA driver version is "
        "insufficient for CUDA runtime version): the NVIDIA driver is missing, or older than the CUDA runtime this "
        "program was built with: install or update the driver (nvidia-smi shows its version)");
  CHECK(describe_gpu_query(failed("cudaErrorNoDevice", "no CUDA-capable device is detected")) ==
        "no usable CUDA device: cudaGetDeviceCount failed with cudaErrorNoDevice (no CUDA-capable device is detected): "
        "the driver sees no CUDA-capable device");
  // An error without a hint still carries CUDA's own words.
  CHECK(describe_gpu_query(failed("cudaErrorUnknown", "unknown error")) ==
        "no usable CUDA device: cudaGetDeviceCount failed with cudaErrorUnknown (unknown error)");
  GpuQuery hidden = failed("cudaErrorNoDevice", "no CUDA-capable device is detected");
  hidden.visible_devices_set = true;
  hidden.visible_devices = "";
  CHECK(describe_gpu_query(hidden).find("; CUDA_VISIBLE_DEVICES=''") != std::string::npos);
}

TEST_CASE("a GPU query that succeeds says how many it found", "[gpu]") {
  CHECK(describe_gpu_query(found(0)) == "no CUDA device visible: cudaGetDeviceCount found none");
  CHECK(describe_gpu_query(found(1)) == "1 CUDA device visible");
  GpuQuery two = found(2);
  two.visible_devices_set = true;
  two.visible_devices = "0,1";
  CHECK(describe_gpu_query(two) == "2 CUDA devices visible; CUDA_VISIBLE_DEVICES='0,1'");
}

TEST_CASE("DAX_BACKEND=cuda without a usable GPU names CUDA's error", "[gpu]") {
  const GpuQuery q = failed("cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version");
  if (dax::detail::compiled_with_cuda()) {
    CHECK(dax::test::error_of([&] { dax::detail::choose_backend("cuda", q); }).rfind(
              "DAX_BACKEND=cuda, but no usable CUDA device: cudaGetDeviceCount failed with cudaErrorInsufficientDriver", 0) == 0);
  } else {
    CHECK(dax::test::error_of([&] { dax::detail::choose_backend("cuda", q); }).rfind(
              "DAX_BACKEND=cuda, but this program was compiled without CUDA", 0) == 0);
  }
  CHECK(dax::detail::choose_backend("", q) == dax::Backend::cpu);  // unset: the CPU, as on any machine without one
  CHECK(dax::detail::choose_backend("cpu", found(4)) == dax::Backend::cpu);
}

TEST_CASE("GPU tests run with a GPU, skip without one, and fail when one is visible but unusable", "[gpu]") {
  const GpuQuery driver = failed("cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version");
  const GpuVerdict run = gpu_verdict(found(1), "", "the CUDA tests");
  CHECK(run.kind == GpuVerdict::run);

  const GpuVerdict skip = gpu_verdict(driver, "", "the CUDA tests");
  CHECK(skip.kind == GpuVerdict::skip);
  CHECK(skip.message == "SKIPPED: " + describe_gpu_query(driver) + "; the CUDA tests need a GPU");

  const GpuVerdict fail = gpu_verdict(driver, "nvidia-smi -L lists GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)", "the CUDA tests");
  CHECK(fail.kind == GpuVerdict::fail);
  CHECK(fail.message == "FAILED: a GPU is visible (nvidia-smi -L lists GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)) but " +
                            describe_gpu_query(driver) + "; the CUDA tests must not skip on this machine");
  // CUDA finding none while /dev/nvidia0 exists (CUDA_VISIBLE_DEVICES hiding it, say) fails too.
  CHECK(gpu_verdict(found(0), "/dev/nvidia0 exists", "the CUDA tests").kind == GpuVerdict::fail);
}
