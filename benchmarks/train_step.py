#!/usr/bin/python3
"""benchmarks/train_step: the transformer LM's training step, dax against PyTorch, in one run.

dax: the train_step program (benchmarks/train_step.cpp) under mpirun. PyTorch: Debian's
python3-torch through /usr/bin/python3 (benchmarks/train_step_torch.py): eager at 1 rank,
DistributedDataParallel over gloo at 2. Same model, shapes and global batch; one thread per rank
for both (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS = 1), the same OpenBLAS. The two alternate within
each round (the order flips every round) and the ratio is taken per round; the median of the
rounds is reported. A missing torch is a failure, not a skip.

    /usr/bin/python3 benchmarks/train_step.py [--build build] [--rounds 5] [--json FILE]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        sys.exit(f"train_step: no JSON line from {' '.join(cmd)}:\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    try:
        import torch  # noqa: F401  (checked here so a missing torch fails before any timing)
    except ImportError as e:
        sys.exit(f"train_step: FAILED: PyTorch is missing from /usr/bin/python3 ({e}); "
                 "install Debian's python3-torch (scripts/setup.sh --bench)")
    program = os.path.join(args.build, "benchmarks", "train_step")
    if not os.path.exists(program):
        sys.exit(f"train_step: FAILED: {program} is not built (cmake --build {args.build} --target train_step)")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    common = ["--batch", str(args.batch), "--steps", str(args.steps), "--warmup", "5"]
    results = []
    for ranks in [int(r) for r in args.ranks.split(",")]:
        dax_cmd = ["mpirun", "-np", str(ranks), "--bind-to", "none", program] + common
        torch_cmd = ["/usr/bin/python3", os.path.join(HERE, "train_step_torch.py"), "--ranks", str(ranks)] + common
        rounds = []
        for r in range(args.rounds):
            pair = {}
            for name in (["dax", "torch"] if r % 2 == 0 else ["torch", "dax"]):
                pair[name] = run_json(dax_cmd if name == "dax" else torch_cmd, env)
            rounds.append(pair)
            print(f"ranks {ranks} round {r + 1}: dax {pair['dax']['tokens_per_s']:.0f} tokens/s, "
                  f"PyTorch {pair['torch']['tokens_per_s']:.0f} tokens/s, "
                  f"ratio {pair['dax']['tokens_per_s'] / pair['torch']['tokens_per_s']:.3f}", flush=True)
        ratios = [p["dax"]["tokens_per_s"] / p["torch"]["tokens_per_s"] for p in rounds]
        last = rounds[-1]["dax"]
        results.append({
            "ranks": ranks,
            "batch": args.batch,
            "dax_tokens_per_s": statistics.median(p["dax"]["tokens_per_s"] for p in rounds),
            "torch_tokens_per_s": statistics.median(p["torch"]["tokens_per_s"] for p in rounds),
            "ratio_median": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "dax_bytes_per_step": last["bytes_per_step"],
            "formula_bytes_per_step": last["formula_bytes"],
        })
    print("\n| ranks | dax tokens/s | PyTorch tokens/s | dax / PyTorch (median, min-max) | bytes/step (formula) |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['ranks']} | {r['dax_tokens_per_s']:.0f} | {r['torch_tokens_per_s']:.0f} | "
              f"{r['ratio_median']:.3f} ({r['ratio_min']:.3f}-{r['ratio_max']:.3f}) | "
              f"{r['dax_bytes_per_step']} ({r['formula_bytes_per_step']:.0f}) |")
    if args.json:
        import torch
        with open(args.json, "w") as f:
            json.dump({"benchmark": "train_step", "machine": platform.processor() or platform.machine(),
                       "cpus": os.cpu_count(), "torch": torch.__version__, "rounds": args.rounds,
                       "steps": args.steps, "results": results}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
