#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer: builds the pure and the multi-rank tests with
# -fsanitize=address,undefined (every report fatal) in build-asan/, then runs the unit tests and
# the multi-rank tests at 2 ranks. test.sh runs it after the main suite; it runs alone too.
#   sanitize.sh [build|unit|ranks]   one phase (test.sh runs the fuzzer beside `unit`); all three
#                                    when no phase is named
# The compiler is clang++ where installed (DAX_ASAN_CXX chooses): at -O0 with the sanitizers it
# builds these programs in half g++'s time (docs/building.md), and dax's code meets a second
# compiler on every CI run.
set -euo pipefail
phase=${1:-all}
case "$phase" in
  all | build | unit | ranks) ;;
  *) echo "sanitize.sh: expected a phase build, unit or ranks (or none for all three), got '$phase'" >&2; exit 2 ;;
esac
DAX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DAX_ASAN_BUILD:-$DAX_ROOT/build-asan}
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

cxx=${DAX_ASAN_CXX:-}
if [ -z "$cxx" ]; then
  if command -v clang++ >/dev/null 2>&1; then cxx=clang++; else cxx=g++; fi
fi
if [ "$phase" = all ] || [ "$phase" = build ]; then
  # -O0 builds in a third of -O1's time, which is most of this stage's; -g1 keeps line numbers.
  cmake -S "$DAX_ROOT" -B "$build" $generator $launcher -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="${DAX_ASAN_OPT:--O0 -g1}" \
    -DDAX_SANITIZE=ON -DDAX_BUILD_EXAMPLES=OFF -DDAX_BUILD_BENCHMARKS=OFF -DDAX_ENABLE_CUDA=OFF >/dev/null
  cmake --build "$build" -j "$jobs" --target dax_unit_tests dax_mpi_tests dax_io_tests
fi

# Every ASan and UBSan report is fatal. Leaks are checked in the unit tests; not under MPI, where
# Open MPI keeps allocations until exit in plugins it has unloaded by then (unsuppressible).
# mpiexec passes these variables on to the ranks.
asan=${ASAN_OPTIONS:-abort_on_error=1:check_initialization_order=1:strict_init_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The exhaustive planner tests (most of the unit tests' time, 10x slower here) are left to the
# main suite and, sanitized, to the fuzzer (scripts/fuzz.sh), which samples the same space;
# DAX_ASAN_UNIT_FILTER= runs them too.
if [ "$phase" = all ] || [ "$phase" = unit ]; then
  echo "dax: unit tests under ASan + UBSan"
  filter=${DAX_ASAN_UNIT_FILTER-"~[exhaustive]"}
  ASAN_OPTIONS=$asan "$build/tests/dax_unit_tests" ${filter:+"$filter"}
fi
if [ "$phase" = all ] || [ "$phase" = ranks ]; then
  echo "dax: multi-rank tests at 2 ranks under ASan + UBSan"
  cd "$build"
  ASAN_OPTIONS=detect_leaks=0:$asan ctest --output-on-failure --no-tests=error --timeout 1800 -R '^(mpi|io)\.np2$'
fi
