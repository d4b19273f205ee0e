#!/usr/bin/env bash
# dax on a GPU machine, in self-contained phases that each fit one call of a device tool (at most
# 10 minutes, a machine that may start bare, a few files back). From anywhere:
#
#   scripts/gpu-check.sh test OUTDIR   build what the CUDA tests need if it is missing (ninja, all
#                                      cores, only those targets) and run every test labelled cuda:
#                                      NCCL at 1 rank, the MPI transport at 2 and 4 ranks on one GPU,
#                                      each with a TIMEOUT of at most 120 s; the phase stops itself
#                                      before 9 minutes. Writes OUTDIR/test-summary.txt and
#                                      OUTDIR/test-logs.tar.gz.
#   scripts/gpu-check.sh bench OUTDIR  build cuda_bench if it is missing, run it (1 rank; its
#                                      reshard section at 2 ranks over the MPI transport) and
#                                      PyTorch's side of the MLP step. Writes OUTDIR/bench-summary.txt,
#                                      OUTDIR/bench-logs.tar.gz and OUTDIR/<device>-<date>.json, the
#                                      results file (docs/gpu.md), with the test counts read from
#                                      OUTDIR/test-summary.txt or $DAX_GPU_TEST_SUMMARY, else from a
#                                      run of the test phase first.
#   scripts/gpu-check.sh sanitize OUTDIR
#                                      build the CUDA tests (dax_cuda_tests) if missing and run
#                                      its kernels and smoke programs under compute-sanitizer: memcheck (memory errors; the API errors
#                                      that the out-of-memory test causes on purpose are not
#                                      counted) and racecheck (shared-memory hazards). Where the
#                                      machine refuses the tool (gVisor: "Device not supported"), the
#                                      summary says "not runnable on this machine" and the phase
#                                      passes. Writes OUTDIR/sanitize-summary.txt and
#                                      OUTDIR/sanitize-logs.tar.gz.
#   scripts/gpu-check.sh all OUTDIR    all three, test first (no time limit of one call then).
#
# Without a GPU (nvidia-smi -L lists none and /dev/nvidia0 does not exist) a phase says so on its
# first line, writes that into its summary and exits 0, so CI runs this script itself
# (tests/gpu_check). With one, a phase exits 1 when it failed.
# A bare machine without MPI, Catch2 or Eigen: carry .devdeps/ (scripts/gpu-deps.sh pack); this
# script sources .devdeps/env.sh itself when it exists and mpicxx is not on the PATH.
# Environment: DAX_GPU_BUILD (build directory, default build-gpu), DAX_GPU_TARGETS (build these
# targets instead of the phase's own; ctest reports the cuda-labelled tests whose programs were not
# built as Not Run, which counts as failed: narrow the tests with DAX_GPU_CTEST_ARGS, e.g.
# "-LE example"), DAX_GPU_CTEST_ARGS (more ctest arguments), DAX_GPU_CTEST_JOBS (tests at a time,
# default 4), DAX_CMAKE_ARGS (more configure arguments), DAX_GPU_BUDGET_S (seconds a phase may
# take, default 530), DAX_GPU_VISIBLE=0 (act as if no GPU were visible; the CPU test uses it on a
# machine that has one) or 1 (act as if one were: a dry run of the steps, whose tests then skip,
# which the summary counts as a failure), DAX_GPU_PREBUILT=1 (BUILD was compiled elsewhere at the
# same absolute path and carried: run it as it is; see use_prebuilt).
set -uo pipefail

usage() {
  echo "usage: $0 test|bench|sanitize|all OUTDIR" >&2
  exit 2
}
[ $# -eq 2 ] || usage
PHASE=$1
case $PHASE in test | bench | sanitize | all) ;; *) usage ;; esac
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$2" || exit 2
OUT=$(cd "$2" && pwd)
START=$(date +%s)
BUDGET=${DAX_GPU_BUDGET_S:-530}

if [ "$PHASE" = all ]; then
  "$0" test "$OUT"
  t=$?
  "$0" bench "$OUT"
  b=$?
  "$0" sanitize "$OUT"
  z=$?
  [ $t -eq 0 ] && [ $b -eq 0 ] && [ $z -eq 0 ]
  exit
fi
SUMMARY=$OUT/$PHASE-summary.txt

# ---- a GPU, or a plain stop ----
gpu_evidence() {
  [ "${DAX_GPU_VISIBLE:-}" = 0 ] && return 0
  if [ "${DAX_GPU_VISIBLE:-}" = 1 ]; then
    echo "DAX_GPU_VISIBLE=1: a dry run of the phase's steps"
    return 0
  fi
  if [ -e /dev/nvidia0 ]; then
    echo "/dev/nvidia0 exists"
    return 0
  fi
  nvidia-smi -L 2>/dev/null | grep -m 1 '^GPU ' | sed 's/^/nvidia-smi -L lists /'
  return 0
}
GPU=$(gpu_evidence)
if [ -z "$GPU" ]; then
  why="no GPU on this machine (nvidia-smi -L lists none and /dev/nvidia0 does not exist)"
  [ "${DAX_GPU_VISIBLE:-}" = 0 ] && why="no GPU: DAX_GPU_VISIBLE=0"
  line="gpu-check $PHASE: $why; nothing to $PHASE here, exiting 0"
  echo "$line"
  echo "$line" >"$SUMMARY"
  exit 0
fi
echo "gpu-check $PHASE: GPU visible ($GPU); output in $OUT"

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
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dax-gpu-check-$PHASE.XXXXXX") || exit 2
failed=0
NOTES=()

left() { echo $((BUDGET - ($(date +%s) - START))); }

# note NAME STATUS SECONDS [TEXT]: one line of the summary; FAIL marks the phase failed.
note() {
  local line
  line=$(printf '%-12s %-5s %5ss  %s' "$1" "$2" "$3" "${4:-}")
  NOTES+=("$line")
  echo "gpu-check $PHASE: $line"
  [ "$2" = FAIL ] && failed=1
  return 0
}

# step NAME SECONDS CMD...: runs CMD (killed after SECONDS) with its output in WORK/NAME.log; sets RC, SECS.
step() {
  local name=$1 limit=$2 begin
  shift 2
  begin=$(date +%s)
  echo "gpu-check $PHASE: $name: $*"
  if [ "$limit" -le 0 ]; then
    echo "no time left in the phase's ${BUDGET} s" >"$WORK/$name.log"
    RC=124
  else
    {
      echo "\$ $*"
      timeout --kill-after=10 "$limit" "$@"
    } >"$WORK/$name.log" 2>&1
    RC=$?
  fi
  SECS=$(($(date +%s) - begin))
}

# write_summary [MORE...]: the summary file: a heading, the step lines, then MORE (files).
write_summary() {
  {
    echo "dax gpu-check $PHASE $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
    echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (+ local changes)')"
    echo "GPU: $(nvidia-smi -L 2>/dev/null | head -n 1 || true) ($GPU)"
    echo "build $BUILD; $(($(date +%s) - START)) s of the phase's $BUDGET s"
    echo
    printf '%s\n' "${NOTES[@]}"
    for f in "$@"; do
      echo
      cat "$f"
    done
    echo
    if [ $failed -eq 0 ]; then echo "overall: PASS"; else echo "overall: FAIL"; fi
  } >"$SUMMARY"
}

# pack: every log of the phase, plus ctest's full record, into OUT/<phase>-logs.tar.gz.
pack() {
  nvidia-smi >"$WORK/nvidia-smi.log" 2>&1 || true
  [ -f "$BUILD/Testing/Temporary/LastTest.log" ] && [ "$PHASE" = test ] &&
    cp "$BUILD/Testing/Temporary/LastTest.log" "$WORK/ctest-LastTest.log"
  cp "$SUMMARY" "$WORK/"
  tar -czf "$OUT/$PHASE-logs.tar.gz" -C "$WORK" . 2>/dev/null || echo "gpu-check $PHASE: could not write the tarball"
  rm -rf "$WORK"
}

# use_prebuilt TARGETS...: DAX_GPU_PREBUILT=1: BUILD was built on another machine at the same
# absolute path (a symlink there will do) and carried here, so a device call spends no time
# compiling. Nothing is configured or built: the targets' programs must exist. The launcher that
# CMake found there is replaced in the ctest files by the one on this PATH, and NCCL is taken from
# PyTorch's wheel when the library that was linked there does not exist here. Sets BUILT.
use_prebuilt() {
  local missing=() t f
  for t in "$@"; do
    [ -n "$(find "$BUILD" -type f -name "$t" -perm -u+x -print -quit 2>/dev/null)" ] || missing+=("$t")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    note build FAIL 0 "DAX_GPU_PREBUILT=1 but $BUILD lacks ${missing[*]}"
    return
  fi
  local there here
  there=$(sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' "$BUILD/CMakeCache.txt")
  here=$(command -v mpiexec || true)
  if [ -n "$there" ] && [ -n "$here" ] && [ "$there" != "$here" ]; then
    find "$BUILD" -name CTestTestfile.cmake -exec sed -i "s#\"$there\"#\"$here\"#g" {} +
  fi
  local nccl
  nccl=$(sed -n 's/^DAX_NCCL_LIBRARY:FILEPATH=//p' "$BUILD/CMakeCache.txt")
  if [ ! -e "$nccl" ] && [ -n "${DAX_NCCL_WHEEL_DIR:-}" ]; then
    export LD_LIBRARY_PATH=$DAX_NCCL_WHEEL_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  note build SKIP 0 "DAX_GPU_PREBUILT=1: $* built elsewhere; launcher $here"
  BUILT=0
}

# configure_and_build TARGETS...: configures BUILD when it has no cache yet (Ninja when there is
# one), then builds TARGETS (DAX_GPU_TARGETS instead when set) with every core. Sets BUILT.
configure_and_build() {
  BUILT=1
  if [ "${DAX_GPU_PREBUILT:-}" = 1 ]; then
    use_prebuilt "$@"
    return
  fi
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    local args=(-DCMAKE_BUILD_TYPE=Release -DDAX_ENABLE_CUDA=ON -DDAX_BUILD_TESTS=ON -DDAX_BUILD_EXAMPLES=ON
      -DDAX_BUILD_BENCHMARKS=ON)
    command -v nvcc >/dev/null 2>&1 && args+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
    command -v ninja >/dev/null 2>&1 && args+=(-G Ninja)
    # NCCL from PyTorch's wheel (env.sh sets DAX_NCCL_WHEEL_DIR) when the toolkit has none.
    local nvcc_dir nccl_lib=
    nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
    if [ ! -f "$nvcc_dir/../include/nccl.h" ] && [ ! -f /usr/include/nccl.h ] && [ -n "${DAX_NCCL_WHEEL_DIR:-}" ] &&
      [ -f "$DAX_NCCL_WHEEL_DIR/include/nccl.h" ]; then
      for f in "$DAX_NCCL_WHEEL_DIR"/lib/libnccl.so*; do
        [ -e "$f" ] && nccl_lib=$f && break
      done
      [ -n "$nccl_lib" ] && args+=("-DDAX_NCCL_INCLUDE_DIR=$DAX_NCCL_WHEEL_DIR/include" "-DDAX_NCCL_LIBRARY=$nccl_lib")
    fi
    # shellcheck disable=SC2086
    step configure "$(left)" cmake -S "$ROOT" -B "$BUILD" "${args[@]}" ${DAX_CMAKE_ARGS:-}
    if [ $RC -ne 0 ]; then
      note configure FAIL $SECS "exit $RC (log in the tarball)"
      return
    fi
    note configure PASS $SECS
  fi
  # The wheel's libnccl must be found at run time too.
  if [ -n "${DAX_NCCL_WHEEL_DIR:-}" ] && grep -q "DAX_NCCL_LIBRARY:.*$DAX_NCCL_WHEEL_DIR" "$BUILD/CMakeCache.txt" 2>/dev/null; then
    export LD_LIBRARY_PATH=$DAX_NCCL_WHEEL_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  local targets=("$@")
  # shellcheck disable=SC2206
  [ -n "${DAX_GPU_TARGETS:-}" ] && targets=(${DAX_GPU_TARGETS})
  step build "$(left)" cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}"
  if [ $RC -ne 0 ]; then
    note build FAIL $SECS "exit $RC: $(grep -m 1 -E 'error|FAILED' "$WORK/build.log" | cut -c1-160)"
    return
  fi
  note build PASS $SECS "${targets[*]}"
  BUILT=0
}

# ---- test ----
if [ "$PHASE" = test ]; then
  # dax_cuda_tests: every nvcc-built test in one program (tests/cuda/CMakeLists.txt);
  # dax_examples_cuda: every example's nvcc copy in one program (examples/CMakeLists.txt).
  targets=(dax_cuda_tests dax_examples_cuda)
  configure_and_build "${targets[@]}"
  if [ $BUILT -eq 0 ]; then
    # Leave 15 s to write the summary; every test has its own TIMEOUT (120 s at most) too. With a
    # GPU visible, every program must run on it: DAX_BACKEND=cuda turns a silent fall-back to the
    # CPU (the examples' .cuda runs would pass there) into an error that names CUDA's reason.
    export DAX_BACKEND=cuda
    cd "$BUILD" || exit 2
    # shellcheck disable=SC2086
    step ctest $(($(left) - 15)) ctest -L cuda -V -j "${DAX_GPU_CTEST_JOBS:-4}" --timeout 120 ${DAX_GPU_CTEST_ARGS:-}
    cd "$ROOT" || exit 2
    python3 "$ROOT/scripts/gpu-summary.py" "$WORK/ctest.log" --gpu-visible "$GPU" --title "CUDA tests" \
      --out "$WORK/tests.txt" >/dev/null
    verdict=$?
    if [ $RC -eq 124 ] || [ $RC -eq 137 ]; then
      note ctest FAIL $SECS "stopped at the phase's time limit; the tests that finished: $(sed -n 2p "$WORK/tests.txt")"
    elif [ $verdict -eq 0 ]; then
      note ctest PASS $SECS "$(sed -n 2p "$WORK/tests.txt")"
    else
      note ctest FAIL $SECS "$(head -n 1 "$WORK/tests.txt" | sed 's/^CUDA tests: FAIL: //')"
    fi
    write_summary "$WORK/tests.txt"
  else
    echo "counts: passed=0 failed=0 skipped=0" >"$WORK/tests.txt"
    note ctest FAIL 0 "not run: the build failed"
    write_summary "$WORK/tests.txt"
  fi
  pack
  echo "gpu-check test: summary in $SUMMARY"
  cat "$SUMMARY"
  exit $failed
fi

# ---- sanitize ----
if [ "$PHASE" = sanitize ]; then
  # The kernel tests and the smoke test: programs of dax_cuda_tests, named by its first argument.
  programs=(kernels smoke)
  configure_and_build dax_cuda_tests
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ $BUILT -ne 0 ]; then
    note sanitize FAIL 0 "not run: the build failed"
  elif [ ! -x "$sanitizer" ]; then
    note sanitize SKIP 0 "not runnable on this machine: compute-sanitizer is not installed"
  else
    exe=$(find "$BUILD" -type f -name dax_cuda_tests -perm -u+x -print -quit)
    [ -n "$exe" ] || programs=()
    [ -n "$exe" ] || note sanitize FAIL 0 "not run: no dax_cuda_tests program in $BUILD"
    for program in "${programs[@]}"; do
      for tool in memcheck racecheck; do
        args=(--tool "$tool")
        [ "$tool" = memcheck ] && args+=(--report-api-errors no)
        step "$tool.$program" "$(($(left) - 10))" "$sanitizer" "${args[@]}" "$exe" "$program"
        log=$WORK/$tool.$program.log
        if grep -q "Device not supported\|not supported on this\|Failed to initialize" "$log"; then
          note "$tool" SKIP $SECS "$program: not runnable on this machine ($(grep -m 1 -o 'Device not supported.*\|Failed to initialize.*' "$log" | cut -c1-80))"
        elif [ $RC -eq 124 ] || [ $RC -eq 137 ]; then
          note "$tool" FAIL $SECS "$program: stopped at the phase's time limit"
        elif grep -qE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors, 0 warnings\)" "$log" &&
          [ $RC -eq 0 ]; then
          note "$tool" PASS $SECS "$program: $(grep -m 1 -oE '(ERROR|RACECHECK) SUMMARY: .*' "$log")"
        else
          note "$tool" FAIL $SECS "$program: exit $RC, $(grep -m 1 -oE '(ERROR|RACECHECK) SUMMARY: .*' "$log" || echo 'no summary')"
        fi
      done
    done
  fi
  write_summary
  pack
  echo "gpu-check sanitize: summary in $SUMMARY"
  cat "$SUMMARY"
  exit $failed
fi

# ---- bench ----
configure_and_build cuda_bench
bench=$BUILD/benchmarks/cuda_bench
if [ $BUILT -eq 0 ]; then
  step cuda_bench "$(left)" "$bench" --json "$WORK/cuda_bench.json" --sections gemm,elementwise,overhead,mlp,reduction,attention,argmax,groups
  if [ $RC -ne 0 ]; then
    note cuda_bench FAIL $SECS "exit $RC"
  elif grep -q '^SKIPPED' "$WORK/cuda_bench.log"; then
    note cuda_bench FAIL $SECS "$(grep -m 1 '^SKIPPED' "$WORK/cuda_bench.log") (a GPU is visible)"
  else
    note cuda_bench PASS $SECS "$(grep -m 1 'targets met' "$WORK/cuda_bench.log" | sed 's/^# *//')"
  fi
  # The reshard section needs 2 ranks: on one GPU they share it over the MPI transport.
  step cuda_bench_reshard "$(left)" env DAX_TRANSPORT=mpi mpirun -np 2 --oversubscribe "$bench" --sections reshard \
    --json "$WORK/cuda_bench_reshard.json"
  if [ $RC -ne 0 ]; then
    note reshard FAIL $SECS "exit $RC"
  elif grep -q '^SKIPPED' "$WORK/cuda_bench_reshard.log"; then
    note reshard FAIL $SECS "$(grep -m 1 '^SKIPPED' "$WORK/cuda_bench_reshard.log") (a GPU is visible)"
  else
    note reshard PASS $SECS "2 ranks sharing the GPU, DAX_TRANSPORT=mpi"
  fi
else
  note cuda_bench FAIL 0 "not run: the build failed"
fi

if command -v python3 >/dev/null 2>&1; then
  step mlp_torch "$(left)" python3 "$ROOT/benchmarks/mlp_torch.py" --json "$WORK/mlp_torch.json"
  if [ $RC -ne 0 ]; then
    note mlp_torch FAIL $SECS "exit $RC"
  elif grep -q '^SKIPPED' "$WORK/mlp_torch.log"; then
    note mlp_torch SKIP $SECS "$(grep -m 1 '^SKIPPED' "$WORK/mlp_torch.log")"
  else
    note mlp_torch PASS $SECS
  fi
fi

# The test counts: this OUTDIR's test summary, the one passed in, or a run of the test phase now.
tests=$OUT/test-summary.txt
[ -f "$tests" ] || tests=${DAX_GPU_TEST_SUMMARY:-}
if [ -z "$tests" ] || [ ! -f "$tests" ]; then
  echo "gpu-check bench: no test summary in $OUT and no DAX_GPU_TEST_SUMMARY: running the test phase first"
  DAX_GPU_BUDGET_S=$BUDGET "$0" test "$OUT" >"$WORK/test-phase.log" 2>&1
  tests=$OUT/test-summary.txt
fi
step results 60 python3 "$ROOT/scripts/gpu-results.py" --out-dir "$OUT" --tests "$tests" \
  --bench "$WORK/cuda_bench.json" --reshard "$WORK/cuda_bench_reshard.json" --torch "$WORK/mlp_torch.json" \
  --device "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
if [ $RC -eq 0 ]; then
  note results PASS $SECS "$(tail -n 1 "$WORK/results.log")"
else
  note results FAIL $SECS "$(tail -n 1 "$WORK/results.log")"
fi
write_summary "$WORK/results.log"
pack
echo "gpu-check bench: summary in $SUMMARY"
cat "$SUMMARY"
exit $failed
