#!/usr/bin/python3
"""The training step of examples/transformer_lm in PyTorch eager on the CPU, for benchmarks/train_step.

The same model as examples/transformer_lm.hpp, written as a PyTorch user would (nn.Linear,
nn.LayerNorm, nn.Embedding, attention with a causal mask and softmax, F.cross_entropy): 2 pre-LN
layers, d_model 128, 4 heads, MLP 512 with tanh-GELU, byte vocabulary 256, sequence 64, untied
head; then clip_grad_norm_(1.0) and torch.optim.AdamW. One thread per process. At --ranks 1 it
runs eagerly in this process; at --ranks N it spawns N processes under DistributedDataParallel
with the gloo backend, each with batch/N of the global batch. Prints one JSON line:
{"ranks", "batch", "tokens_per_s", "step_ms", "torch"}.

    /usr/bin/python3 benchmarks/train_step_torch.py [--ranks N] [--batch B] [--steps S] [--warmup W]

On a GPU (benchmarks/train_step_gpu.py, one rank): --device cuda with the model's size
(--layers, --d-model, --heads, --vocab, --seq) and --precision bf16 (torch.autocast to bfloat16,
the usual PyTorch mixed precision); --attention sdpa takes F.scaled_dot_product_attention
(flash attention) in place of the masked softmax, which is what a PyTorch user gets today.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.w1 = nn.Linear(d, 4 * d)
        self.w2 = nn.Linear(4 * d, d)
        self.masked = ~torch.ones(seq, seq, dtype=torch.bool).tril()  # not a buffer: gloo broadcasts no bool
        self.sdpa = False

    def attention(self, x, batch, seq):
        d = x.shape[-1]
        hd = d // self.heads
        split = lambda t: t.view(batch, seq, self.heads, hd).transpose(1, 2)  # (b, h, t, e)
        q, k, v = split(self.wq(x)), split(self.wk(x)), split(self.wv(x))
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(out.transpose(1, 2).reshape(batch * seq, d))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        probs = scores.masked_fill(self.masked, float("-inf")).softmax(dim=-1)
        out = (probs @ v).transpose(1, 2).reshape(batch * seq, d)
        return self.wo(out)

    def forward(self, x, batch, seq):
        x = x + self.attention(self.ln1(x), batch, seq)
        return x + self.w2(F.gelu(self.w1(self.ln2(x)), approximate="tanh"))


class LM(nn.Module):
    def __init__(self, layers=2, d=128, heads=4, vocab=256, seq=64):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, seq) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids, positions, labels, batch, seq):
        x = self.wte(ids) + self.wpe(positions)  # (batch * seq, d)
        for block in self.blocks:
            x = block(x, batch, seq)
        return F.cross_entropy(self.head(self.lnf(x)), labels)


def run(rank, world, args, out):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    device = torch.device(args.device)
    seq, vocab = args.seq, args.vocab
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    model = LM(args.layers, args.d_model, args.heads, vocab, seq).to(device)
    for block in model.blocks:
        block.masked = block.masked.to(device)
        block.sdpa = args.attention == "sdpa"
    step_model = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    batch = args.batch // world
    gen = torch.Generator().manual_seed(99 + rank)
    text = torch.randint(0, vocab, (1 << 16,), generator=gen)
    positions = torch.arange(seq).repeat(batch).to(device)
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step():
        starts = torch.randint(0, text.numel() - seq - 1, (batch,), generator=gen)
        windows = torch.stack([text[s:s + seq + 1] for s in starts.tolist()]).to(device)
        ids, labels = windows[:, :-1].reshape(-1), windows[:, 1:].reshape(-1)
        with autocast:
            loss = step_model(ids, positions, labels, batch, seq)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    sync()
    if world > 1:
        torch.distributed.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    if world > 1:
        torch.distributed.barrier()
    seconds = time.perf_counter() - start
    if args.profile and rank == 0:  # one more step under torch.profiler: its kernels' time by op
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            sync()
        with open(args.profile, "w") as f:
            f.write(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=40))
    if rank == 0:
        tokens = args.batch * seq * args.steps
        result = {"ranks": world, "batch": args.batch, "tokens_per_s": tokens / seconds,
                  "step_ms": 1e3 * seconds / args.steps, "torch": torch.__version__, "loss": float(loss)}
        if device.type == "cuda":
            result["peak_bytes"] = torch.cuda.max_memory_allocated()
        out.put(result)
    if world > 1:
        torch.distributed.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--port", type=int, default=29517)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--profile", default="", help="a table of one more step's kernel time by op, written here")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--attention", choices=["math", "sdpa"], default="math")
    args = parser.parse_args()
    if args.batch % args.ranks != 0:
        sys.exit(f"train_step_torch: --batch {args.batch} must divide by --ranks {args.ranks}")
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
