#!/usr/bin/env bash
# A rank killed (SIGKILL) in the middle of a collective (issue 46): every other rank must stop
# within 5 s, the output must name the dead rank in one line, and nothing the job made may be left:
# no shared-memory file of the job (Open MPI names them by the job's id) and no session directory.
# usage: kill_collective.sh MPIEXEC RANKS PROGRAM MODE   (PROGRAM: dax_hang, MODE: kill_in_...)
set -u
mpiexec=$1 ranks=$2 program=$3 mode=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$mpiexec" -n "$ranks" --oversubscribe "$program" "$mode" >"$out" 2>&1 &
launcher=$!
ranks_alive() { pgrep -P "$launcher" 2>/dev/null | while read -r p; do
  [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" = "Z" ] || echo "$p"; done | wc -l; }
start=$(date +%s.%N) killed=""
while kill -0 "$launcher" 2>/dev/null; do
  if [ -z "$killed" ] && grep -q "rank 1: killed" "$out"; then killed=$(date +%s.%N); fi
  if [ -n "$killed" ] && [ "$(ranks_alive)" = 0 ]; then break; fi
  if awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN { exit !(n - s > 60) }'; then
    cat "$out"; echo "FAIL: still running after 60 s"; pkill -9 -P "$launcher"; kill -9 "$launcher"; exit 1
  fi
  sleep 0.05
done
ended=$(date +%s.%N)
wait "$launcher" 2>/dev/null
cat "$out"
if [ -z "$killed" ]; then echo "FAIL: rank 1 was not killed"; exit 1; fi
stop=$(awk -v k="$killed" -v e="$ended" 'BEGIN { printf "%.2f", e - k }')
echo "kill_collective: $mode: every rank stopped $stop s after rank 1 was killed"
if awk -v s="$stop" 'BEGIN { exit !(s > 5) }'; then echo "FAIL: more than 5 s"; exit 1; fi
if [ "$(grep -Ec 'process rank 1 with PID .* exited on signal 9' "$out")" != 1 ]; then
  echo "FAIL: no single line naming the dead rank (process rank 1 ... exited on signal 9)"; exit 1
fi
job=$(sed -n 's/^job \([0-9]*\)$/\1/p' "$out" | head -1)
if [ -z "$job" ]; then echo "FAIL: the job did not say its id"; exit 1; fi
hex=$(printf '%x' "$job") family=$((job >> 16))
sleep 0.5  # the launcher removes what it made as it exits
left=$(ls /dev/shm 2>/dev/null | grep -F ".$hex." ; ls -d /tmp/ompi.*/"jf.$family" /tmp/ompi.*/"pid.$launcher" 2>/dev/null)
if [ -n "$left" ]; then echo "FAIL: left behind:"; echo "$left"; exit 1; fi
echo "kill_collective: $mode: nothing of job $job ($hex) left in /dev/shm or the session directories"
