#!/usr/bin/env python3
"""Throughput benchmark: subdp against the PyTorch peer (benchmarks/torch_peer.py), same
model, batch, optimizer and thread count, measured in one invocation; prints a markdown
table with the ratio subdp / PyTorch, and subdp's achieved GFLOP/s (the FLOPs its metrics
count per step) as a fraction of the OpenBLAS sgemm rate measured in the same run
(build/subdp_gemm_rate, 1024^3 products).

  /usr/bin/python3 benchmarks/throughput.py [--steps 20] [--threads 2] [--models mlp,resnet,gpt]

MLP and ResNet train at --batch (default 128) images with SGD; the GPT at --gpt-batch
(default 16) windows of 128 bytes of the Brown corpus with AdamW, reported in tokens/s.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


CONFIGS = {"mlp": "configs/mlp_fmnist.toml", "resnet": "configs/resnet_fmnist.toml", "gpt": "configs/gpt_brown.toml"}


def items_per_step(model, batch):
    """Samples per step, or tokens per step for the GPT (context 128)."""
    return batch * 128 if model == "gpt" else batch


def subdp_rate(binary, model, batch, steps, warmup, threads, overrides=()):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        cfg = CONFIGS[model]
        cmd = [binary, "train", os.path.join(ROOT, cfg), "--set", "train.epochs=0", "--set", f"train.steps={warmup + steps}",
               "--set", f"train.batch_size={batch}", "--set", f"train.threads={threads}", "--set", "optim.schedule=constant",
               "--set", "train.eval_every=1000000", "--set", f"log.metrics_file={metrics}", "--set", "log.every=1000000",
               "--set", "parallel.backend=local"]
        for kv in overrides:
            cmd += ["--set", kv]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)  # configs name data/ from the root
        rows = [json.loads(l) for l in open(metrics)][warmup:]
        step_s = sum(r["step_time_s"] for r in rows) / len(rows)
        flops = sum(r["flops"] for r in rows) / len(rows)
    return {"step_s": step_s, "rate": items_per_step(model, batch) / step_s, "gflops": flops / step_s / 1e9}


def sgemm_rate(binary_dir, threads):
    probe = os.path.join(binary_dir, "subdp_gemm_rate")
    out = subprocess.run([probe, "1024", "3"], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    return json.loads(out.stdout)["gflops"]


def torch_rate(model, batch, steps, warmup, threads):
    out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "benchmarks", "torch_peer.py"), "--model", model,
                          "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup),
                          "--threads", str(threads), "--text", os.path.join(ROOT, "data", "brown", "brown.txt")],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "subdp"))
    p.add_argument("--models", default="mlp,resnet,gpt")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--gpt-batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for the subdp runs only (e.g. train.winograd_tile=4x4); repeatable")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure each model this many times (subdp, then the peer, each time) and add a median row")
    a = p.parse_args()
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    gemm = sgemm_rate(os.path.dirname(a.binary), a.threads)
    blas = subprocess.run([a.binary, "version"], check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(f"BLAS: {blas}")
    print(f"OpenBLAS sgemm (1024^3, {a.threads} threads): {gemm:.1f} GFLOP/s")
    print(f"subdp overrides: {' '.join(a.set) or 'none'}\n")
    print("| model | batch | threads | unit | subdp | PyTorch | ratio | subdp GFLOP/s | of sgemm rate |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for model in a.models.split(","):
        batch = a.gpt_batch if model == "gpt" else a.batch
        unit = "tokens/s" if model == "gpt" else "samples/s"
        ratios = []
        for _ in range(a.repeat):
            ours = subdp_rate(a.binary, model, batch, a.steps, a.warmup, a.threads, a.set)
            peer = torch_rate(model, batch, a.steps, a.warmup, a.threads)
            ratios.append(ours["rate"] / peer["rate"])
            print(f"| {model} | {batch} | {a.threads} | {unit} | {ours['rate']:.0f} | {peer['rate']:.0f} | "
                  f"{ratios[-1]:.2f}x | {ours['gflops']:.1f} | {ours['gflops'] / gemm:.0%} |", flush=True)
        if a.repeat > 1:
            print(f"| {model} | median of {a.repeat} | | | | | {statistics.median(ratios):.2f}x | | |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
