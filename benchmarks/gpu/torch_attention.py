#!/usr/bin/env python3
"""PyTorch's causal attention at the shape of subdp_gpu_gemm_bench's attention rows
(benchmarks/gpu/gemm_bench.cpp), the peer of subdp's tensor-core kernels: q, k, v of shape
(B, H, T, hd) in bf16 on the GPU (float32 on the CPU), F.scaled_dot_product_attention with
is_causal, pinned to its FlashAttention-2 backend where PyTorch offers the choice
(torch.nn.attention.sdpa_kernel; math torch-sdpa-flash), else whatever SDPA picks
(torch-sdpa); an older PyTorch without SDPA, Debian's 1.13 in the rehearsal, computes the same
by matrices (torch-matmul). Times the forward, and the backward alone (torch.autograd.grad on
a kept graph, so no call accumulates into .grad), as the mean of N back-to-back calls after 2
unmeasured ones, between two synchronisations, by the host clock. subdp's backward rows also
include the forward pass its kernels take their statistics from; PyTorch's keep them from the
forward.

Prints rows of gemm.csv's format: layer,pass,M,N,K,operands,math,out,ms,rate,unit with rate in
TFLOP/s of the causal products, 2 B H T^2 hd forward and 2.5 times that backward
(gemm_bench.cpp's count). A failure, an import of torch included, prints nothing on stdout and
its reason on stderr, and exits 0: the bench's other rows stay.

Usage: torch_attention.py [--batch 8] [--context 1024] [--heads 12] [--width 64] [--reps 10] [--device cuda]
"""
import argparse
import contextlib
import math
import sys
import time


def sdpa_flash():
    """A context pinning SDPA to FlashAttention-2 and the name it gives the rows, or a null
    context and torch-sdpa where this PyTorch cannot pin it."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([SDPBackend.FLASH_ATTENTION]), "torch-sdpa-flash"
    except ImportError:
        return contextlib.nullcontext(), "torch-sdpa"


def causal_attention(q, k, v):
    """Causal softmax(q k^T / sqrt(hd)) v over (B, H, T, hd) (the shapes of q, k and v), and
    the name of how it was computed."""
    import torch.nn.functional as F
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True), "torch-sdpa"
    import torch
    T = q.shape[-2]
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return att.masked_fill(future, float("-inf")).softmax(-1) @ v, "torch-matmul"


def seconds_per_call(f, reps, sync):
    """Mean seconds of one call to f over reps calls, after 2 unmeasured ones."""
    f()
    f()
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        f()
    sync()
    return (time.perf_counter() - t0) / reps


def main():
    import torch
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    B, T, H, hd, dev = args.batch, args.context, args.heads, args.width, args.device
    gpu = torch.device(dev).type == "cuda"
    dtype = torch.bfloat16 if gpu else torch.float32
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, T, hd, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
    dy = torch.randn(B, H, T, hd, device=dev, dtype=dtype)

    def measure(pin):
        """Forward and backward seconds and the name of how, under the context pin."""
        with pin:
            with torch.no_grad():
                fwd = seconds_per_call(lambda: causal_attention(q, k, v), args.reps, sync)
            y, how = causal_attention(q, k, v)
            bwd = seconds_per_call(lambda: torch.autograd.grad(y, (q, k, v), dy, retain_graph=True), args.reps, sync)
        return fwd, bwd, how

    pin, pinned = sdpa_flash() if gpu else (contextlib.nullcontext(), None)
    try:
        fwd, bwd, how = measure(pin)
        if pinned and how == "torch-sdpa":
            how = pinned
    except RuntimeError as e:  # no FlashAttention-2 for this shape or build: SDPA's own choice
        print(f"torch_attention.py: pinned SDPA failed ({e}); unpinned", file=sys.stderr)
        fwd, bwd, how = measure(contextlib.nullcontext())
    flops = 2.0 * B * H * T * T * hd
    kind = "bf16" if dtype == torch.bfloat16 else "f32"
    for name, s, f in (("forward", fwd, flops), ("backward", bwd, 2.5 * flops)):
        print(f"attention,{name},{T},{T},{hd},{kind},{how},{kind},{s * 1e3:.4f},{f / s / 1e12:.2f},TFLOP/s")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # an import of torch included: the bench's own rows stay
        print(f"torch_attention.py: {type(e).__name__}: {e}", file=sys.stderr)
