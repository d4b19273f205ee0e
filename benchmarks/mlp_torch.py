#!/usr/bin/env python3
"""The MLP training step of benchmarks/cuda_bench.cu (section e) in PyTorch eager on CUDA.

Same shapes (B=4096, D=1024, H=4096, float32) and the same ops in the same order, the backward
pass written by hand with torch.matmul (no autograd): z = x @ w1, a = relu(z), out = a @ w2,
loss = mean((out - y)^2), dy = 2 (out - y) / (B D), gw2 = a.T @ dy, da = dy @ w2.T,
dz = where(z > 0, da, 0), gw1 = x.T @ dz, then SGD on w1 and w2. Timed with torch.cuda.synchronize
around each step (host clock), median over the samples, after warm-up; once with full float32
products ("highest", PyTorch's default) and once with TF32 allowed ("high"), as cuda_bench does.
Exits 0 with a SKIPPED line when PyTorch or a CUDA device is missing.

    python3 benchmarks/mlp_torch.py [--json FILE] [--samples N] [--warmup N]
"""
import argparse
import json
import math
import statistics
import sys
import time


def write_json(path, data):
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")


def skip(path, why):
    print(f"SKIPPED: {why}")
    write_json(path, {"benchmark": "mlp_torch", "skipped": why})
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="", help="write the figures to this file")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--din", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=4096)
    args = parser.parse_args()

    try:
        import torch
    except ImportError:
        return skip(args.json, "PyTorch is not installed")
    if not torch.cuda.is_available():
        return skip(args.json, "no CUDA device visible to PyTorch")

    B, D, H, lr = args.batch, args.din, args.hidden, 0.01
    dev = torch.device("cuda")
    flops = 5 * 2.0 * B * D * H

    def step(x, y, w1, w2, zero):
        z = torch.matmul(x, w1)
        a = torch.relu(z)
        out = torch.matmul(a, w2)
        err = out - y
        loss = torch.mean(torch.square(err))  # noqa: F841  (computed, like dax's step; not read)
        dy = err * (2.0 / (B * D))
        gw2 = torch.matmul(a.T, dy)
        da = torch.matmul(dy, w2.T)
        dz = torch.where(z > zero, da, zero)
        gw1 = torch.matmul(x.T, dz)
        return w1 - gw1 * lr, w2 - gw2 * lr

    rows = []
    print(f"# PyTorch {torch.__version__} eager MLP step on {torch.cuda.get_device_name(dev)}: B={B}, D={D}, H={H}, "
          f"float32, hand-written backward, SGD; torch.cuda.synchronize around each step, median of {args.samples}")
    print("#  dtype      wall(ms)  TF/s")
    with torch.inference_mode():
        for precision in ("highest", "high"):
            torch.set_float32_matmul_precision(precision)
            gen = torch.Generator(device=dev).manual_seed(0)
            x = torch.randn(B, D, device=dev, generator=gen)
            y = torch.randn(B, D, device=dev, generator=gen)
            w1 = torch.randn(D, H, device=dev, generator=gen) / math.sqrt(D)
            w2 = torch.randn(H, D, device=dev, generator=gen) / math.sqrt(H)
            zero = torch.zeros((), device=dev)
            for _ in range(args.warmup):
                w1, w2 = step(x, y, w1, w2, zero)
            times = []
            for _ in range(args.samples):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                w1, w2 = step(x, y, w1, w2, zero)
                torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) * 1e3)
            ms = statistics.median(times)
            label = "f32" if precision == "highest" else "f32/tf32"
            print(f"{label:<9} {ms:10.3f} {flops / (ms * 1e-3) / 1e12:6.2f}")
            rows.append({"precision": precision, "ms_per_step": ms, "tflops": flops / (ms * 1e-3) / 1e12,
                         "samples": args.samples})
    torch.set_float32_matmul_precision("highest")
    write_json(args.json, {"benchmark": "mlp_torch", "torch": torch.__version__,
                           "device": torch.cuda.get_device_name(dev), "batch": B, "din": D, "hidden": H,
                           "flops_per_step": flops, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
