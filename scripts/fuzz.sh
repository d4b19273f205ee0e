#!/usr/bin/env bash
# libFuzzer on the pure layers: builds tests/fuzz with clang (-fsanitize=fuzzer,address,undefined)
# in build-fuzz/ and fuzzes, for DAX_FUZZ_SECONDS in all (75 by default), the sharding model and
# the planner (three fifths of it) and then dax's file readers (.npy, .npz, safetensors, checkpoint
# sidecars; two fifths). The corpora they grow stay in build-fuzz/corpus/; a failing input is
# written beside them and printed with the command that replays it; copied into
# tests/fuzz/regressions/<planner|readers>/ it runs first on every later run. test.sh runs it beside the
# ASan unit tests.
set -euo pipefail
DAX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DAX_FUZZ_BUILD:-$DAX_ROOT/build-fuzz}
seconds=${DAX_FUZZ_SECONDS:-75}
jobs=$(nproc 2>/dev/null || echo 2)
generator=""  # Ninja for a new build directory, as in setup.sh
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  generator="-G Ninja"
fi
launcher=""  # ccache as in setup.sh
if [ "${DAX_CCACHE:-1}" != "0" ] && command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="$DAX_ROOT" CCACHE_NOHASHDIR=1
  launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
fi

cmake -S "$DAX_ROOT" -B "$build" $generator $launcher -DCMAKE_CXX_COMPILER="${DAX_FUZZ_CXX:-clang++}" \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DDAX_BUILD_FUZZERS=ON \
  -DDAX_BUILD_TESTS=OFF -DDAX_BUILD_EXAMPLES=OFF -DDAX_BUILD_BENCHMARKS=OFF -DDAX_ENABLE_CUDA=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target dax_planner_fuzz dax_readers_fuzz

if [ "$seconds" -le 0 ]; then
  echo "dax: DAX_FUZZ_SECONDS=$seconds: fuzzers built, not run"
  exit 0
fi
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# fuzz <name> <what> <seconds>: runs dax_<name>_fuzz on its corpus (the readers' seeds itself).
fuzz() {
  local name=$1 what=$2 secs=$3
  local corpus="$build/corpus/$name" log="$build/${name}_fuzz.log"
  mkdir -p "$corpus"
  # Inputs that once failed (tests/fuzz/regressions/<name>/, one file each) run first, every time.
  local regressions="$DAX_ROOT/tests/fuzz/regressions/$name"
  if [ -d "$regressions" ] && [ -n "$(ls -A "$regressions")" ]; then
    TMPDIR="$build" "$build/tests/fuzz/dax_${name}_fuzz" "$regressions"/* >"$log" 2>&1 ||
      { tail -n 40 "$log"; echo "dax: a regression input of the $name fuzzer fails again"; exit 1; }
  fi
  echo "dax: fuzzing $what for ${secs} s (log: $log)"
  if TMPDIR="$build" "$build/tests/fuzz/dax_${name}_fuzz" -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$build/" "$corpus" >"$log" 2>&1; then
    grep -E '^(Done|stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb))' "$log"
  else
    tail -n 80 "$log"
    echo "dax: the $name fuzzer failed; replay the input it wrote (the path above) with:"
    echo "  $build/tests/fuzz/dax_${name}_fuzz $build/crash-<hash>"
    exit 1
  fi
  rm -f "$build"/dax_${name}_fuzz_*  # the readers' scratch files
}
planner_seconds=$(( seconds * 3 / 5 ))
fuzz planner "the sharding model and the planner" "$planner_seconds"
fuzz readers "the file readers" $(( seconds - planner_seconds ))
