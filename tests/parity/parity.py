#!/usr/bin/env python3
"""PyTorch parity check (design brief invariant 7): loads the weights and batch that
`subdp parity-dump` wrote, builds the same model in PyTorch, and compares the logits, the
loss, every parameter gradient and the losses of the first optimizer steps.

  parity.py MODEL DUMP_DIR --lr LR [--weight-decay WD] [--beta1 B1] [--beta2 B2] [--eps EPS] [--tol 1e-4]
            [--step-tol TOL]
Exits 1 naming the first tensor whose relative error (max |a - b| / max |b|) exceeds tol.
"""
import argparse, json, os, sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import torch_peer  # noqa: E402  (the project's PyTorch twins of the reference models)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_reader import read_numpy  # noqa: E402


def read(path):
    """{name: torch float32 tensor} of a subdp safetensors file."""
    return {name: torch.from_numpy(a.copy()) for name, a in read_numpy(path).items()}


def rel_err(a, b):
    return float((a.double() - b.double()).abs().max() / max(float(b.double().abs().max()), 1e-12))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("dump")
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--step-tol", type=float, default=None,
                   help="tolerance for the losses after optimizer steps (default: --tol)")
    a = p.parse_args()
    torch.set_num_threads(1)
    model = torch_peer.build(a.model)
    weights = read(os.path.join(a.dump, "weights.safetensors"))
    state = model.state_dict()
    for name, value in weights.items():
        if name not in state:
            sys.exit(f"FAIL: engine tensor {name} has no PyTorch twin")
        state[name] = value.reshape(state[name].shape)
    model.load_state_dict(state, strict=False)
    model.train()
    batch = read(os.path.join(a.dump, "batch.safetensors"))
    x = batch["x"].long() if a.model in ("gpt", "llama", "llama-gqa") else batch["x"]
    y = batch["y"].long()
    out = read(os.path.join(a.dump, "outputs.safetensors"))
    worst = []

    def check(name, ours, theirs):
        err = rel_err(ours, theirs)
        worst.append((err, name))
        if err > a.tol:
            sys.exit(f"FAIL: {name}: relative error {err:.3g} > {a.tol}")

    logits = model(x)
    logits2 = logits.reshape(-1, logits.shape[-1])
    loss = F.cross_entropy(logits2, y.reshape(-1))
    loss.backward()
    check("logits", out["logits"], logits2.detach())
    check("loss", out["loss"], loss.detach().reshape(1))
    params = dict(model.named_parameters())
    for name, g in out.items():
        if name.startswith("grad."):
            check(name, g.reshape(params[name[5:]].shape), params[name[5:]].grad)
    # Optimizer steps on the same batch, from fresh weights.
    model = torch_peer.build(a.model)
    model.load_state_dict(state, strict=False)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                            weight_decay=a.weight_decay)
    ours = json.load(open(os.path.join(a.dump, "losses.json")))
    theirs = []
    for _ in ours:
        opt.zero_grad()
        l = F.cross_entropy(model(x).reshape(-1, logits.shape[-1]), y.reshape(-1))
        l.backward()
        opt.step()
        theirs.append(l.item())
    for i, (o, t) in enumerate(zip(ours, theirs)):
        # Relative to the first loss: late losses approach 0 where a relative error is meaningless.
        err = abs(o - t) / max(abs(theirs[0]), 1e-12)
        worst.append((err, f"loss after step {i}"))
        step_tol = a.step_tol if a.step_tol is not None else a.tol
        if err > step_tol:
            sys.exit(f"FAIL: loss after {i} AdamW steps: subdp {o}, PyTorch {t} (error {err:.3g} > {step_tol})")
    err, name = max(worst)
    print(f"ok: {a.model}: {len(worst)} comparisons, worst relative error {err:.2g} ({name})")


if __name__ == "__main__":
    main()
