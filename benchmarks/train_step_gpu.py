#!/usr/bin/env python3
"""The transformer's training step on one GPU: dax (train_step_cuda) against PyTorch eager (issue 40).

The model of examples/transformer_lm.hpp at GPT-2 small's size (12 layers, d_model 768, 12 heads,
sequence 1024, vocabulary 50,304, untied head), AdamW and clip_by_global_norm(1.0), one GPU, in
float32 (full fp32 products on both sides) and in bfloat16 mixed precision (dax: --precision bf16,
the products in bfloat16 with float32 parameters; PyTorch: torch.autocast to bfloat16). PyTorch
runs the same ops (masked softmax attention, "math") and, as a second reference, with
F.scaled_dot_product_attention ("sdpa", flash attention), which is what a PyTorch user gets.
Each round runs every program once, the order flipping every round; the ratio is taken per round
and the median reported. A program that fails is recorded with its error and the rest go on, so
one failure costs no other figure on a short GPU lease.

Model FLOPs per token: 6 N + 12 L d T (nanoGPT's and PaLM's count; N the parameters that
multiply: the layers' 12 L d^2 and the head's d V; attention counted whole, not causal); MFU
is that over the GPU's dense peak (--peak-tflops, H100/H200 SXM: 989 bf16, 67 fp32).

dax's attention is dot_product_attention's automatic choice (bf16: the fused tensor-core kernels;
float32: the composite of cuBLAS products); --dax-attention composite,fused adds dax runs with
each forced, to tell what the fused kernels give.

    python3 benchmarks/train_step_gpu.py --build build-gpu [--rounds 2] [--json FILE] [--dax-attention composite]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(cmd, env):
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 300 s"}
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": f"exit {out.returncode}: " + (out.stdout + out.stderr)[-1500:]}
    return json.loads(lines[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build-gpu"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--precisions", default="f32,bf16")
    # Extra dax runs with dot_product_attention forced ("composite,fused"): auto is always run.
    parser.add_argument("--dax-attention", default="")
    parser.add_argument("--peak-tflops", default="f32:67,bf16:989")
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    program = os.path.join(args.build, "benchmarks", "train_step_cuda")
    if not os.path.exists(program):
        sys.exit(f"train_step_gpu: FAILED: {program} is not built")
    env = dict(os.environ, DAX_BACKEND="cuda")
    size = ["--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--layers", str(args.layers), "--d-model", str(args.d_model), "--heads", str(args.heads),
            "--vocab", str(args.vocab), "--seq", str(args.seq)]
    d, L, V, T = args.d_model, args.layers, args.vocab, args.seq
    flops_per_token = 6 * (12 * L * d * d + d * V) + 12 * L * d * T
    peaks = dict((k, float(v)) for k, v in (p.split(":") for p in args.peak_tflops.split(",")))
    torch_py = os.path.join(HERE, "train_step_torch.py")
    results = []
    for precision in args.precisions.split(","):
        commands = {
            "dax": [program] + size + ["--precision", precision],
            **{f"dax_{a}": [program] + size + ["--precision", precision, "--attention", a]
               for a in args.dax_attention.split(",") if a},
            "torch_math": [sys.executable, torch_py, "--device", "cuda", "--attention", "math",
                           "--precision", precision] + size,
            "torch_sdpa": [sys.executable, torch_py, "--device", "cuda", "--attention", "sdpa",
                           "--precision", precision] + size,
        }
        names = list(commands)
        rounds = []
        for r in range(args.rounds):
            got = {}
            for name in (names if r % 2 == 0 else names[::-1]):
                got[name] = run_json(commands[name], env)
                shown = got[name].get("tokens_per_s", got[name].get("error", "")[:300])
                print(f"{precision} round {r + 1} {name}: {shown}", flush=True)
            rounds.append(got)
        entry = {"precision": precision, "rounds": rounds}

        def tps(name):
            v = [g[name]["tokens_per_s"] for g in rounds if "tokens_per_s" in g[name]]
            return statistics.median(v) if v else None

        for name in names:
            entry[f"{name}_tokens_per_s"] = tps(name)
        for ref in ("torch_math", "torch_sdpa"):
            ratios = [g["dax"]["tokens_per_s"] / g[ref]["tokens_per_s"] for g in rounds
                      if "tokens_per_s" in g["dax"] and "tokens_per_s" in g[ref]]
            entry[f"dax_vs_{ref}"] = statistics.median(ratios) if ratios else None
        peak = peaks.get(precision)
        for name in names:
            t = entry[f"{name}_tokens_per_s"]
            entry[f"{name}_mfu"] = t * flops_per_token / (peak * 1e12) if t and peak else None
        results.append(entry)

    print(f"\nmodel FLOPs per token {flops_per_token / 1e9:.3f} GFLOP; tokens per step {args.batch * T}")
    print("| precision | dax tokens/s (MFU) | PyTorch same ops (MFU) | PyTorch sdpa (MFU) | dax / same ops | dax / sdpa |")
    print("|---|---|---|---|---|---|")
    fmt = lambda t, m: f"{t:.0f} ({100 * m:.1f}%)" if t else "failed"
    rat = lambda x: f"{x:.3f}" if x else "-"
    for e in results:
        print(f"| {e['precision']} | {fmt(e['dax_tokens_per_s'], e['dax_mfu'])} | "
              f"{fmt(e['torch_math_tokens_per_s'], e['torch_math_mfu'])} | "
              f"{fmt(e['torch_sdpa_tokens_per_s'], e['torch_sdpa_mfu'])} | "
              f"{rat(e['dax_vs_torch_math'])} | {rat(e['dax_vs_torch_sdpa'])} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "train_step_gpu", "flops_per_token": flops_per_token,
                       "peak_tflops": peaks, "config": vars(args), "results": results}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
