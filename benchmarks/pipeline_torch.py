#!/usr/bin/python3
"""The MLP pipeline of benchmarks/pipeline_bench.cpp in PyTorch on the CPU, for benchmarks/pipeline.

Debian 12's PyTorch (1.13) has no torch.distributed.pipelining, so this is the pipeline a PyTorch
user writes by hand, as its tutorials did before it: one process per stage (gloo), each holding
its stage's layers (nn.Linear + tanh; stage 0 first scales its input by a learned scalar, as
pipeline_bench does, so the stages do equal work), activations sent forward with isend and gradients back,
the passes in the schedule's order (GPipe: every forward, then every backward; 1F1B: p - s - 1
warm-up forwards, then one forward and one backward in turn), the backward of a microbatch
through torch.autograd.backward on its saved output. One thread per process. Prints one JSON line
per microbatch count, as pipeline_bench does: {"schedule", "stages", "microbatches", "step_s"}.

    /usr/bin/python3 benchmarks/pipeline_torch.py --ranks P --schedule 1F1B [--microbatches 4,8,16]
                     [--width D] [--rows R] [--layers L] [--steps S] [--warmup W]
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def order(schedule, stages, stage, m):
    """The stage's passes: ("F", i) and ("B", i), as dax::pipeline::make_schedule orders them."""
    if schedule == "GPipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warmup = min(stages - stage - 1, m)
    out = [("F", i) for i in range(warmup)]
    f, b = warmup, 0
    while f < m:
        out += [("F", f), ("B", b)]
        f, b = f + 1, b + 1
    out += [("B", i) for i in range(b, m)]
    return out


def step(model, schedule, rank, world, m, rows, width, inputs):
    held = {}  # microbatch -> (input, output)
    sends = []
    for kind, i in order(schedule, world, rank, m):
        if kind == "F":
            if rank == 0:
                x = inputs[i]
            else:
                x = torch.empty(rows, width)
                dist.recv(x, rank - 1)
                x.requires_grad_()
            y = model(x)
            if rank + 1 < world:
                sends.append(dist.isend(y.detach(), rank + 1))
            held[i] = (x, y)
        else:
            x, y = held.pop(i)
            if rank + 1 < world:
                g = torch.empty(rows, width)
                dist.recv(g, rank + 1)
                torch.autograd.backward(y, g)
            else:
                torch.autograd.backward((y * y).mean() / m)
            if rank > 0:
                sends.append(dist.isend(x.grad, rank - 1))
    for s in sends:
        s.wait()


def run(rank, world, args, out):
    torch.set_num_threads(1)
    torch.manual_seed(7 + rank)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    layers = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.width, args.width), nn.Tanh()]
    model = nn.Sequential(*layers)
    # Stage 0 scales its input by a learned scalar, as pipeline_bench's chunk 0 does (equal stages).
    scale = nn.Parameter(torch.ones(())) if rank == 0 else None
    run_stage = (lambda x: model(x * scale)) if rank == 0 else model
    for m in [int(v) for v in args.microbatches.split(",")]:
        inputs = [torch.randn(args.rows, args.width) for _ in range(m)]
        times = []
        for s in range(args.warmup + args.steps):
            model.zero_grad(set_to_none=True)
            if scale is not None:
                scale.grad = None
            dist.barrier()
            start = time.perf_counter()
            step(run_stage, args.schedule, rank, world, m, args.rows, args.width, inputs)
            seconds = time.perf_counter() - start
            t = torch.tensor([seconds], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank, as pipeline_bench times it
            if s >= args.warmup:
                times.append(float(t[0]))
        if rank == 0:
            times.sort()
            out.put({"schedule": args.schedule, "stages": world, "microbatches": m, "rows": args.rows,
                     "width": args.width, "layers_per_stage": args.layers, "step_s": times[len(times) // 2],
                     "torch": torch.__version__})
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--schedule", default="1F1B", choices=["GPipe", "1F1B"])
    parser.add_argument("--microbatches", default="4,8,16")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--port", type=int, default=29531)
    args = parser.parse_args()
    import torch.multiprocessing as mp
    q = mp.get_context("spawn").SimpleQueue()
    mp.spawn(run, args=(args.ranks, args, q), nprocs=args.ranks, join=True)
    while not q.empty():
        print(json.dumps(q.get()))


if __name__ == "__main__":
    main()
