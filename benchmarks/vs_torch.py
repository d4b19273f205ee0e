"""What the benchmarks that race dax against PyTorch share (train_step.py, mlp_step.py).

Both programs print their figures as one JSON line; a round runs each once, the order flipping
every round so drift on a shared machine hits both alike, and ratios are taken per round.
One thread per rank for both, the same OpenBLAS. A missing torch is a failure, not a skip.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# glibc hands blocks above its mmap threshold back to the system when freed, so PyTorch's CPU
# allocator, which keeps no cache, faults fresh pages in for every large tensor of every step: one
# process in two then runs the MLP step at half speed. Raising the thresholds (what jemalloc or
# tcmalloc, which PyTorch's CPU tuning guide recommends, do anyway) gives PyTorch its best, steady
# speed. Both sides run with it; dax's caching allocator makes it no difference there.
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
           MALLOC_MMAP_THRESHOLD_="4294967296", MALLOC_TRIM_THRESHOLD_="4294967296")


def require_torch(who):
    try:
        import torch  # noqa: F401  (checked first, so a missing torch fails before any timing)
        return torch.__version__
    except ImportError as e:
        sys.exit(f"{who}: FAILED: PyTorch is missing from /usr/bin/python3 ({e}); "
                 "install Debian's python3-torch (scripts/bench-deps.sh)")


def require_program(who, build, name):
    program = os.path.join(build, "benchmarks", name)
    if not os.path.exists(program):
        sys.exit(f"{who}: FAILED: {program} is not built (cmake --build {build} --target {name})")
    return program


def run_json(cmd):
    out = subprocess.run(cmd, env=ENV, check=True, capture_output=True, text=True)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        sys.exit(f"no JSON line from {' '.join(cmd)}:\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1])


def alternate(commands, rounds, report):
    """Runs every command of `commands` ({name: argv}) once per round, in an order that flips every
    round; calls report(round, results) after each; returns the list of rounds' {name: JSON}."""
    names = list(commands)
    out = []
    for r in range(rounds):
        pair = {}
        for name in (names if r % 2 == 0 else names[::-1]):
            pair[name] = run_json(commands[name])
        out.append(pair)
        report(r, pair)
    return out


def write_json(path, data):
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
