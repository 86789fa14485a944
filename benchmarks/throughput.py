#!/usr/bin/env python3
"""Throughput benchmark: subdp against the PyTorch peer (benchmarks/torch_peer.py), same
model, global batch, optimizer and cores, measured in one invocation. Each side runs in each
sensible configuration of those cores: subdp as one process of N threads and as N DP ranks
of 1 thread; the peer as installed (1 x N: its intra-op threads and OpenBLAS's own pthreads
oversubscribe), 1 x N with OPENBLAS_NUM_THREADS=1, and DDP over gloo N x 1. The table shows
every figure and the ratio of subdp's best to the peer's best, and subdp's achieved GFLOP/s
(the FLOPs its metrics count per step) as a fraction of the OpenBLAS sgemm rate measured
just before, in the same run (build/subdp_gemm_rate, 1024^3 products, once per row).

  /usr/bin/python3 benchmarks/throughput.py [--steps 20] [--threads 2] [--models mlp,resnet,gpt,llama]

MLP and ResNet train at --batch (default 128) images with SGD; the GPT and the LLaMA at
--gpt-batch (default 16) windows of 128 bytes of the Brown corpus with AdamW, reported in
tokens/s.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import child  # noqa: E402


CONFIGS = {"mlp": "configs/mlp_fmnist.toml", "resnet": "configs/resnet_fmnist.toml", "gpt": "configs/gpt_brown.toml",
           "llama": "configs/llama_brown.toml"}
LANGUAGE_MODELS = ("gpt", "llama")


def items_per_step(model, batch):
    """Samples per step, or tokens per step for the language models (context 128)."""
    return batch * 128 if model in LANGUAGE_MODELS else batch


def subdp_rate(binary, model, batch, steps, warmup, threads, overrides=(), ranks=1):
    """subdp's rate at `batch` examples in all: one process of `threads` threads, or `ranks` DP
    ranks under mpirun of threads // ranks each on batch // ranks; step time = rank 0's (it
    waits for the others in the all-reduce)."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m-{rank}.jsonl")
        cfg = CONFIGS[model]
        per_rank = batch // ranks
        cmd = [binary, "train", os.path.join(ROOT, cfg), "--set", "train.epochs=0", "--set", f"train.steps={warmup + steps}",
               "--set", f"train.batch_size={per_rank}", "--set", f"train.threads={max(1, threads // ranks)}",
               "--set", "optim.schedule=constant", "--set", "train.eval_every=1000000",
               "--set", f"log.metrics_file={metrics}", "--set", "log.every=1000000",
               "--set", f"parallel.backend={'mpi' if ranks > 1 else 'local'}"]
        for kv in overrides:
            cmd += ["--set", kv]
        if ranks > 1:
            cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"] + cmd
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        child.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT, env=env)  # configs name data/ from the root
        rows = [r for r in map(json.loads, open(metrics.replace("{rank}", "0"))) if "event" not in r][warmup:]  # the steps
        step_s = sum(r["step_time_s"] for r in rows) / len(rows)
        flops = sum(r["flops"] for r in rows) / len(rows) * ranks
    return {"step_s": step_s, "rate": items_per_step(model, per_rank * ranks) / step_s, "gflops": flops / step_s / 1e9}


def sgemm_rate(binary_dir, threads):
    probe = os.path.join(binary_dir, "subdp_gemm_rate")
    if not os.access(probe, os.X_OK):
        raise SystemExit(f"throughput.py: no sgemm probe at {probe}: it is looked for beside --binary (build it with "
                         "the engine: cmake --build build --target subdp_gemm_rate, and copy it beside a copied binary)")
    out = child.run([probe, "1024", "3"], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    return json.loads(out.stdout)["gflops"]


# The peer in each configuration a user tuning it would try (../shared/peers/README.md):
# Debian's torch with its intra-op threads and OpenBLAS's own pthreads both at N oversubscribes.
def peer_configs(threads):
    return [("1x%d as installed" % threads, {}, 1),
            ("1x%d OPENBLAS_NUM_THREADS=1" % threads, {"OPENBLAS_NUM_THREADS": "1"}, 1),
            ("DDP %dx1 gloo" % threads, {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}, threads)]


def torch_rate(model, batch, steps, warmup, threads, env=None, ranks=1):
    """The peer's rate at `batch` examples in all (DDP: batch // ranks per rank, threads // ranks each)."""
    out = child.run(["/usr/bin/python3", os.path.join(ROOT, "benchmarks", "torch_peer.py"), "--model", model,
                          "--batch", str(batch // ranks), "--steps", str(steps), "--warmup", str(warmup),
                          "--threads", str(max(1, threads // ranks)), "--ddp", str(ranks),
                          "--text", os.path.join(ROOT, "data", "brown", "brown.txt")],
                         check=True, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(a, model):
    """One row: the sgemm rate, subdp 1xN and DP Nx1, the peer in each configuration, best against best.
    The sgemm rate is measured again for each row: on a shared machine it drifts within a run
    (124 to 199 GFLOP/s between invocations on 2026-12-06), and the fraction is only honest
    against the rate of the same minutes."""
    gemm = sgemm_rate(os.path.dirname(a.binary), a.threads)
    batch = a.gpt_batch if model in LANGUAGE_MODELS else a.batch
    ours = {"1x%d" % a.threads: subdp_rate(a.binary, model, batch, a.steps, a.warmup, a.threads, a.set)}
    if a.threads > 1 and batch % a.threads == 0:
        ours["DP %dx1" % a.threads] = subdp_rate(a.binary, model, batch, a.steps, a.warmup, a.threads, a.set, a.threads)
    peers = {name: torch_rate(model, batch, a.steps, a.warmup, a.threads, env, ranks)
             for name, env, ranks in peer_configs(a.threads) if batch % ranks == 0}
    best_ours = max(ours, key=lambda k: ours[k]["rate"])
    best_peer = max(peers, key=lambda k: peers[k]["rate"])
    return {"batch": batch, "ours": ours, "peers": peers, "best_ours": best_ours, "best_peer": best_peer,
            "ratio": ours[best_ours]["rate"] / peers[best_peer]["rate"],
            "gemm": gemm, "of_sgemm": ours[best_ours]["gflops"] / gemm}


# Keys the script sets itself, or that change what a step holds while the rate is credited at
# --batch / --gpt-batch windows of 128 bytes and the peer trains the config's model as it is.
OWN_KEYS = ("train.epochs", "train.steps", "train.batch_size", "train.threads", "train.eval_every", "optim.schedule",
            "log.metrics_file", "log.every", "parallel.backend")


def check_args(p, a):
    """Exits with argparse's usage error naming a value the runs cannot take."""
    for name, least in (("repeat", 1), ("steps", 1), ("warmup", 0), ("threads", 1), ("batch", 1), ("gpt_batch", 1)):
        if getattr(a, name) < least:
            p.error(f"--{name.replace('_', '-')} must be at least {least} (got {getattr(a, name)})")
    unknown = [m for m in a.models.split(",") if m not in CONFIGS]
    if unknown:
        p.error(f"--models: unknown model '{unknown[0]}' (expected a comma-separated list of {', '.join(CONFIGS)})")
    for kv in a.set:
        key = kv.partition("=")[0].strip()
        if key in OWN_KEYS or key.startswith(("model.", "data.")):
            p.error(f"--set {kv}: {key} is the script's own or changes what a step holds (the rate is credited "
                    "at --batch / --gpt-batch, and the peer trains the config's model): use the script's options, "
                    "or settings of the engine alone (train.winograd_tile, train.recompute, ...)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "subdp"))
    p.add_argument("--models", default="mlp,resnet,gpt")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--gpt-batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="cores in all, for every configuration")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for the subdp runs only (e.g. train.winograd_tile=4x4); repeatable")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure each model this many times (subdp, then the peer, each time) and add a median row")
    a = p.parse_args()
    check_args(p, a)
    blas = child.run([a.binary, "version"], check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(f"BLAS: {blas}")
    print(f"OpenBLAS sgemm rate: 1024^3 products on {a.threads} threads, measured before each row")
    print(f"subdp overrides: {' '.join(a.set) or 'none'}")
    print(f"Every configuration uses {a.threads} cores in all at the same global batch; the ratio is subdp's best "
          "configuration against the peer's best, measured in this run.\n")
    names = [n for n, _, _ in peer_configs(a.threads)]
    print("| model | batch | unit | subdp 1x%d | subdp DP %dx1 | " % (a.threads, a.threads)
          + " | ".join(f"PyTorch {n}" for n in names) + " | best / best | subdp GFLOP/s | sgemm GFLOP/s | of sgemm rate |")
    print("|" + " --- |" * (9 + len(names)))
    for model in a.models.split(","):
        unit = "tokens/s" if model in LANGUAGE_MODELS else "samples/s"
        ratios = []
        for _ in range(a.repeat):
            r = measure(a, model)
            ratios.append(r["ratio"])
            cell = lambda d, k: f"{d[k]['rate']:.0f}" + (" **best**" if k in (r["best_ours"], r["best_peer"]) else "") \
                if k in d else "n/a"
            ours = [cell(r["ours"], "1x%d" % a.threads), cell(r["ours"], "DP %dx1" % a.threads)]
            print(f"| {model} | {r['batch']} | {unit} | " + " | ".join(ours + [cell(r["peers"], n) for n in names])
                  + f" | {r['ratio']:.2f}x | {r['ours'][r['best_ours']]['gflops']:.1f} | {r['gemm']:.1f} | {r['of_sgemm']:.0%} |",
                  flush=True)
        if a.repeat > 1:
            print(f"| {model} | median of {a.repeat} | | | | " + "| " * len(names)
                  + f"{statistics.median(ratios):.2f}x | | | |", flush=True)


if __name__ == "__main__":
    sys.exit(child.main_exits_cleanly("throughput.py", main))
