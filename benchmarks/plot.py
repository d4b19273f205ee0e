#!/usr/bin/python3
"""benchmarks/plot: the PNG figures of docs/performance.md, drawn from the benchmarks' JSON.

Reads every benchmarks/results/*.json that one of the drawers below knows (by its "benchmark"
field) and writes docs/images/<file stem>.png. Needs matplotlib (Debian's
python3-matplotlib; scripts/bench-deps.sh installs it).

    /usr/bin/python3 benchmarks/plot.py [--results benchmarks/results] [--out docs/images]
"""
import argparse
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def bars(ax, labels, series, ylabel, goal=None):
    """Grouped horizontal bars: `series` is [(name, values)], one value per label."""
    height = 0.8 / len(series)
    for k, (name, values) in enumerate(series):
        ys = [i + (k - (len(series) - 1) / 2) * height for i in range(len(labels))]
        ax.barh(ys, values, height=height, label=name)
        for y, v in zip(ys, values):
            ax.text(v, y, f" {v:.2f}", va="center", fontsize=7)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(ylabel)
    if goal is not None:
        ax.axvline(goal, color="black", linestyle="--", linewidth=1, label=f"goal {goal}")
    ax.legend(fontsize=7, loc="lower right")


def matmul(data, plt):
    rows = data["rows"]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.5))
    bars(ax, [r["case"] for r in rows], [("dax / BLAS ceiling (median)", [r["ratio_median"] for r in rows])],
         "time of the BLAS share / time of the dax matmul", goal=0.9)
    ax.set_title(f"matmul ({data['size']})^3 {data['type']}, {data['ranks']} ranks, {data['blas']} 1 thread/rank",
                 fontsize=9)
    return fig


def mlp_step(data, plt):
    res = data["results"]
    labels = [f"{r['ranks']} rank(s)" for r in res]
    fig, ax = plt.subplots(figsize=(7, 2.5))
    bars(ax, labels, [("backward by hand", [r["hand_speed_ratio_median"] for r in res]),
                      ("autodiff vs autograd", [r["autodiff_speed_ratio_median"] for r in res])],
         "PyTorch step time / dax step time (above 1: dax faster)", goal=1.0)
    ax.set_title(f"MLP step 1024-4096-1024, batch {res[0]['batch']}, float32, PyTorch {data['torch']}", fontsize=9)
    return fig


def train_step(data, plt):
    res = data["results"]
    labels = [f"{r['ranks']} rank(s)" for r in res]
    fig, ax = plt.subplots(figsize=(7, 2.2))
    bars(ax, labels, [("dax / PyTorch tokens per second", [r["ratio_median"] for r in res])],
         "dax tokens/s / PyTorch tokens/s", goal=1.0)
    ax.set_title(f"transformer LM training step, PyTorch {data['torch']}", fontsize=9)
    return fig


def reshard(data, plt):
    rows = data["rows"]
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.5))
    bars(ax, [f"{r['transition']} ({r['collective']})" for r in rows], [("raw MPI time / dax time", [r["ratio"] for r in rows])],
         "raw MPI collective time / dax reshard time")
    ax.set_title(f"reshard, float32 {data['mib']} MiB, {data['ranks']} ranks", fontsize=9)
    return fig


def scalapack_peer(data, plt):
    cases = []
    for r in data["rows"]:
        if r["case"] not in cases:
            cases.append(r["case"])
    fig, axes = plt.subplots(len(cases), 1, figsize=(8, 1.6 * len(cases) + 0.5))
    for ax, case in zip(axes, cases):
        rows = [r for r in data["rows"] if r["case"] == case]
        bars(ax, [r["contender"] for r in rows], [("ceiling time / time", [r["ratio"] for r in rows])],
             "ceiling time / time (1 = the raw BLAS share or MPI_Alltoall)")
        ax.set_title(case, fontsize=8)
    fig.suptitle(f"dax against ScaLAPACK, {data['ranks']} ranks", fontsize=9)
    return fig


DRAWERS = {"matmul": matmul, "mlp_step": mlp_step, "train_step": train_step, "reshard": reshard,
           "scalapack_peer": scalapack_peer}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=os.path.join(HERE, "results"))
    parser.add_argument("--out", default=os.path.join(HERE, "..", "docs", "images"))
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        sys.exit(f"plot: FAILED: matplotlib is missing ({e}); run scripts/bench-deps.sh")
    os.makedirs(args.out, exist_ok=True)
    drawn = 0
    for path in sorted(glob.glob(os.path.join(args.results, "*.json"))):
        with open(path) as f:
            data = json.load(f)
        draw = DRAWERS.get(data.get("benchmark"))
        if draw is None:
            continue
        fig = draw(data, plt)
        fig.tight_layout()
        out = os.path.join(args.out, os.path.splitext(os.path.basename(path))[0] + ".png")
        fig.savefig(out, dpi=110)
        plt.close(fig)
        print(f"plot: {os.path.relpath(out)} from {os.path.relpath(path)}")
        drawn += 1
    if drawn == 0:
        sys.exit(f"plot: no benchmark JSON that it knows in {args.results}")


if __name__ == "__main__":
    main()
