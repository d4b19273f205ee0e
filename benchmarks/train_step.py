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
import os
import platform
import statistics

from vs_torch import HERE, alternate, require_program, require_torch, write_json


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    torch_version = require_torch("train_step")
    program = require_program("train_step", args.build, "train_step")
    common = ["--batch", str(args.batch), "--steps", str(args.steps), "--warmup", "5"]
    results = []
    for ranks in [int(r) for r in args.ranks.split(",")]:
        commands = {
            "dax": ["mpirun", "-np", str(ranks), "--bind-to", "none", program] + common,
            "torch": ["/usr/bin/python3", os.path.join(HERE, "train_step_torch.py"), "--ranks", str(ranks)] + common,
        }

        def report(r, pair):
            print(f"ranks {ranks} round {r + 1}: dax {pair['dax']['tokens_per_s']:.0f} tokens/s, "
                  f"PyTorch {pair['torch']['tokens_per_s']:.0f} tokens/s, "
                  f"ratio {pair['dax']['tokens_per_s'] / pair['torch']['tokens_per_s']:.3f}", flush=True)

        rounds = alternate(commands, args.rounds, report)
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
    write_json(args.json, {"benchmark": "train_step", "machine": platform.processor() or platform.machine(),
                           "cpus": os.cpu_count(), "torch": torch_version, "rounds": args.rounds,
                           "steps": args.steps, "results": results})


if __name__ == "__main__":
    main()
