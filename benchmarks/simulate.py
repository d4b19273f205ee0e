#!/usr/bin/python3
"""benchmarks/simulate: what planning a training step on simulated devices costs, by world size.

Runs examples/transformer_lm --simulate N (dax::simulate, the meta backend) for a 7B-shaped model
(32 layers, d_model 4096, 32 heads, sequence 2048, batch 2048) on a data x model mesh with model = 8,
from 8 to 16,384 devices, one process each, and records the seconds the simulation took, the
process's peak memory, and what the report says one device holds and receives. Goal (issue 43):
16,384 devices in <= 10 s and <= 2 GB.

    /usr/bin/python3 benchmarks/simulate.py [--build build] [--json FILE]
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = ["--layers", "32", "--d-model", "4096", "--heads", "32", "--seq", "2048", "--batch", "2048"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", default=os.path.join(ROOT, "benchmarks", "results", "simulate-cpu.json"))
    args = ap.parse_args()
    exe = os.path.join(args.build, "examples", "transformer_lm")
    if not os.path.exists(exe):
        sys.exit(f"{exe} is missing: build the examples first")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    rows = []
    print(f"{'devices':>8} {'mesh':>20} {'seconds':>8} {'MB':>6} {'device peak GB':>15} {'received GB':>12} {'collectives':>11}")
    for n in [8, 64, 512, 4096, 16384]:
        cmd = [exe, "--simulate", str(n), "--mesh", f"data={n // 8},model=8"] + MODEL
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
        text = out.stdout
        seconds, mb = re.search(r"simulated in ([\d.e+-]+) s, this process's peak memory (\d+) MB", text).groups()
        peak = float(re.search(r"peak memory ([\d.e+-]+) GB", text).group(1))
        calls = received = 0
        for m in re.finditer(r"^\s+(\w+)\s+(\(.*?\))\s+(\d+)\s+(\d+)$", text, re.M):
            calls += int(m.group(3))
            received += int(m.group(4))
        row = dict(devices=n, mesh=f"data={n // 8},model=8", seconds=float(seconds), process_mb=int(mb),
                   device_peak_gb=peak, received_gb=received / 1e9, collective_calls=calls,
                   bytes_check=re.search(r"bytes against the formulas: (.*)", text).group(1))
        rows.append(row)
        print(f"{n:>8} {row['mesh']:>20} {row['seconds']:>8.2f} {row['process_mb']:>6} {peak:>15.2f} "
              f"{row['received_gb']:>12.2f} {calls:>11}")
    with open(args.json, "w") as f:
        json.dump(dict(benchmark="simulate", machine=platform.machine(), cpus=os.cpu_count(), model=" ".join(MODEL),
                       rows=rows), f, indent=1)
        f.write("\n")
    worst = rows[-1]
    ok = worst["seconds"] <= 10 and worst["process_mb"] <= 2048
    print(f"16,384 devices: {worst['seconds']:.2f} s, {worst['process_mb']} MB (goal <= 10 s, <= 2048 MB): "
          + ("met" if ok else "NOT met"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
