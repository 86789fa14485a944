#!/usr/bin/env python3
"""Throughput benchmark: subdp against the PyTorch peer (benchmarks/torch_peer.py), same
model, batch, optimizer and thread count, measured in one invocation; prints a markdown
table with the ratio subdp / PyTorch.

  /usr/bin/python3 benchmarks/throughput.py [--steps 20] [--threads 2] [--models mlp,resnet]
"""
import argparse, json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def subdp_rate(binary, model, batch, steps, warmup, threads):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        cfg = {"mlp": "configs/mlp_fmnist.toml", "resnet": "configs/resnet_fmnist.toml"}[model]
        cmd = [binary, "train", os.path.join(ROOT, cfg), "--set", "train.epochs=0", "--set", f"train.steps={warmup + steps}",
               "--set", f"train.batch_size={batch}", "--set", f"train.threads={threads}", "--set", "optim.schedule=constant",
               "--set", "train.eval_every=1000000", "--set", f"log.metrics_file={metrics}", "--set", "log.every=1000000",
               "--set", "parallel.backend=local"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(metrics)][warmup:]
        step_s = sum(r["step_time_s"] for r in rows) / len(rows)
    return {"step_s": step_s, "rate": batch / step_s}


def torch_rate(model, batch, steps, warmup, threads):
    out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "benchmarks", "torch_peer.py"), "--model", model,
                          "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup),
                          "--threads", str(threads)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "subdp"))
    p.add_argument("--models", default="mlp,resnet")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    print(f"| model | batch | threads | subdp samples/s | PyTorch samples/s | ratio |")
    print(f"| --- | --- | --- | --- | --- | --- |")
    for model in a.models.split(","):
        ours = subdp_rate(a.binary, model, a.batch, a.steps, a.warmup, a.threads)
        peer = torch_rate(model, a.batch, a.steps, a.warmup, a.threads)
        print(f"| {model} | {a.batch} | {a.threads} | {ours['rate']:.0f} | {peer['rate']:.0f} | "
              f"{ours['rate'] / peer['rate']:.2f}x |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
