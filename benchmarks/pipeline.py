#!/usr/bin/python3
"""benchmarks/pipeline: dax::pipeline's schedules against their bubble formulas and against the same
pipeline written by hand in PyTorch, in one run.

dax: benchmarks/pipeline_bench.cpp under mpirun (a 1-d 'stage' mesh of P ranks, an MLP with the
same layers on every stage). PyTorch: benchmarks/pipeline_torch.py (Debian's python3-torch, gloo,
the same layers and passes in the same order; GPipe and 1F1B, which PyTorch users write by hand;
its 1.13 has no torch.distributed.pipelining). One thread per rank for both, the same OpenBLAS.
The two alternate round by round (the order flipping every round); the ratio is taken per round
and its median reported. Goals (issue 41): the bubble within 10% of the formula, the step no
slower than PyTorch's. A missing torch is a failure, not a skip.

    /usr/bin/python3 benchmarks/pipeline.py [--build build] [--ranks 2] [--rounds 3] [--json FILE]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

from vs_torch import ENV, HERE, require_program, require_torch, write_json


def run_lines(cmd):
    out = subprocess.run(cmd, env=ENV, check=True, capture_output=True, text=True)
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        sys.exit(f"no JSON line from {' '.join(cmd)}:\n{out.stdout}\n{out.stderr}")
    return {r["microbatches"]: r for r in lines}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--microbatches", default="4,8,16")
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    torch_version = require_torch("pipeline")
    program = require_program("pipeline", args.build, "pipeline_bench")
    common = ["--microbatches", args.microbatches, "--steps", "10", "--warmup", "2"]
    results = []
    for schedule in ["GPipe", "1F1B", "Interleaved1F1B", "ZBH1"]:
        dax_cmd = ["mpirun", "-np", str(args.ranks), "--bind-to", "none", program, "--schedule", schedule] + common
        torch_cmd = (["/usr/bin/python3", os.path.join(HERE, "pipeline_torch.py"), "--ranks", str(args.ranks),
                      "--schedule", schedule] + common) if schedule in ("GPipe", "1F1B") else None
        rounds = []
        for r in range(args.rounds):
            got = {}
            for name in (["dax", "torch"] if r % 2 == 0 else ["torch", "dax"]):
                if name == "dax":
                    got["dax"] = run_lines(dax_cmd)
                elif torch_cmd:
                    got["torch"] = run_lines(torch_cmd)
            rounds.append(got)
            for m, d in sorted(got["dax"].items()):
                line = (f"{schedule} p={args.ranks} m={m} round {r + 1}: dax {d['step_s'] * 1e3:.1f} ms, "
                        f"bubble {d['bubble']:.3f} (formula {d['bubble_formula']:.3f})")
                if "torch" in got:
                    t = got["torch"][m]["step_s"]
                    line += f", PyTorch {t * 1e3:.1f} ms, PyTorch / dax {t / d['step_s']:.3f}"
                print(line, flush=True)
        for m in sorted(rounds[0]["dax"]):
            d = [g["dax"][m] for g in rounds]
            entry = {
                "schedule": schedule, "stages": args.ranks, "microbatches": m,
                "dax_step_s": statistics.median(x["step_s"] for x in d),
                "bubble": statistics.median(x["bubble"] for x in d),
                "bubble_formula": d[0]["bubble_formula"],
            }
            entry["bubble_over_formula"] = entry["bubble"] / entry["bubble_formula"] if entry["bubble_formula"] else None
            if "torch" in rounds[0]:
                ratios = [g["torch"][m]["step_s"] / g["dax"][m]["step_s"] for g in rounds]
                entry.update({
                    "torch_step_s": statistics.median(g["torch"][m]["step_s"] for g in rounds),
                    "torch_over_dax_median": statistics.median(ratios),
                    "torch_over_dax_min": min(ratios), "torch_over_dax_max": max(ratios),
                })
            results.append(entry)

    print("\n| schedule | p | m | dax step | bubble (formula) | PyTorch step | PyTorch / dax (median, min-max) |")
    print("|---|---|---|---|---|---|---|")
    for e in results:
        torch_cols = (f"{e['torch_step_s'] * 1e3:.1f} ms | {e['torch_over_dax_median']:.3f} "
                      f"({e['torch_over_dax_min']:.3f}-{e['torch_over_dax_max']:.3f})") if "torch_step_s" in e else "- | -"
        print(f"| {e['schedule']} | {e['stages']} | {e['microbatches']} | {e['dax_step_s'] * 1e3:.1f} ms | "
              f"{e['bubble']:.3f} ({e['bubble_formula']:.3f}) | {torch_cols} |")
    write_json(args.json, {"benchmark": "pipeline", "machine": platform.processor() or platform.machine(),
                           "cpus": os.cpu_count(), "torch": torch_version, "ranks": args.ranks,
                           "rounds": args.rounds, "results": results})


if __name__ == "__main__":
    main()
