#!/usr/bin/env bash
# The second command of the README (and what CI runs): set up, build everything, and run the
# whole test suite: pure tests, multi-rank tests at 1, 2, 3, 4 and 8 ranks, examples, the
# consumer project, and the CUDA tests (which skip without a GPU). Then the unit tests and the
# 2-rank tests again under AddressSanitizer + UBSan (scripts/sanitize.sh, build-asan/) and a
# bounded libFuzzer run on the sharding model and planner (scripts/fuzz.sh, build-fuzz/);
# DAX_SKIP_SANITIZERS=1 leaves those two out.
set -euo pipefail
# CI's check that the tree builds with no warning (docs/building.md): -Werror on dax's own targets.
DAX_CMAKE_ARGS="-DDAX_WARNINGS_AS_ERRORS=ON ${DAX_CMAKE_ARGS:-}"
source "$(dirname "$0")/setup.sh"
(cd "$DAX_BUILD" && ctest --output-on-failure --timeout 900)
if [ "${DAX_SKIP_SANITIZERS:-0}" != "1" ]; then
  "$DAX_ROOT/scripts/sanitize.sh"
  "$DAX_ROOT/scripts/fuzz.sh"
fi
