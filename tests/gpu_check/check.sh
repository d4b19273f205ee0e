#!/usr/bin/env bash
# CPU checks of scripts/gpu-check.sh's logic (no GPU needed; ctest runs them in CI):
#   check.sh summary  the verdicts of scripts/gpu-summary.py on the canned ctest logs in logs/ (no
#                     GPU test run = failure, a skip while a GPU is visible = failure, counts kept
#                     apart) and the results file of scripts/gpu-results.py from canned bench JSON;
#   check.sh no_gpu   both phases of scripts/gpu-check.sh on this machine: a plain "no GPU" first
#                     line, exit 0, a summary saying so, and nothing configured or built.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
bad=0
fail() {
  echo "FAIL: $*"
  bad=1
}

# expect LOG VISIBLE RC COUNTS [TEXT]: gpu-summary.py on LOG exits RC, prints COUNTS and TEXT.
expect() {
  local out rc
  out=$(python3 "$ROOT/scripts/gpu-summary.py" "$HERE/logs/$1" --gpu-visible "$2")
  rc=$?
  [ "$rc" = "$3" ] || fail "$1 (GPU visible: $2): exit $rc, expected $3"$'\n'"$out"
  grep -qxF "$4" <<<"$out" || fail "$1: no line '$4' in"$'\n'"$out"
  [ -z "${5:-}" ] || grep -qF "$5" <<<"$out" || fail "$1: no '$5' in"$'\n'"$out"
  return 0
}

if [ "${1:-}" = summary ]; then
  expect all_passed.log yes 0 "counts: passed=4 failed=0 skipped=0" "dax gpu-check test: PASS"
  expect all_passed.log no 0 "counts: passed=4 failed=0 skipped=0"
  expect skipped_no_gpu.log no 1 "counts: passed=0 failed=0 skipped=3" "no GPU test ran (all 3 skipped)"
  expect skipped_while_visible.log yes 1 "counts: passed=2 failed=0 skipped=1" "1 test skipped while a GPU is visible"
  expect skipped_while_visible.log no 0 "counts: passed=2 failed=0 skipped=1"
  expect failed.log no 1 "counts: passed=1 failed=4 skipped=1" "4 tests failed"
  expect failed.log no 1 "  failed  cuda.mpi.ops.mpi_transport.np4 (Timeout, 120.01 s)"
  expect failed.log no 1 "  failed  example.fsdp.cuda.np1 (Not Run, 0.00 s)"
  expect failed.log no 1 "  failed  cuda.mpi.checkpoint.nccl.np1 (Exception: SegFault, 1.20 s)"
  # An example whose `verified: ` line is missing: ctest's result spills onto a second line.
  expect regex_failed.log yes 1 "counts: passed=1 failed=1 skipped=0" "1 test failed"
  expect none_found.log yes 1 "counts: passed=0 failed=0 skipped=0" "no GPU test ran (no tests were found)"
  expect no_such.log no 1 "counts: passed=0 failed=0 skipped=0" "no GPU test ran"

  # The results file from canned cuda_bench output and a test summary.
  mkdir -p "$TMP/out"
  out=$(python3 "$ROOT/scripts/gpu-results.py" --out-dir "$TMP/out" --tests "$HERE/logs/test-summary.txt" \
    --bench "$HERE/logs/cuda_bench.json" --reshard "$HERE/logs/cuda_bench_reshard.json" --date 2026-11-23) ||
    fail "gpu-results.py: $out"
  f=$TMP/out/nvidia-h100-80gb-hbm3-2026-11-23.json
  [ -f "$f" ] || fail "gpu-results.py wrote no $f: $out"
  python3 - "$f" <<'PY' || bad=1
import json, sys
d = json.load(open(sys.argv[1]))
want = {"device": "NVIDIA H100 80GB HBM3", "elementwise_vs_copy": 0.91, "host_overhead_us": 4.2,
        "reduction_vs_copy": {"sum_all": 0.7, "sum_rows": 0.8}}
for k, v in want.items():
    if d.get(k) != v: print(f"FAIL: results {k} = {d.get(k)!r}, expected {v!r}"); sys.exit(1)
t = d["tests"]
if (t["passed"], t["failed"], t["skipped"]) != (30, 0, 0): print(f"FAIL: results tests = {t}"); sys.exit(1)
g = d["gemm_vs_cublas"]
if g != {"float32": {"1024x1024x1024": 0.98}, "float32/high": {"4096x4096x4096": 0.99},
         "bfloat16": {"8192x8192x8192": 1.01}}: print(f"FAIL: gemm_vs_cublas = {g}"); sys.exit(1)
r = d["reshard_vs_raw"]
if r != {"all_gather": 0.95, "all_to_all": 0.9, "ranks": 2, "transport": "mpi"}: print(f"FAIL: reshard_vs_raw = {r}"); sys.exit(1)
PY
  # Without the reshard run the file still comes, but says what is missing and exits 1.
  out=$(python3 "$ROOT/scripts/gpu-results.py" --out-dir "$TMP/out" --tests "$HERE/logs/test-summary.txt" \
    --bench "$HERE/logs/cuda_bench.json" --date 2026-11-24)
  rc=$?
  if [ $rc -ne 1 ] || ! grep -qF "missing: reshard_vs_raw" <<<"$out"; then fail "gpu-results.py without reshard: $out"; fi
elif [ "${1:-}" = no_gpu ]; then
  # On a machine that has a GPU, act as one without (the path CI takes).
  if [ -e /dev/nvidia0 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then export DAX_GPU_VISIBLE=0; fi
  export DAX_GPU_BUILD=$TMP/build
  for phase in test bench sanitize; do
    out=$("$ROOT/scripts/gpu-check.sh" "$phase" "$TMP/$phase" 2>&1)
    rc=$?
    first=$(head -n 1 <<<"$out")
    [ $rc -eq 0 ] || fail "$phase: exit $rc without a GPU"$'\n'"$out"
    grep -qE "^gpu-check $phase: no GPU.*nothing to $phase here, exiting 0$" <<<"$first" ||
      fail "$phase: the first line does not say 'no GPU': $first"
    [ "$(cat "$TMP/$phase/$phase-summary.txt" 2>/dev/null)" = "$first" ] ||
      fail "$phase: $TMP/$phase/$phase-summary.txt does not say the same"
    [ ! -e "$TMP/build" ] || fail "$phase: configured or built $TMP/build without a GPU"
    [ "$(wc -l <<<"$out")" -eq 1 ] || fail "$phase: more than one line without a GPU:"$'\n'"$out"
  done
  out=$("$ROOT/scripts/gpu-check.sh" nonsense "$TMP/x" 2>&1)
  [ $? -eq 2 ] || fail "an unknown phase must exit 2: $out"
else
  echo "usage: $0 summary|no_gpu" >&2
  exit 2
fi
[ $bad -eq 0 ] && echo "all gpu-check checks passed"
exit $bad
