#!/usr/bin/env python3
"""PyTorch peer for subdp's benchmarks: trains the reference MLP, ResNet or GPT on the CPU
with the same architecture, batch and optimizer as the subdp run it is compared with, and
prints one JSON line: {"model", "batch", "ranks", "threads", "steps", "step_s", "rate", "unit", ...}.
With --ddp N it runs N ranks of DistributedDataParallel over gloo, --batch per rank; rate
is then over all ranks (items per step of every rank / the slowest rank's step time).

Needs Debian's python3-torch (run with /usr/bin/python3).
"""
import argparse, gzip, json, os, struct, time

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_llama import Llama

FMNIST = "/usr/share/datasets/fashion-mnist"


def fashion_mnist(n):
    with gzip.open(f"{FMNIST}/train-images-idx3-ubyte.gz", "rb") as f:
        _, count, h, w = struct.unpack(">IIII", f.read(16))
        x = torch.frombuffer(bytearray(f.read(n * h * w)), dtype=torch.uint8)
    with gzip.open(f"{FMNIST}/train-labels-idx1-ubyte.gz", "rb") as f:
        f.read(8)
        y = torch.frombuffer(bytearray(f.read(n)), dtype=torch.uint8).long()
    return x.view(n, 1, h, w).float() / 255.0, y


class Residual(nn.Module):
    """BasicBlock: relu(bn2(conv2(relu(bn1(conv1 x)))) + shortcut x)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(h + (x if self.short is None else self.short(x)))


def resnet(widths=(32, 64, 128), per_stage=2, classes=10):
    stem = nn.Sequential(nn.Conv2d(1, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
    blocks, cin = [], widths[0]
    for s, w in enumerate(widths):
        for b in range(per_stage):
            blocks.append(Residual(cin, w, 2 if b == 0 and s > 0 else 1))
            cin = w

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.blocks, self.fc = stem, nn.Sequential(*blocks), nn.Linear(cin, classes)

        def forward(self, x):
            return self.fc(self.blocks(self.stem(x)).mean((2, 3)))

    return Net()


class Mlp(nn.Module):
    """784 -> 1024 -> 1024 -> 10 with ReLU; parameters named net.1, net.3, net.5 as in subdp."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                 nn.Linear(1024, 10))

    def forward(self, x):
        return self.net(x)


def mlp():
    return Mlp()


def windows(data, starts, T):
    """Windows of T+1 tokens of `data` (uint8 tensor) at `starts`: inputs and targets, (n, T) int64."""
    win = torch.stack([data[s:s + T + 1] for s in starts.tolist()]).long()
    return win[:, :T], win[:, 1:]


def byte_windows(path, n, T):
    """n random windows of T+1 bytes of the file at `path`: inputs (n, T) and targets (n, T), int64."""
    data = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.uint8)
    return windows(data, torch.randint(0, data.numel() - T - 1, (n,)), T)


def build(name):
    """The PyTorch twin of subdp's reference model `name` (parameter names match subdp's)."""
    if name == "mlp":
        return mlp()
    if name == "resnet":
        return resnet()
    if name == "gpt":
        return GPT()
    if name == "llama":
        return Llama()
    if name == "llama-gqa":  # configs/llama_brown.toml with model.kv_heads = 2
        return Llama(kv_heads=2)
    raise ValueError(name)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + proj(attn(ln1 x)); x + fc2(gelu(fc(ln2 x)))."""

    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = (t.view(B, T, self.heads, hd).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) / hd ** 0.5
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    """Byte-level GPT: token + position embedding, pre-LN blocks, final LN, tied head."""

    def __init__(self, vocab=256, ctx=128, d=256, heads=8, depth=6):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(depth)])
        self.lnf = nn.LayerNorm(d)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.lnf(x) @ self.wte.weight.t()


def train(a, rank=0, world=1):
    """Trains a.warmup + a.steps steps of a.batch per rank; returns seconds per step after the
    warm-up. world > 1: inside an initialised gloo process group, the model under DDP, each
    rank on its own slice of the same batches (rank-offset windows)."""
    torch.manual_seed(0)
    model = build(a.model)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    if a.model in ("gpt", "llama"):
        x_all, y_all = byte_windows(a.text, a.batch * 8 * world, 128)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    else:
        x_all, y_all = fashion_mnist(a.batch * 8 * world)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            start = time.perf_counter()
        i = ((step % 8) * world + rank) * a.batch
        logits = model(x_all[i:i + a.batch])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y_all[i:i + a.batch].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / a.steps


def ddp_worker(rank, world, a, out):
    torch.set_num_threads(a.threads)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    step_s = train(a, rank, world)
    slowest = torch.tensor([step_s])
    torch.distributed.all_reduce(slowest, op=torch.distributed.ReduceOp.MAX)
    if rank == 0:
        out.put(slowest.item())
    torch.distributed.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "resnet", "gpt", "llama"], required=True)
    p.add_argument("--text", default="data/brown/brown.txt", help="byte corpus for --model gpt and llama")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="intra-op threads (per rank with --ddp)")
    p.add_argument("--ddp", type=int, default=1, help="ranks of DistributedDataParallel over gloo; --batch is per rank")
    a = p.parse_args()
    if a.ddp > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # inherited by the ranks
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        ctx = torch.multiprocessing.get_context("spawn")
        out = ctx.SimpleQueue()
        torch.multiprocessing.spawn(ddp_worker, args=(a.ddp, a, out), nprocs=a.ddp)
        step_s = out.get()  # the slowest rank's
    else:
        torch.set_num_threads(a.threads)
        step_s = train(a)
    per_step, unit = (a.batch * 128, "tokens/s") if a.model in ("gpt", "llama") else (a.batch, "samples/s")
    print(json.dumps({"model": a.model, "batch": a.batch, "ranks": a.ddp, "threads": a.threads, "steps": a.steps,
                      "step_s": step_s, "rate": per_step * a.ddp / step_s, "unit": unit, "torch": torch.__version__,
                      "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "")}))


if __name__ == "__main__":
    main()
