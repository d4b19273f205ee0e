#!/usr/bin/env bash
# The failure reports of a job on two nodes (tests/reliability/two_nodes.sh) must be those of the
# same job on one node: for each way a job goes wrong (ranks that diverge, a rank that leaves, an
# uncaught error, out of memory on one rank), dax's lines from 4 ranks on one node and from 2 nodes
# of 2 ranks, sorted, are the same, and not empty.
# usage: two_nodes_reports.sh MPIEXEC FAILURES_PROGRAM   (exit 77, a skip, where two_nodes.sh skips)
set -u
mpiexec=$1 program=$2
here=$(cd "$(dirname "$0")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Distinct lines, the reporting rank's number left out: which ranks print before the launcher ends
# the job depends on timing (under load some do not get to), on one node as on two.
reports() {
  grep -E '^dax|^  world' | sed -E -e 's/while world rank [0-9]+ waited/while world rank N waited/' \
    -e 's/^dax: rank [0-9]+: /dax: rank N: /' | sort -u
}
failed=0
for mode in diverge leave throw oom; do
  one=$(timeout 60 "$mpiexec" -n 4 --oversubscribe "$program" "$mode" 2>&1 | reports)
  two_out=$(timeout 90 "$here/two_nodes.sh" "$mpiexec" "$program" "$mode" 2>&1)
  case "$two_out" in *"two_nodes: SKIPPED"*) echo "$two_out" | grep SKIPPED; exit 77 ;; esac
  two=$(echo "$two_out" | reports)
  if [ -z "$one" ] || [ "$one" != "$two" ]; then
    echo "two_nodes_reports: $mode: the reports differ (or are missing)"
    echo "--- one node:"; echo "$one"; echo "--- two nodes:"; echo "$two"
    failed=1
  else
    echo "two_nodes_reports: $mode: $(echo "$one" | wc -l) report line(s), the same on two nodes as on one"
  fi
done
exit $failed
