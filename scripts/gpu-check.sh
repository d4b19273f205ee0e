#!/usr/bin/env bash
# On a GPU machine, from anywhere: build dax with CUDA (Release, build-gpu/), run the CUDA tests,
# the CUDA benchmark and PyTorch's side of its MLP step, and record nvidia-smi. Every step writes
# OUTDIR/<step>.log; OUTDIR/summary.txt says pass/fail per step. A failed step does not stop the
# steps that do not depend on it; the exit code is non-zero if any step failed.
#   scripts/gpu-check.sh OUTDIR
# On a bare GPU machine, carry Debian's MPI/Catch2/Eigen along (../shared/device/README.md): this
# script sources .devdeps/env.sh itself when it exists and mpicxx is not on the PATH.
# Environment: DAX_GPU_BUILD (build directory, default build-gpu), DAX_GPU_TARGETS (build only these
# targets instead of everything, e.g. "dax_cuda_smoke dax_cuda_kernels_test dax_cuda_transport_test
# dax_cuda_mpi_tests cuda_bench"; ctest then reports the cuda-labelled tests whose programs were not
# built, such as the examples' .cuda runs, as Not Run), DAX_CMAKE_ARGS (more configure arguments).
set -uo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$1" || exit 2
OUT=$(cd "$1" && pwd)
cd "$ROOT" || exit 2

if ! command -v mpicxx >/dev/null 2>&1 && [ -f "$ROOT/.devdeps/env.sh" ]; then
  # shellcheck disable=SC1091
  source "$ROOT/.devdeps/env.sh"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
BUILD=${DAX_GPU_BUILD:-$ROOT/build-gpu}
JOBS=$(nproc 2>/dev/null || echo 2)

SUMMARY=$OUT/summary.txt
{
  echo "dax gpu-check $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (+ local changes)')"
  echo "build $BUILD, logs in $OUT"
  echo
} >"$SUMMARY"
failed=0

# record NAME STATUS SECONDS [NOTE]: one summary line; FAIL marks the run failed.
record() {
  local line
  line=$(printf '%-12s %-5s %5ss  %s' "$1" "$2" "$3" "${4:-}")
  echo "$line" >>"$SUMMARY"
  echo "gpu-check: $line"
  [ "$2" = FAIL ] && failed=1
  return 0
}

# run NAME CMD...: runs CMD with its output in OUT/NAME.log; sets RC and SECS.
run() {
  local name=$1 start
  shift
  start=$(date +%s)
  echo "gpu-check: $name: $*"
  {
    echo "\$ $*"
    "$@"
  } >"$OUT/$name.log" 2>&1
  RC=$?
  SECS=$(($(date +%s) - start))
}

# ---- configure ----
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DDAX_ENABLE_CUDA=ON -DDAX_BUILD_TESTS=ON -DDAX_BUILD_EXAMPLES=ON
  -DDAX_BUILD_BENCHMARKS=ON)
[ -x "$(command -v nvcc)" ] && cmake_args+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
if [ ! -f "$BUILD/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  cmake_args+=(-G Ninja)
fi
# NCCL from PyTorch's wheel (env.sh sets DAX_NCCL_WHEEL_DIR) when the toolkit has none.
nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
if [ ! -f "$nvcc_dir/../include/nccl.h" ] && [ ! -f /usr/include/nccl.h ] && [ -n "${DAX_NCCL_WHEEL_DIR:-}" ] &&
  [ -f "$DAX_NCCL_WHEEL_DIR/include/nccl.h" ]; then
  nccl_lib=
  for f in "$DAX_NCCL_WHEEL_DIR"/lib/libnccl.so*; do
    [ -e "$f" ] && nccl_lib=$f && break
  done
  if [ -n "$nccl_lib" ]; then
    cmake_args+=("-DDAX_NCCL_INCLUDE_DIR=$DAX_NCCL_WHEEL_DIR/include" "-DDAX_NCCL_LIBRARY=$nccl_lib")
    export LD_LIBRARY_PATH=$DAX_NCCL_WHEEL_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
fi
# shellcheck disable=SC2086
run configure cmake -S "$ROOT" -B "$BUILD" "${cmake_args[@]}" ${DAX_CMAKE_ARGS:-}
if [ $RC -eq 0 ]; then record configure PASS $SECS; else record configure FAIL $SECS "exit $RC"; fi
configured=$RC

# ---- build ----
built=1
if [ $configured -eq 0 ]; then
  # shellcheck disable=SC2086
  run build cmake --build "$BUILD" -j "$JOBS" ${DAX_GPU_TARGETS:+--target $DAX_GPU_TARGETS}
  if [ $RC -eq 0 ]; then
    record build PASS $SECS "${DAX_GPU_TARGETS:-all targets}"
    built=0
  else
    record build FAIL $SECS "exit $RC"
  fi
else
  record build FAIL 0 "not run: configure failed"
fi

# ---- CUDA tests ----
if [ $built -eq 0 ]; then
  run ctest ctest --test-dir "$BUILD" -L cuda --output-on-failure
  tests=$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$OUT/ctest.log" | tail -n 1)
  skipped=$(grep -c '\*\*\*Skipped' "$OUT/ctest.log")
  note="${tests:-no test summary}${skipped:+, $skipped skipped}"
  if [ $RC -ne 0 ]; then
    record ctest FAIL $SECS "exit $RC; $note"
  elif grep -q 'No tests were found' "$OUT/ctest.log"; then
    record ctest FAIL $SECS "no tests labelled cuda"
  elif [ "$skipped" != 0 ]; then
    record ctest SKIP $SECS "$note"
  else
    record ctest PASS $SECS "$note"
  fi
else
  record ctest FAIL 0 "not run: build failed"
fi

# ---- CUDA benchmark ----
bench=$BUILD/benchmarks/cuda_bench
if [ $built -eq 0 ] && [ -x "$bench" ]; then
  run cuda_bench "$bench" --json "$OUT/cuda_bench.json"
  if [ $RC -ne 0 ]; then
    record cuda_bench FAIL $SECS "exit $RC"
  elif grep -q '^SKIPPED' "$OUT/cuda_bench.log"; then
    record cuda_bench SKIP $SECS "$(grep -m 1 '^SKIPPED' "$OUT/cuda_bench.log")"
  else
    record cuda_bench PASS $SECS "$(grep -m 1 'targets met' "$OUT/cuda_bench.log" | sed 's/^# *//')"
  fi
elif [ $built -eq 0 ]; then
  record cuda_bench FAIL 0 "$bench was not built (DAX_GPU_TARGETS without cuda_bench?)"
else
  record cuda_bench FAIL 0 "not run: build failed"
fi

# ---- PyTorch's side of the MLP step ----
if command -v python3 >/dev/null 2>&1; then
  run mlp_torch python3 "$ROOT/benchmarks/mlp_torch.py" --json "$OUT/mlp_torch.json"
  if [ $RC -ne 0 ]; then
    record mlp_torch FAIL $SECS "exit $RC"
  elif grep -q '^SKIPPED' "$OUT/mlp_torch.log"; then
    record mlp_torch SKIP $SECS "$(grep -m 1 '^SKIPPED' "$OUT/mlp_torch.log")"
  else
    record mlp_torch PASS $SECS
  fi
else
  record mlp_torch SKIP 0 "no python3"
fi

# ---- the GPU ----
if command -v nvidia-smi >/dev/null 2>&1; then
  run nvidia-smi nvidia-smi
  if [ $RC -eq 0 ]; then record nvidia-smi PASS $SECS; else record nvidia-smi FAIL $SECS "exit $RC"; fi
else
  echo "nvidia-smi: command not found" >"$OUT/nvidia-smi.log"
  record nvidia-smi FAIL 0 "nvidia-smi not found"
fi

# ---- dax vs PyTorch on the MLP step (same timing method: synchronized host clock per step) ----
if command -v python3 >/dev/null 2>&1 && [ -f "$OUT/cuda_bench.json" ] && [ -f "$OUT/mlp_torch.json" ]; then
  python3 - "$OUT/cuda_bench.json" "$OUT/mlp_torch.json" >>"$SUMMARY" 2>&1 <<'EOF'
import json, sys
dax, torch = (json.load(open(p)) for p in sys.argv[1:3])
if "mlp" in dax and "rows" in torch:
    print()
    ours = {r["precision"]: r for r in dax["mlp"]["rows"]}
    for r in torch["rows"]:
        d = ours.get(r["precision"])
        if d and d.get("dax_wall_ms") and r.get("ms_per_step"):
            print(f"MLP step, {r['precision']} float32 matmuls: dax {d['dax_wall_ms']:.3f} ms, PyTorch "
                  f"{r['ms_per_step']:.3f} ms (torch/dax {r['ms_per_step'] / d['dax_wall_ms']:.3f})")
EOF
fi

{
  echo
  if [ $failed -eq 0 ]; then echo "overall: PASS"; else echo "overall: FAIL"; fi
} >>"$SUMMARY"
echo "gpu-check: summary in $SUMMARY"
cat "$SUMMARY"
exit $failed
