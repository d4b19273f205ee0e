#!/usr/bin/env python3
"""A program's real run against its simulation (issue 43, "checked against real runs").

Runs the program as a real job of N ranks, each writing what it received and held (DAX_STATS_FILE),
then runs it again, once per checked rank r, alone in one process as device r of N simulated
devices (DAX_SIMULATE=N:r: the meta backend; no data, nothing run, everything planned and
counted). The simulated run's values are zeros, so its own checks may fail: only its counters are
compared. Every collective kind per mesh-axis group must have the same calls and bytes, and the
peak memory must be within 5% of the real one's (it is equal wherever the suite has looked).

usage: compare_runs.py [--only-ranks A-B] MPIEXEC RANKS PROGRAM [ARGS...]
(--only-ranks: simulate those ranks alone, e.g. where the others sit outside every mesh of a
shard_map and learn its outputs' shapes from a mesh device at run time, which a device simulated
alone cannot.)
"""
import json
import os
import subprocess
import sys
import tempfile


def collectives(stats):
    return {(c["kind"], c["axes"]): (c["calls"], c["bytes"]) for c in stats["collectives"]}


def main():
    argv = sys.argv[1:]
    only = None
    if argv[0] == "--only-ranks":
        first, last = (int(v) for v in argv[1].split("-"))
        only = range(first, last + 1)
        argv = argv[2:]
    mpiexec, ranks, program, args = argv[0], int(argv[1]), argv[2], argv[3:]
    name = os.path.basename(program)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    env.pop("DAX_SIMULATE", None)
    with tempfile.TemporaryDirectory(prefix="dax_simulation_") as tmp:
        real_env = dict(env, DAX_STATS_FILE=os.path.join(tmp, "real.%r.json"))
        real = subprocess.run([mpiexec, "-n", str(ranks), "--oversubscribe", program, *args], env=real_env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        if real.returncode != 0:
            print(real.stdout[-4000:])
            print(f"{name}: the real run at {ranks} ranks failed (exit {real.returncode})")
            return 1
        failed = []
        for rank in only if only is not None else range(ranks):
            with open(os.path.join(tmp, f"real.{rank}.json")) as f:
                want = json.load(f)
            sim_file = os.path.join(tmp, f"simulated.{rank}.json")
            sim_env = dict(env, DAX_SIMULATE=f"{ranks}:{rank}", DAX_STATS_FILE=sim_file)
            sim = subprocess.run([program, *args], env=sim_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, timeout=240)
            if not os.path.exists(sim_file):
                print(sim.stdout[-4000:])
                failed.append(f"rank {rank}: the simulated run wrote no counters (exit {sim.returncode})")
                continue
            with open(sim_file) as f:
                got = json.load(f)
            assert got["backend"] == "meta" and want["backend"] != "meta"
            w, g = collectives(want), collectives(got)
            for key in sorted(set(w) | set(g)):
                if w.get(key) != g.get(key):
                    failed.append(f"rank {rank}: {key[0]} over {key[1]}: real (calls, bytes) {w.get(key)}, "
                                  f"simulated {g.get(key)}")
            ratio = got["peak_bytes"] / want["peak_bytes"] if want["peak_bytes"] else 1.0
            if want["peak_bytes"] == 0 and got["peak_bytes"] != 0 or abs(ratio - 1) > 0.05:
                failed.append(f"rank {rank}: peak memory simulated {got['peak_bytes']} B, real {want['peak_bytes']} B")
            calls = sum(c for c, _ in w.values())
            received = sum(b for _, b in w.values())
            print(f"{name} rank {rank} of {ranks}: {len(w)} collective kinds x groups, {calls} calls, {received} B "
                  f"received, peak {want['peak_bytes']} B real / {got['peak_bytes']} B simulated ({ratio:.4f})")
        if failed:
            print(f"{name}: the simulation differs from the real run:\n  " + "\n  ".join(failed))
            return 1
        print(f"{name}: every rank's collectives and bytes equal the simulation's; peak memory within 5%")
        return 0


if __name__ == "__main__":
    sys.exit(main())
