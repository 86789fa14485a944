#!/usr/bin/env python3
"""Validation curve of subdp's GPT against PyTorch: same model, initial weights, data split,
batch, AdamW schedule (warm-up + cosine) and gradient clipping; bits per byte at equal steps.

  /usr/bin/python3 benchmarks/gpt_curve.py [--subdp-metrics RUN.jsonl] [--config configs/gpt_brown.toml]
      [--out benchmarks/results/gpt_brown_curve] [--threads 2]

RUN.jsonl is the metrics file of `subdp train CONFIG` (log.metrics_file: its eval records,
docs/outputs.md); without --subdp-metrics the script runs subdp itself first. PyTorch starts from subdp's initial
weights (`subdp parity-dump`), trains on random windows of the training part of the corpus,
and evaluates every eval_every steps on eval_batches fixed windows of the validation tail
(the last data.val_fraction of the bytes, split as subdp splits it). The windows are drawn
by each side on its own, so the two curves are two samples of the same distribution.
Writes OUT/curve.csv and OUT/curve.png and prints a markdown table; exits 1 when a point
differs by more than --tolerance bits per byte.
"""
import argparse, csv, json, math, os, subprocess, sys, tempfile, time, tomllib

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))
import child  # noqa: E402
import pack_metrics  # noqa: E402
import torch_peer  # noqa: E402
from torch_peer import windows  # noqa: E402
from parity import read as read_safetensors  # noqa: E402



def settings(path):
    """The run's settings from the config, with subdp's defaults (configs/README.md)."""
    with open(path, "rb") as f:
        c = tomllib.load(f)
    m, d, t, o = c.get("model", {}), c.get("data", {}), c.get("train", {}), c.get("optim", {})
    if m.get("name") != "gpt":
        sys.exit(f"{path}: model.name = {m.get('name', 'mlp (the default)')!r}; the PyTorch twin is the reference GPT")
    ref = {"vocab": 256, "context": 128, "width": 256, "heads": 8, "depth": 6, "mlp_ratio": 4}
    for k, v in ref.items():
        if m.get(k, v) != v:
            sys.exit(f"{path}: model.{k} = {m[k]}; the PyTorch twin is the reference GPT ({k} = {v})")
    if o.get("name") != "adamw":
        sys.exit(f"{path}: optim.name must be \"adamw\" for this comparison")
    if o.get("lr_scaling", "none") != "none":
        sys.exit(f"{path}: optim.lr_scaling must be \"none\": the PyTorch twin trains one process at optim.lr")
    if t.get("eval_every", 0) <= 0:
        sys.exit(f"{path}: train.eval_every must be > 0: the curves are compared at its steps (0 means once an "
                 "epoch to subdp)")
    # subdp's defaults (configs/README.md) for the keys the config leaves out.
    return dict(path=os.path.join(ROOT, d["path"]) if not os.path.isabs(d["path"]) else d["path"],
                val_fraction=d.get("val_fraction", 0.1), steps=t["steps"], batch=t.get("batch_size", 128),
                eval_every=t["eval_every"], eval_batches=t.get("eval_batches", 64), lr=o.get("lr", 0.05),
                wd=o.get("weight_decay", 0.0), warmup=o.get("warmup_steps", 0), clip=o.get("grad_clip", 0.0),
                min_lr_ratio=o.get("min_lr_ratio", 0.0), betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                eps=o.get("eps", 1e-8), schedule=o.get("schedule", "cosine"), T=128)


def learning_rate(s, step):
    """engine/optim/optimizer.cpp learning_rate(): linear warm-up, then cosine down to lr * min_lr_ratio."""
    if s["warmup"] > 0 and step < s["warmup"]:
        return s["lr"] * (step + 1) / s["warmup"]
    if s["schedule"] == "constant":
        return s["lr"]
    progress = min(1.0, (step - s["warmup"]) / max(1, s["steps"] - s["warmup"]))
    floor = s["lr"] * s["min_lr_ratio"]
    return floor + 0.5 * (s["lr"] - floor) * (1 + math.cos(math.pi * progress))


def subdp_curve(args, s):
    """{step: bits per byte} from a subdp run's metrics file (running subdp first when none is given)."""
    metrics = args.subdp_metrics
    if not metrics:
        metrics = os.path.join(args.out, "subdp_metrics.jsonl")
        log = os.path.join(args.out, "subdp.log")
        with open(log, "w") as f:
            # From the repository root, where settings() resolves a relative data.path too.
            done = child.run([os.path.abspath(args.binary), "train", os.path.abspath(args.config), "--set",
                              f"train.threads={args.threads}", "--set", f"log.metrics_file={os.path.abspath(metrics)}"],
                             stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        if done.returncode != 0:
            with open(log) as f:
                tail = f.read().strip().splitlines()[-5:]
            sys.exit(f"gpt_curve.py: subdp train failed (exit {done.returncode}); the end of {log}:\n  " + "\n  ".join(tail))
    points = {}
    try:
        records = pack_metrics.read_events(metrics, "eval")  # a half last line (a killed run) is dropped
    except OSError as e:
        sys.exit(f"gpt_curve.py: --subdp-metrics {metrics}: {e.strerror}")
    except ValueError as e:
        sys.exit(f"gpt_curve.py: {e}")
    for record in records:
        if record.get("bits_per_byte") is not None:
            points[int(record["step"])] = float(record["bits_per_byte"])
    if not points:
        sys.exit(f"{metrics}: no eval records with bits_per_byte (a byte-level text run's metrics file)")
    return points


def initial_weights(args):
    with tempfile.TemporaryDirectory() as tmp:
        child.run([os.path.abspath(args.binary), "parity-dump", os.path.abspath(args.config), tmp, "--steps", "1"],
                  check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        return read_safetensors(os.path.join(tmp, "weights.safetensors"))


def torch_curve(args, s):
    """{step: bits per byte} of the PyTorch twin trained with the same settings."""
    torch.set_num_threads(args.threads)
    model = torch_peer.build("gpt")
    state = model.state_dict()
    for name, value in initial_weights(args).items():
        state[name] = value.reshape(state[name].shape)
    model.load_state_dict(state)
    raw = open(s["path"], "rb").read()
    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    n_val = int(len(raw) * s["val_fraction"])
    train, val = data[:len(raw) - n_val], data[len(raw) - n_val:]
    T, B = s["T"], s["batch"]
    gen = torch.Generator().manual_seed(args.seed)
    val_starts = torch.randint(0, len(val) - T - 1, (s["eval_batches"], B), generator=torch.Generator().manual_seed(1))
    opt = torch.optim.AdamW(model.parameters(), lr=s["lr"], betas=s["betas"], eps=s["eps"], weight_decay=s["wd"])
    points, t0 = {}, time.time()
    for step in range(s["steps"]):
        for g in opt.param_groups:
            g["lr"] = learning_rate(s, step)
        x, y = windows(train, torch.randint(0, len(train) - T - 1, (B,), generator=gen), T)
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if s["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), s["clip"])
        opt.step()
        done = step + 1
        if done % s["eval_every"] == 0 or done == s["steps"]:
            model.eval()
            with torch.no_grad():
                total = sum(F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)).item()
                            for x, y in (windows(val, starts, T) for starts in val_starts))
            model.train()
            points[done] = total / s["eval_batches"] / math.log(2)
            print(f"torch step {done}: val bits per byte {points[done]:.4f} ({time.time() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    return points


def plot(path, ours, theirs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, pts in (("subdp", ours), ("PyTorch", theirs)):
        steps = sorted(pts)
        ax.plot(steps, [pts[k] for k in steps], marker="o", label=label)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("validation bits per byte")
    ax.set_title("GPT on the Brown corpus: validation curve")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "gpt_brown.toml"))
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "subdp"))
    p.add_argument("--subdp-metrics", default="")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "gpt_brown_curve"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tolerance", type=float, default=0.1, help="largest allowed gap, bits per byte")
    args = p.parse_args()
    if args.threads < 1:
        p.error(f"--threads must be at least 1 (got {args.threads})")
    os.makedirs(args.out, exist_ok=True)
    s = settings(args.config)
    ours = subdp_curve(args, s)
    theirs = torch_curve(args, s)
    steps = sorted(set(ours) & set(theirs))
    if not steps:
        sys.exit(f"gpt_curve.py: subdp's evaluations (steps {sorted(ours)[:5]}...) and the config's (every "
                 f"{s['eval_every']} steps) share no step: --subdp-metrics must be a run of this config")
    rows = [(k, ours[k], theirs[k], ours[k] - theirs[k]) for k in steps]
    with open(os.path.join(args.out, "curve.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "subdp_bits_per_byte", "torch_bits_per_byte", "difference"])
        w.writerows(rows)
    plot(os.path.join(args.out, "curve.png"), ours, theirs)
    print("| step | subdp bits/byte | PyTorch bits/byte | difference |\n| --- | --- | --- | --- |")
    for k, a, b, d in rows:
        print(f"| {k} | {a:.4f} | {b:.4f} | {d:+.4f} |")
    worst = max(abs(r[3]) for r in rows)
    print(f"largest gap {worst:.4f} bits per byte (tolerance {args.tolerance})")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(child.main_exits_cleanly("gpt_curve.py", main))
