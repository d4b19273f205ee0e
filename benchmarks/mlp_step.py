#!/usr/bin/python3
"""benchmarks/mlp_step: an MLP training step on the CPU, dax against PyTorch, in one run (issue 20).

The step: din 1024 -> hidden 4096 -> dout 1024, relu, bias, mean squared error, SGD, float32,
global batch 256, data parallel at 2 ranks (batch split, gradients all-reduced). dax: the
autodiff_bench program (benchmarks/autodiff_bench.cpp) under mpirun, which times the step with a
hand-written backward and with dax::value_and_grad. PyTorch: benchmarks/mlp_step_torch.py, the same
step by hand and with autograd, eager, over gloo at 2 ranks. One thread per rank for both, the same
OpenBLAS; the two alternate within each round and the speed ratio (PyTorch time / dax time, above 1
when dax is faster) is taken per round; the median of the rounds is reported.

    /usr/bin/python3 benchmarks/mlp_step.py [--build build] [--rounds 5] [--ranks 1,2] [--json FILE]
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
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    torch_version = require_torch("mlp_step")
    program = require_program("mlp_step", args.build, "autodiff_bench")
    results = []
    for ranks in [int(r) for r in args.ranks.split(",")]:
        commands = {
            "dax": ["mpirun", "-np", str(ranks), "--bind-to", "none", program, str(args.batch), "1024", "4096",
                    str(args.steps)],
            "torch": ["/usr/bin/python3", os.path.join(HERE, "mlp_step_torch.py"), "--ranks", str(ranks),
                      "--batch", str(args.batch), "--steps", str(args.steps)],
        }

        def report(r, pair):
            d, t = pair["dax"], pair["torch"]
            print(f"ranks {ranks} round {r + 1}: by hand dax {d['hand_ms']:.1f} ms, PyTorch {t['hand_ms']:.1f} ms "
                  f"(x{t['hand_ms'] / d['hand_ms']:.3f}); autodiff dax {d['autodiff_ms']:.1f} ms, "
                  f"PyTorch autograd {t['autograd_ms']:.1f} ms (x{t['autograd_ms'] / d['autodiff_ms']:.3f})",
                  flush=True)

        rounds = alternate(commands, args.rounds, report)
        hand = [p["torch"]["hand_ms"] / p["dax"]["hand_ms"] for p in rounds]
        auto = [p["torch"]["autograd_ms"] / p["dax"]["autodiff_ms"] for p in rounds]
        med = lambda key, who: statistics.median(p[who][key] for p in rounds)
        results.append({
            "ranks": ranks, "batch": args.batch,
            "dax_hand_ms": med("hand_ms", "dax"), "torch_hand_ms": med("hand_ms", "torch"),
            "dax_autodiff_ms": med("autodiff_ms", "dax"), "torch_autograd_ms": med("autograd_ms", "torch"),
            "hand_speed_ratio_median": statistics.median(hand), "hand_speed_ratio_min": min(hand),
            "hand_speed_ratio_max": max(hand),
            "autodiff_speed_ratio_median": statistics.median(auto), "autodiff_speed_ratio_min": min(auto),
            "autodiff_speed_ratio_max": max(auto),
            "dax_bytes_per_step": rounds[-1]["dax"]["hand_bytes"],
        })
    print("\n| ranks | dax by hand ms | PyTorch by hand ms | speed dax/PyTorch (median, min-max) "
          "| dax autodiff ms | PyTorch autograd ms | speed dax/PyTorch (median, min-max) |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['ranks']} | {r['dax_hand_ms']:.1f} | {r['torch_hand_ms']:.1f} | {r['hand_speed_ratio_median']:.3f} "
              f"({r['hand_speed_ratio_min']:.3f}-{r['hand_speed_ratio_max']:.3f}) | {r['dax_autodiff_ms']:.1f} | "
              f"{r['torch_autograd_ms']:.1f} | {r['autodiff_speed_ratio_median']:.3f} "
              f"({r['autodiff_speed_ratio_min']:.3f}-{r['autodiff_speed_ratio_max']:.3f}) |")
    write_json(args.json, {"benchmark": "mlp_step", "machine": platform.processor() or platform.machine(),
                           "cpus": os.cpu_count(), "torch": torch_version, "rounds": args.rounds,
                           "steps": args.steps, "results": results})


if __name__ == "__main__":
    main()
