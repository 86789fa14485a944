#!/usr/bin/env python3
"""PyTorch peer for subdp's benchmarks: trains the reference MLP, ResNet or GPT on the CPU
with the same architecture, batch and optimizer as the subdp run it is compared with, and
prints one JSON line: {"model", "batch", "threads", "steps", "step_s", "rate", "unit"}.

Needs Debian's python3-torch (run with /usr/bin/python3).
"""
import argparse, gzip, json, os, struct, time

import torch
import torch.nn as nn
import torch.nn.functional as F

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


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "resnet"], required=True)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = mlp() if a.model == "mlp" else resnet()
    x_all, y_all = fashion_mnist(a.batch * 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            start = time.perf_counter()
        i = (step % 8) * a.batch
        loss = F.cross_entropy(model(x_all[i:i + a.batch]), y_all[i:i + a.batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    step_s = (time.perf_counter() - start) / a.steps
    print(json.dumps({"model": a.model, "batch": a.batch, "threads": a.threads, "steps": a.steps, "step_s": step_s,
                      "rate": a.batch / step_s, "unit": "samples/s", "torch": torch.__version__}))


if __name__ == "__main__":
    main()
