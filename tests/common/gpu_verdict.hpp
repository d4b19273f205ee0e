// Whether a GPU test runs, skips or fails, from what CUDA's query found and what the system shows
// (plain C++: the unit tests check it without a GPU). A test skips only where no GPU is visible:
// `nvidia-smi -L` lists none and /dev/nvidia0 does not exist. A query that finds no GPU while
// one is visible is a failure with CUDA's reason, never a skip (docs/gpu.md).
#pragma once

#include <cstdio>
#include <string>
#include <sys/stat.h>

#include <dax/backend/gpu_query.hpp>

namespace dax::test {

struct GpuVerdict {
  enum Kind { run, skip, fail } kind;
  std::string message;  ///< the line the test prints ("SKIPPED: ..." or "FAILED: ...")
};

/// `system_gpu`: how the system shows a GPU ("" when it shows none); `what`: the tests that need one.
inline GpuVerdict gpu_verdict(const dax::detail::GpuQuery& q, const std::string& system_gpu, const std::string& what) {
  const std::string found = dax::detail::describe_gpu_query(q);
  if (q.count > 0) return {GpuVerdict::run, found};
  if (!system_gpu.empty())
    return {GpuVerdict::fail, "FAILED: a GPU is visible (" + system_gpu + ") but " + found + "; " + what +
                                  " must not skip on this machine"};
  return {GpuVerdict::skip, "SKIPPED: " + found + "; " + what + " need a GPU"};
}

/// How this system shows a GPU: /dev/nvidia0, or the first line of `nvidia-smi -L` that names
/// one; "" when neither does.
inline std::string system_gpu_evidence() {
  struct stat st {};
  if (::stat("/dev/nvidia0", &st) == 0) return "/dev/nvidia0 exists";
  std::string line;
  if (FILE* p = ::popen("nvidia-smi -L 2>/dev/null", "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr) {
      const std::string l(buf);
      if (line.empty() && l.rfind("GPU ", 0) == 0) line = "nvidia-smi -L lists " + l.substr(0, l.find_last_not_of("\r\n") + 1);
    }
    ::pclose(p);
  }
  return line;
}

}  // namespace dax::test
