#!/usr/bin/env bash
# libFuzzer on the pure layers: builds tests/fuzz with clang (-fsanitize=fuzzer,address,undefined)
# in build-fuzz/ and fuzzes the sharding model and the planner for DAX_FUZZ_SECONDS (60 by
# default). The corpus it grows stays in build-fuzz/corpus/; a failing input is written beside it
# and printed with the command that replays it. test.sh runs it after the main suite.
set -euo pipefail
DAX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DAX_FUZZ_BUILD:-$DAX_ROOT/build-fuzz}
seconds=${DAX_FUZZ_SECONDS:-60}
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
cmake --build "$build" -j "$jobs" --target dax_planner_fuzz

if [ "$seconds" -le 0 ]; then
  echo "dax: DAX_FUZZ_SECONDS=$seconds: fuzzer built, not run"
  exit 0
fi
corpus="$build/corpus/planner"
log="$build/planner_fuzz.log"
mkdir -p "$corpus"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "dax: fuzzing the sharding model and the planner for ${seconds} s (log: $log)"
if "$build/tests/fuzz/dax_planner_fuzz" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/" "$corpus" >"$log" 2>&1; then
  grep -E '^(Done|stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb))' "$log"
else
  tail -n 80 "$log"
  echo "dax: the planner fuzzer failed; replay the input it wrote (the path above) with:"
  echo "  $build/tests/fuzz/dax_planner_fuzz $build/crash-<hash>"
  exit 1
fi
