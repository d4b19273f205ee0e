#!/usr/bin/env bash
# The second command of the README (and what CI runs): set up, build everything, and run the
# whole test suite: pure tests, multi-rank tests at 1, 2, 3, 4 and 8 ranks, examples, the
# consumer project, and the CUDA tests (which skip without a GPU).
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$DAX_BUILD"
exec ctest --output-on-failure --timeout 900
