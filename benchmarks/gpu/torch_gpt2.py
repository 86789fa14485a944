#!/usr/bin/env python3
"""PyTorch peer of the GPT-2 small throughput bench (benchmarks/gpu/bench_2_gpt2.sh): the same
model as subdp's GPT (pre-LN blocks, GELU tanh, tied embedding head, no dropout, no biases
folded away), AdamW, random tokens, measured in tokens per second after warm-up, in float32,
float32 with TF32 matmuls (allow_tf32), bf16 autocast (eager) and bf16 autocast under
torch.compile. Prints one CSV row per mode:
mode,tokens_per_s,step_s,params,phases,peak_bytes (phases: the median forward, backward and
optimizer milliseconds of the timed steps, by CUDA events on the GPU; peak_bytes:
torch.cuda.max_memory_allocated of the mode, empty on the CPU); a mode that fails prints
mode,,,failed: <error> and the next mode still runs.

Usage: torch_gpt2.py --batch B --context T --steps N [--modes fp32,tf32,bf16,compile] [--device cpu]
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def causal_attention(q, k, v):
    """Causal softmax(q k^T / sqrt(hd)) v over (B, H, T, hd): PyTorch's fused SDPA (>= 2.0, the
    GPU machine's peer); an older PyTorch (Debian's 1.13, the CPU rehearsal) computes the same
    by matrices, so the rehearsal runs the peer's every other line."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return att.masked_fill(future, float("-inf")).softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, width, heads, depth):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.lnf = nn.LayerNorm(width)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))


def measure(mode, args):
    torch.manual_seed(0)
    dev = args.device
    if dev == "cuda":  # each mode's own peak
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = GPT(args.vocab, args.context, args.width, args.heads, args.depth).to(dev)
    # The fused AdamW on a GPU (the peer at its best); the rehearsal's CPU torch (Debian's 1.13)
    # has neither it nor the argument.
    fused = {"fused": True} if dev == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused)
    step_fn = model
    if mode == "compile":
        step_fn = torch.compile(model)
    bf16 = mode in ("bf16", "compile")
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"  # fp32 means fp32, as subdp's default
    x = torch.randint(0, args.vocab, (args.batch, args.context), device=dev)
    y = torch.randint(0, args.vocab, (args.batch, args.context), device=dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    # Phase marks: CUDA events on the current stream (read after the final synchronisation, as
    # subdp's phases_s), the host clock on the CPU.
    class HostMark:
        def record(self):
            self.t = time.perf_counter()

        def elapsed_time(self, end):
            return (end.t - self.t) * 1e3

    mark = (lambda: torch.cuda.Event(enable_timing=True)) if dev == "cuda" else HostMark

    def step(marks=None):
        marks = marks or [HostMark() for _ in range(4)]
        marks[0].record()
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=bf16):
            loss = step_fn(x, y)
        marks[1].record()
        loss.backward()
        marks[2].record()
        opt.step()
        opt.zero_grad(set_to_none=True)
        marks[3].record()

    for _ in range(3):  # warm-up (and compilation)
        step()
    sync()
    timed = [[mark() for _ in range(4)] for _ in range(args.steps)]
    t0 = time.perf_counter()
    for marks in timed:
        step(marks)
    sync()
    dt = (time.perf_counter() - t0) / args.steps
    params = sum(p.numel() for p in model.parameters())
    cells = []
    for i, name in enumerate(("forward", "backward", "optimizer")):
        ms = sorted(m[i].elapsed_time(m[i + 1]) for m in timed)
        cells.append(f"{name} {ms[len(ms) // 2]:.2f} ms")
    peak = torch.cuda.max_memory_allocated() if dev == "cuda" else ""
    print(f"torch-{mode},{args.batch * args.context / dt:.1f},{dt:.5f},{params},{'; '.join(cells)},{peak}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--modes", default="fp32,tf32,bf16,compile")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    for mode in args.modes.split(","):
        if mode not in ("fp32", "tf32", "bf16", "compile"):
            print(f"torch-{mode},,,failed: unknown mode (expected fp32; tf32; bf16 or compile)", flush=True)
            continue
        try:
            measure(mode, args)
        except Exception as e:  # one mode's failure (compile, an old torch) loses no other
            msg = f"{type(e).__name__}: {e}".replace(",", ";").replace("\n", " ")[:300]
            print(f"torch-{mode},,,failed: {msg}", flush=True)


if __name__ == "__main__":
    main()
