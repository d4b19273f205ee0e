#!/usr/bin/env bash
# The second command of the README (and what CI runs): set up, build everything, and run the
# whole test suite: pure tests, multi-rank tests at 1, 2, 3, 4 and 8 ranks, examples, the
# consumer project, and the CUDA tests (which skip without a GPU). Then the unit tests and the
# 2-rank tests again under AddressSanitizer + UBSan (scripts/sanitize.sh, build-asan/) and a
# bounded libFuzzer run on the sharding model and planner (scripts/fuzz.sh, build-fuzz/), the
# fuzzer beside the ASan build and then beside the ASan unit tests; DAX_SKIP_SANITIZERS=1 leaves
# those two out.
set -euo pipefail
# Each stage's wall time, printed at the end (docs/building.md keeps CI under 30 minutes).
stages=()
stage_start=$SECONDS
stage_done() { stages+=("$(printf '%-28s %5d s' "$1" $((SECONDS - stage_start)))"); stage_start=$SECONDS; }
print_stages() {
  echo "dax: stage times"
  for s in "${stages[@]}"; do echo "  $s"; done
  echo "  $(printf '%-28s %5d s' total $SECONDS)"
}
trap print_stages EXIT
# CI's check that the tree builds with no warning (docs/building.md): -Werror on dax's own targets.
DAX_CMAKE_ARGS="-DDAX_WARNINGS_AS_ERRORS=ON ${DAX_CMAKE_ARGS:-}"
# Without a GPU (CI) the CUDA programs are built to prove they compile: DAX_CUDA_COMPILE_ONLY.
compile_only=ON
if nvidia-smi -L >/dev/null 2>&1; then compile_only=OFF; fi
DAX_CMAKE_ARGS="-DDAX_CUDA_COMPILE_ONLY=$compile_only $DAX_CMAKE_ARGS"
# The C++ benchmarks never run in CI: checked to compile, not built (DAX_BENCHMARKS_COMPILE_ONLY).
DAX_CMAKE_ARGS="-DDAX_BENCHMARKS_COMPILE_ONLY=ON $DAX_CMAKE_ARGS"
source "$(dirname "$0")/setup.sh"
stage_done "setup and build"
# The tests of one process each run two at a time: the two longest (the unit tests, 75 s; the
# consumer project's builds, 95 s), the one-rank runs, the CUDA tests (which skip here at once
# without a GPU), the compile-error and script checks. Then the rest one at a time as before (the
# multi-rank tests oversubscribe the cores already). Last the reliability tests, three at a time:
# each waits seconds for a failure it provoked to be reported (46 s one at a time, 20 s of CPU).
# Every run always runs; the stage fails if any did.
one_process='^(unit|consumer)$|[.]np1$|^cuda[.]|^compile_errors[.]|^docs[.]|^gpu_check[.]'
(cd "$DAX_BUILD" && rc=0 &&
  { ctest --output-on-failure --timeout 900 -j 2 -R "$one_process" || rc=$?; } &&
  { ctest --output-on-failure --timeout 900 -E "$one_process|^reliability[.]" || rc=$?; } &&
  { ctest --output-on-failure --timeout 900 -j 3 -R "^reliability[.]" -E "$one_process" || rc=$?; } &&
  exit $rc)
stage_done "ctest"
if [ "${DAX_SKIP_SANITIZERS:-0}" != "1" ]; then
  # The fuzzer is one clang unit and then one process for a minute, the ASan unit tests one process
  # too: each pair runs side by side, so neither leaves a core idle (docs/building.md).
  fuzz_log="$DAX_BUILD/fuzz-stage.log"
  DAX_FUZZ_SECONDS=0 "$DAX_ROOT/scripts/fuzz.sh" >"$fuzz_log" 2>&1 &
  fuzz=$!
  # The fuzzer's build is waited for either way: nothing of this run is left running when it ends.
  build_rc=0; "$DAX_ROOT/scripts/sanitize.sh" build || build_rc=$?
  fuzz_rc=0; wait $fuzz || fuzz_rc=$?
  [ $build_rc = 0 ] || exit $build_rc
  if [ $fuzz_rc != 0 ]; then cat "$fuzz_log"; echo "dax: the fuzzer's build failed"; exit $fuzz_rc; fi
  stage_done "ASan + fuzzer builds"
  "$DAX_ROOT/scripts/fuzz.sh" >"$fuzz_log" 2>&1 &
  fuzz=$!
  unit_rc=0; "$DAX_ROOT/scripts/sanitize.sh" unit || unit_rc=$?
  fuzz_rc=0; wait $fuzz || fuzz_rc=$?
  cat "$fuzz_log"
  [ $unit_rc = 0 ] || exit $unit_rc
  [ $fuzz_rc = 0 ] || exit $fuzz_rc
  stage_done "ASan unit tests beside fuzzer"
  "$DAX_ROOT/scripts/sanitize.sh" ranks
  stage_done "ASan multi-rank tests"
fi
