#!/usr/bin/env bash
# The first command of the README: set up, build, and run the quickstart example on 4 ranks.
set -euo pipefail
DAX_TARGETS=quickstart source "$(dirname "$0")/setup.sh"
# Running as root and more ranks than cores are allowed here, for this run only.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpiexec -n 4 --oversubscribe "$DAX_BUILD/examples/quickstart"
