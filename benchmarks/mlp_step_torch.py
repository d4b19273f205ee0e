#!/usr/bin/python3
"""The MLP training step of benchmarks/autodiff_bench in PyTorch eager on the CPU, for benchmarks/mlp_step.

Same shapes (din 1024 -> hidden 4096 -> dout 1024, global batch 256, float32) and the same ops in the
same order as autodiff_bench's two steps: relu(x @ w1 + b1) @ w2 + b2, mean squared error against a
target, then plain SGD. Once with the backward written by hand with torch.matmul (what dax's
"hand-written" step does) and once with autograd (against dax::value_and_grad). One thread per
process. At --ranks 1 it runs in this process; at --ranks N it spawns N processes over gloo, each
with batch/N rows, and all-reduces the four gradients (what dax's data-parallel step moves).
Prints one JSON line: {"ranks", "batch", "hand_ms", "autograd_ms", "torch"}: median step times (the
slowest rank's), each step measured twice, interleaved, the faster kept (as autodiff_bench does).

    /usr/bin/python3 benchmarks/mlp_step_torch.py [--ranks N] [--batch B] [--steps S] [--warmup W]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch


def run(rank, world, args, out):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist = world > 1
    if dist:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    din, hidden, dout, lr = args.din, args.hidden, args.din, 1e-3
    rows = args.batch // world
    gen = torch.Generator().manual_seed(7 + rank)
    x = torch.randn(rows, din, generator=gen)
    t = torch.randn(rows, dout, generator=gen)
    init = [torch.randn(din, hidden) * 0.02, torch.zeros(hidden), torch.randn(hidden, dout) * 0.02,
            torch.zeros(dout)]
    scale = 2.0 / (args.batch * dout)  # the mean is over the global batch

    def reduce(grads):
        if dist:
            for g in grads:
                torch.distributed.all_reduce(g)
        return grads

    def hand_step(p):
        w1, b1, w2, b2 = p
        z1 = x @ w1 + b1
        h = torch.relu(z1)
        err = h @ w2 + b2 - t
        loss = err.square().mean()
        dy = err * scale
        dz1 = (dy @ w2.T).masked_fill_(z1 <= 0, 0.0)  # relu's mask in place, as autograd does
        grads = reduce([x.T @ dz1, dz1.sum(0), h.T @ dy, dy.sum(0)])
        for q, g in zip(p, grads):
            q.sub_(g, alpha=lr)
        return loss

    def autograd_step(p):
        w1, b1, w2, b2 = p
        err = torch.relu(x @ w1 + b1) @ w2 + b2 - t
        loss = err.square().mean()
        grads = reduce(list(torch.autograd.grad(loss, p)))
        with torch.no_grad():
            for q, g in zip(p, grads):
                q.sub_(g, alpha=lr)
        return loss

    def measure(step, params):
        for _ in range(args.warmup):
            step(params)
        times = []
        for _ in range(args.steps):
            if dist:
                torch.distributed.barrier()
            start = time.perf_counter()
            step(params)
            seconds = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            if dist:
                torch.distributed.all_reduce(seconds, op=torch.distributed.ReduceOp.MAX)
            times.append(seconds.item())
        return statistics.median(times)

    # Interleaved twice and the faster of each kept, as autodiff_bench does for dax.
    hand1 = measure(hand_step, [p.clone() for p in init])
    autograd1 = measure(autograd_step, [p.clone().requires_grad_() for p in init])
    hand2 = measure(hand_step, [p.clone() for p in init])
    autograd2 = measure(autograd_step, [p.clone().requires_grad_() for p in init])
    hand, autograd = min(hand1, hand2), min(autograd1, autograd2)
    if rank == 0:
        out.put({"ranks": world, "batch": args.batch, "hand_ms": 1e3 * hand, "autograd_ms": 1e3 * autograd,
                 "torch": torch.__version__})
    if dist:
        torch.distributed.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--din", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--port", type=int, default=29519)
    args = parser.parse_args()
    if args.batch % args.ranks != 0:
        sys.exit(f"mlp_step_torch: --batch {args.batch} must divide by --ranks {args.ranks}")
    if args.ranks == 1:
        import queue
        q = queue.Queue()
        run(0, 1, args, q)
    else:
        import torch.multiprocessing as mp
        q = mp.get_context("spawn").SimpleQueue()
        mp.spawn(run, args=(args.ranks, args, q), nprocs=args.ranks, join=True)
    print(json.dumps(q.get()))


if __name__ == "__main__":
    main()
