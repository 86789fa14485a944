#!/usr/bin/env python3
"""Regime comparison: plain DP against forward / backward masking at block / neuron level.

For every regime x keep ratio it runs `subdp plan` (the planner's prediction) and
`mpirun -np W subdp train` (the measurement) with the same config and overrides, collects
every rank's per-step metrics (log.metrics_file) and the evaluation lines, and writes

  OUT/summary.md      one row per run (also printed): largest rank's peak bytes by category,
                      total and ratio to DP, predicted vs measured, step time, FLOPs and bytes
                      all-reduced per step per rank, final train loss, final full-model eval
  OUT/steps.csv.gz    every step of every run and rank: every key of the metrics lines
                      (benchmarks/pack_metrics.py packs them; the per-run JSON lines are removed)
  OUT/evals.csv       every evaluation of every run (full model, and subnetworks' own share)
  OUT/memory.png      stacked peak bytes by category (largest rank) per run, MiB
  OUT/loss_vs_step.png, OUT/loss_vs_flops.png (training loss against cumulative FLOPs per
                      rank: the FLOP-matched comparison), OUT/eval.png
  OUT/<run>/          command.txt, plan.txt, stdout.txt, stderr.txt

  /usr/bin/python3 benchmarks/compare.py configs/resnet_fmnist.toml --world 4 \\
      --regimes dp,fwd-block,bwd-block,fwd-neuron,bwd-neuron --keep 0.75,0.5,0.25 --steps 200 \\
      --set train.batch_size=32 --out benchmarks/results/resnet_fmnist

Regimes: dp (plain data parallelism, S = 1, run once), fwd-block, bwd-block, fwd-neuron,
bwd-neuron, stoch-depth (stochastic depth: every rank holds the whole model and drops each
block with probability 1 - keep per step, S = 1). A regime written `name@k` (e.g. fwd-block@0.25) is one extra run at keep k,
outside the --keep cross product. A regime written `name+recompute` (dp+recompute,
fwd-block+recompute) adds train.recompute = "blocks" (activations recomputed block by block
in the backward pass, GPT). Keep values whose coverage keep*S is not whole are
skipped, and so are granularities the model refuses (the MLP has no blocks), with a note.
A failing run stops the comparison with a non-zero exit naming the run and its command.
"""
import argparse
import csv
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time

import pack_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CATEGORIES = ["params", "grads", "optimizer", "activations", "workspace", "comm"]
REGIMES = {  # name -> (mask.regime, mask.granularity)
    "dp": ("none", "block"),
    "fwd-block": ("forward", "block"),
    "bwd-block": ("backward", "block"),
    "fwd-neuron": ("forward", "neuron"),
    "bwd-neuron": ("backward", "neuron"),
    "stoch-depth": ("stochastic", "block"),  # every rank the whole model, random blocks dropped per step
}
# Regimes whose every rank holds the whole model (S = 1).
WHOLE_MODEL = ("dp", "stoch-depth")
# Composable memory baselines: a regime written name+modifier (e.g. dp+recompute,
# fwd-block+recompute) adds the modifier's overrides to the base regime's.
MODIFIERS = {"recompute": ["train.recompute=blocks"]}
MIB = 1048576.0
EVAL_RE = re.compile(r"^eval step (\d+) epoch ([\d.]+): full model test_loss (\S+) test_acc (\S+)"
                     r"(?: bits_per_\w+ \S+)?(?: \| subnetworks \(own share\) loss (\S+) acc (\S+))?")
FINAL_RE = re.compile(r"^final step=(\d+) train_loss=(\S+) test_loss=(\S+) test_acc=(\S+) peak_bytes=(\d+) "
                      r"time_s=(\S+)")
PLAN_ROW_RE = re.compile(r"^\s+(subnetwork \d+ \(ranks [^)]*\)|dp\+recompute \(every rank\)|plain DP \(W=\d+\))"
                         r"\s+((?:-?\d+\s+){6}-?\d+)")
REFUSED_RE = re.compile(r'mask\.granularity = "(block|neuron)": (.*)')


class Failure(Exception):
    pass


def fnum(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def fmt_keep(k):
    return f"{k:g}"


# ---------------------------------------------------------------------------------------
# Runs to make


def plan_runs(regimes, keeps, S):
    """[(run name, regime name, keep)], notes for skipped combinations."""
    runs, notes, seen = [], [], set()

    def add(name, keep):
        if name.partition("+")[0] == "dp":
            key = (name, 1.0)
            if key not in seen:
                seen.add(key)
                runs.append((name, name, 1.0))
            return
        c = keep * S
        whole = name.partition("+")[0] in WHOLE_MODEL  # no coverage: keep is a drop probability
        if not whole and (abs(c - round(c)) > 1e-9 or round(c) < 1):
            notes.append(f"skipped {name} keep {fmt_keep(keep)}: keep * S = {c:g} is not a whole number >= 1 (S = {S})")
            return
        if (name, keep) not in seen:
            seen.add((name, keep))
            runs.append((f"{name}-k{fmt_keep(keep)}", name, keep))

    for item in regimes:
        name, _, at = item.partition("@")
        base, *mods = name.split("+")
        if base not in REGIMES or any(m not in MODIFIERS for m in mods):
            raise SystemExit(f"compare.py: unknown regime '{name}' (expected one of {', '.join(REGIMES)}, optionally "
                             f"+{' +'.join(MODIFIERS)}; name@keep for one run)")
        for k in ([float(at)] if at else keeps):
            if not 0 < k <= 1:
                raise SystemExit(f"compare.py: keep {k:g} for {name} is not in (0, 1]")
            add(name, k)
    return runs, notes


def run_sets(regime, keep, S, steps, eval_every, metrics):
    base, *mods = regime.split("+")
    mregime, gran = REGIMES[base]
    subnets = 1 if base in WHOLE_MODEL else S
    return [f"train.steps={steps}", "train.epochs=0", f"parallel.subnetworks={subnets}", f"mask.regime={mregime}",
            f"mask.granularity={gran}", f"mask.keep={fmt_keep(keep)}", f"log.metrics_file={metrics}",
            f"train.eval_every={eval_every}"] + [s for m in mods for s in MODIFIERS[m]]


def with_sets(cmd, sets):
    for s in sets:
        cmd += ["--set", s]
    return cmd


def mpi_env():
    env = dict(os.environ)
    if os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


# ---------------------------------------------------------------------------------------
# Planner


def parse_plan(text):
    """{'rows': {label: [6 categories + total]}, 'worst': row of the largest subnetwork, 'dp': dp row}."""
    rows = {}
    for line in text.splitlines():
        m = PLAN_ROW_RE.match(line)
        if m:
            rows[m.group(1)] = [int(x) for x in m.group(2).split()]
    dp = next((v for k, v in rows.items() if k.startswith("plain DP")), None)
    subs = [v for k, v in rows.items() if k.startswith(("subnetwork", "dp+recompute"))]
    worst = max(subs, key=lambda r: r[-1]) if subs else dp
    return {"rows": rows, "worst": worst, "dp": dp}


def run_plan(binary, config, world, sets, run_dir, name):
    cmd = with_sets([binary, "plan", config, "--world", str(world)], sets)
    p = subprocess.run(cmd, capture_output=True, text=True)
    with open(os.path.join(run_dir, "plan.txt"), "w") as f:
        f.write("$ " + shlex.join(cmd) + "\n" + p.stdout + p.stderr)
    if p.returncode != 0:
        refused = REFUSED_RE.search(p.stderr)
        if refused:
            return None, refused.group(0).strip()
        raise Failure(f"run '{name}': planner failed (exit {p.returncode}): {shlex.join(cmd)}\n{p.stderr.strip()}")
    plan = parse_plan(p.stdout)
    if plan["worst"] is None:
        raise Failure(f"run '{name}': no predicted rows in the planner's output: {shlex.join(cmd)}")
    return plan, None


# ---------------------------------------------------------------------------------------
# Training


def train(args, name, regime, keep, run_dir, steps, eval_every):
    metrics = os.path.join(run_dir, "metrics-{rank}.jsonl")
    sets = list(args.set) + run_sets(regime, keep, args.subnetworks, steps, eval_every, metrics)
    cmd = [*shlex.split(args.mpirun), "-np", str(args.world), *shlex.split(args.mpirun_args), args.binary, "train",
           args.config]
    cmd = with_sets(cmd, sets)
    stdout_path, stderr_path = os.path.join(run_dir, "stdout.txt"), os.path.join(run_dir, "stderr.txt")
    done = os.path.join(run_dir, "done.json")
    if args.reuse and os.path.exists(done):
        with open(done) as f:
            if json.load(f).get("command") == cmd:
                print(f"[{name}] reusing the finished run in {run_dir}", flush=True)
                return cmd, None
    for fname in os.listdir(run_dir):
        if fname.startswith("metrics-") or fname == "done.json":
            os.remove(os.path.join(run_dir, fname))
    with open(os.path.join(run_dir, "command.txt"), "w") as f:
        f.write(shlex.join(cmd) + "\n")
    print(f"[{name}] {shlex.join(cmd)}", flush=True)
    t0 = time.time()
    with open(stdout_path, "w") as out, open(stderr_path, "w") as err:
        try:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=mpi_env(), bufsize=1)
        except OSError as e:
            raise Failure(f"run '{name}' could not start ({e}): {shlex.join(cmd)}")
        for line in p.stdout:
            out.write(line)
            out.flush()
            if args.verbose or line.startswith(("eval ", "final ")):
                print(f"[{name}] {line}", end="", flush=True)
        try:
            rc = p.wait(timeout=args.timeout if args.timeout > 0 else None)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "timeout"
    wall = time.time() - t0
    if rc != 0:
        tail = open(stderr_path).read().strip().splitlines()[-15:] + open(stdout_path).read().strip().splitlines()[-5:]
        raise Failure(f"run '{name}' failed (exit {rc}) after {wall:.0f} s: {shlex.join(cmd)}\n"
                      f"  output in {run_dir}/stdout.txt and stderr.txt; last lines:\n    " + "\n    ".join(tail))
    with open(done, "w") as f:
        json.dump({"command": cmd, "wall_s": wall}, f)
    return cmd, wall


def read_run(name, run_dir, world, steps, cmd):
    ranks = []
    for r in range(world):
        path = os.path.join(run_dir, f"metrics-{r}.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                rows = [json.loads(line) for line in f if line.strip()]
        else:  # a reused run whose metrics were packed into OUT/steps.csv.gz
            rows = pack_metrics.rows_of(os.path.dirname(run_dir), name, f"metrics-{r}.jsonl")
        if not rows:
            raise Failure(f"run '{name}': rank {r} wrote no metrics ({path} missing): {shlex.join(cmd)}")
        if len(rows) != steps:
            raise Failure(f"run '{name}': rank {r} logged {len(rows)} steps, expected {steps} ({path}): {shlex.join(cmd)}")
        ranks.append(rows)
    evals, final = [], None
    with open(os.path.join(run_dir, "stdout.txt")) as f:
        for line in f:
            m = EVAL_RE.match(line)
            if m:
                evals.append({"step": int(m.group(1)), "test_loss": fnum(m.group(3)), "test_acc": fnum(m.group(4)),
                              "subnet_loss": fnum(m.group(5)), "subnet_acc": fnum(m.group(6))})
            m = FINAL_RE.match(line)
            if m:
                final = {"step": int(m.group(1)), "train_loss": fnum(m.group(2)), "test_loss": fnum(m.group(3)),
                         "test_acc": fnum(m.group(4)), "peak_bytes": int(m.group(5)), "time_s": fnum(m.group(6))}
    if final is None:
        raise Failure(f"run '{name}': no 'final ...' line in {run_dir}/stdout.txt: {shlex.join(cmd)}")
    return ranks, evals, final


def summarize(name, regime, keep, ranks, evals, final, plan, wall):
    steps = len(ranks[0])
    peaks = [max(row["mem_total_peak"] for row in rows) for rows in ranks]
    worst = max(range(len(ranks)), key=lambda r: peaks[r])
    cat = {c: max(row["mem_peak"][c] for row in ranks[worst]) for c in CATEGORIES}
    # A step takes as long as its slowest rank; the first step (allocation, warm-up) is left out.
    first = 1 if steps > 1 else 0
    step_s = [max(rows[i]["step_time_s"] for rows in ranks) for i in range(first, steps)]
    comm_s = [max(rows[i]["comm_s"] for rows in ranks) for i in range(first, steps)]
    tail = max(1, steps // 10)
    train_loss = sum(row["loss"] for rows in ranks for row in rows[-tail:]) / (tail * len(ranks))
    last_eval = evals[-1] if evals else {}
    return {
        "run": name, "regime": regime, "keep": keep, "steps": steps, "worst_rank": worst, "mem": cat,
        "total": peaks[worst], "peak_rss": max(row["peak_rss"] for rows in ranks for row in rows),
        "predicted": plan["worst"][-1], "predicted_mem": dict(zip(CATEGORIES, plan["worst"][:6])),
        "planner_dp": plan["dp"][-1] if plan["dp"] else math.nan,
        "step_s": sum(step_s) / len(step_s), "comm_s": sum(comm_s) / len(comm_s),
        "flops": sum(row["flops"] for rows in ranks for row in rows) / (steps * len(ranks)),
        "bytes": sum(row["bytes_allreduced"] for rows in ranks for row in rows) / (steps * len(ranks)),
        "train_loss": train_loss, "train_loss_tail": tail, "engine_train_loss": final["train_loss"],
        "test_loss": last_eval.get("test_loss", final["test_loss"]), "test_acc": last_eval.get("test_acc", final["test_acc"]),
        "subnet_acc": last_eval.get("subnet_acc", math.nan), "engine_peak": final["peak_bytes"],
        "time_s": final["time_s"], "wall_s": wall,
    }


# ---------------------------------------------------------------------------------------
# Outputs


def model_name(config, sets):
    """model.name from the config and the overrides (text models report next-token accuracy)."""
    name = "mlp"
    try:
        import tomllib
        with open(config, "rb") as f:
            name = tomllib.load(f).get("model", {}).get("name", name)
    except Exception:
        pass
    for s in sets:
        k, _, v = s.partition("=")
        if k.strip() == "model.name":
            name = v.strip().strip('"')
    return name


def table(summaries, dp_total, dp_source):
    head = ["run", "regime", "keep", *[f"{c} MiB" for c in CATEGORIES], "total MiB", "vs DP", "predicted MiB",
            "meas/pred", "step s", "GFLOP/step/rank", "MB allreduced/step/rank", "train loss", "test loss", "test acc", "subnet acc"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        ratio = s["total"] / dp_total if dp_total else math.nan
        cells = [s["run"], s["regime"], "-" if s["regime"].startswith("dp") else fmt_keep(s["keep"]),
                 *[f"{s['mem'][c] / MIB:.2f}" for c in CATEGORIES], f"{s['total'] / MIB:.2f}", f"{ratio:.2f}x",
                 f"{s['predicted'] / MIB:.2f}", f"{s['total'] / s['predicted']:.3f}", f"{s['step_s']:.3f}",
                 f"{s['flops'] / 1e9:.2f}", f"{s['bytes'] / 1e6:.2f}", f"{s['train_loss']:.4f}", f"{s['test_loss']:.4f}",
                 f"{s['test_acc']:.4f}", "-" if math.isnan(s["subnet_acc"]) else f"{s['subnet_acc']:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [
        f"Memory: peak bytes per category of the rank with the largest total peak (MiB = 2^20 bytes); "
        f"'vs DP' divides that total by {dp_source}. 'predicted' is `subdp plan`'s largest subnetwork row; "
        f"'meas/pred' = measured / predicted total.",
        "Step s: mean over steps 2..N of the slowest rank's step time. GFLOP and MB all-reduced: mean per step per rank.",
        f"Train loss: mean over all ranks of the last {summaries[0]['train_loss_tail'] if summaries else 0} steps. "
        "Test loss / acc: the full model assembled from the subnetworks, last evaluation on the held-out split; "
        "subnet acc: each rank's own subnetwork on its share of that split (the engine's 'subnetworks (own share)').",
    ]
    return "\n".join(lines), notes


def write_csvs(out, runs_data):
    with open(os.path.join(out, "evals.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "step", "test_loss", "test_acc", "subnet_loss", "subnet_acc"])
        for d in runs_data:
            for e in d["evals"]:
                w.writerow([d["name"], e["step"], e["test_loss"], e["test_acc"], e["subnet_loss"], e["subnet_acc"]])


def smooth(y, window):
    import numpy as np
    y = np.asarray(y, dtype=float)
    if window <= 1 or len(y) < window:
        return y
    c = np.cumsum(np.insert(y, 0, 0.0))
    head = c[1:window] / np.arange(1, window)  # growing window at the start
    return np.concatenate([head, (c[window:] - c[:-window]) / window])


def plots(out, runs_data, summaries, title):
    """memory.png, loss_vs_step.png, loss_vs_flops.png, eval.png."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {s["run"]: plt.cm.tab10(i % 10) for i, s in enumerate(summaries)}
    plot_memory(plt, out, summaries, title)
    plot_losses(plt, out, runs_data, colors, title)
    plot_evals(plt, out, runs_data, colors, title)


def plot_memory(plt, out, summaries, title):
    """Stacked bars of the largest rank's peak bytes by category, MiB, with the predicted total."""
    import numpy as np
    names = [s["run"] for s in summaries]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names) + 2), 4.8))
    bottom = np.zeros(len(names))
    for i, c in enumerate(CATEGORIES):
        vals = np.array([s["mem"][c] / MIB for s in summaries])
        ax.bar(names, vals, bottom=bottom, label=c, color=plt.cm.Set2(i))
        bottom += vals
    ax.scatter(names, [s["predicted"] / MIB for s in summaries], marker="_", s=600, color="black", zorder=3,
               label="predicted total (subdp plan)")
    for i, s in enumerate(summaries):
        ax.annotate(f"{bottom[i]:.1f}", (i, bottom[i]), ha="center", va="bottom", fontsize=8, xytext=(0, 3),
                    textcoords="offset points")
    ax.set_ylabel("peak memory of the largest rank (MiB)")
    ax.set_xlabel("run (regime, keep ratio)")
    ax.set_title(f"{title}: per-rank peak memory by category")
    ax.legend(fontsize=8, loc="upper right")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "memory.png"), dpi=120)
    plt.close(fig)


def plot_losses(plt, out, runs_data, colors, title):
    """Training loss (mean over ranks, smoothed) against step and against cumulative FLOPs per rank."""
    import numpy as np
    steps = max(len(d["ranks"][0]) for d in runs_data)
    window = max(1, steps // 20)
    for fname, xkey, xlabel, what in [
            ("loss_vs_step.png", "step", "step", "training loss against step"),
            ("loss_vs_flops.png", "flops", "cumulative training FLOPs per rank (TFLOP)",
             "training loss against compute per rank (FLOP-matched)")]:
        fig, ax = plt.subplots(figsize=(7.5, 5))
        for d in runs_data:
            loss = np.mean([[row["loss"] for row in rows] for rows in d["ranks"]], axis=0)
            if xkey == "step":
                x = np.array([row["step"] for row in d["ranks"][0]])
            else:
                x = np.mean([np.cumsum([row["flops"] for row in rows]) for rows in d["ranks"]], axis=0) / 1e12
            ax.plot(x, smooth(loss, window), label=d["name"], color=colors[d["name"]], lw=1.4)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("training loss (cross-entropy, nats)")
        ax.set_title(f"{title}\n{what}; mean over ranks, {window}-step moving average", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, fname), dpi=120)
        plt.close(fig)


def plot_evals(plt, out, runs_data, colors, title):
    """Held-out loss and accuracy against step; solid: full model, dashed: subnetworks' own share."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.8))
    for d in runs_data:
        if not d["evals"]:
            continue
        x, c = [e["step"] for e in d["evals"]], colors[d["name"]]
        a1.plot(x, [e["test_loss"] for e in d["evals"]], marker="o", label=d["name"], color=c)
        a2.plot(x, [100 * e["test_acc"] for e in d["evals"]], marker="o", label=d["name"], color=c)
        if not d["regime"].startswith("dp"):
            a1.plot(x, [e["subnet_loss"] for e in d["evals"]], marker="x", ls="--", color=c, alpha=0.6)
            a2.plot(x, [100 * e["subnet_acc"] for e in d["evals"]], marker="x", ls="--", color=c, alpha=0.6)
    a1.set_yscale("log")
    a1.set_ylabel("held-out loss (cross-entropy, nats, log scale)")
    a2.set_ylabel("held-out accuracy (%)")
    for a in (a1, a2):
        a.set_xlabel("step")
        a.grid(alpha=0.3, which="both")
    a2.legend(fontsize=8, title="solid: full model\ndashed: subnetworks (own share)", title_fontsize=8)
    fig.suptitle(f"{title}: evaluation on the held-out split")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "eval.png"), dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("config", help="TOML run config")
    p.add_argument("--world", type=int, default=4, help="ranks W (default 4)")
    p.add_argument("--subnetworks", type=int, default=0, help="S for the masked runs (default: W)")
    p.add_argument("--regimes", default="dp,fwd-block,bwd-block,fwd-neuron,bwd-neuron",
                   help="comma list of dp, fwd-block, bwd-block, fwd-neuron, bwd-neuron; name@k = one run at keep k")
    p.add_argument("--keep", default="0.75,0.5,0.25", help="comma list of keep ratios (default 0.75,0.5,0.25)")
    p.add_argument("--steps", type=int, required=True, help="optimizer steps per run")
    p.add_argument("--evals", type=int, default=4, help="evaluations per run, at most: train.eval_every = ceil(steps/evals) (default 4)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override for every run (repeatable)")
    p.add_argument("--out", default="", help="output folder (default runs/compare/<config name>)")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "subdp"), help="subdp executable")
    p.add_argument("--mpirun", default="mpirun", help="MPI launcher (default mpirun)")
    p.add_argument("--mpirun-args", default="--oversubscribe --mca btl self,vader",
                   help="launcher options (default '--oversubscribe --mca btl self,vader')")
    p.add_argument("--timeout", type=float, default=0, help="seconds allowed per training run; 0 = no limit")
    p.add_argument("--reuse", action="store_true", help="keep runs that already finished with the same command")
    p.add_argument("--title", default="", help="plot title (default: the config's name)")
    p.add_argument("--verbose", action="store_true", help="echo every line of subdp train")
    a = p.parse_args(argv)
    a.binary = os.path.abspath(a.binary)
    if not os.access(a.binary, os.X_OK):
        p.error(f"{a.binary} is not an executable (build it: cmake --build build --target subdp)")
    if not os.path.exists(a.config):
        p.error(f"config {a.config} not found")
    if a.steps < 1 or a.world < 1 or a.evals < 1:
        p.error("--steps, --world and --evals must be >= 1")
    a.subnetworks = a.subnetworks or a.world
    if a.world % a.subnetworks:
        p.error(f"--subnetworks {a.subnetworks} does not divide --world {a.world}")
    a.stem = os.path.splitext(os.path.basename(a.config))[0]
    # Default under runs/ (ignored by git), so a trial never overwrites committed results.
    a.out = os.path.abspath(a.out or os.path.join(ROOT, "runs", "compare", a.stem))
    a.title = a.title or a.stem
    a.eval_every = -(-a.steps // a.evals)  # ceil: at most --evals evaluations per run
    return a


def run_all(a, runs, notes):
    """Plans and trains every run; returns (runs_data, summaries). Raises Failure."""
    runs_data, summaries = [], []
    for name, regime, keep in runs:
        run_dir = os.path.join(a.out, name)
        os.makedirs(run_dir, exist_ok=True)
        sets = list(a.set) + run_sets(regime, keep, a.subnetworks, a.steps, a.eval_every,
                                      os.path.join(run_dir, "metrics-{rank}.jsonl"))
        plan, refused = run_plan(a.binary, a.config, a.world, sets, run_dir, name)
        if refused:
            notes.append(f"skipped {name}: the model refuses it ({refused})")
            print(f"[{name}] skipped: {refused}", flush=True)
            continue
        cmd, wall = train(a, name, regime, keep, run_dir, a.steps, a.eval_every)
        ranks, evals, final = read_run(name, run_dir, a.world, a.steps, cmd)
        if wall is None:
            with open(os.path.join(run_dir, "done.json")) as f:
                wall = json.load(f).get("wall_s", math.nan)
        runs_data.append({"name": name, "regime": regime, "keep": keep, "ranks": ranks, "evals": evals})
        summaries.append(summarize(name, regime, keep, ranks, evals, final, plan, wall))
        print(f"[{name}] done in {wall:.0f} s", flush=True)
    return runs_data, summaries


def write_summary(a, summaries, notes):
    dp = next((s for s in summaries if s["regime"] == "dp"), None)
    if dp:
        dp_total, dp_source = dp["total"], "the measured DP run's largest rank"
    else:
        dp_total, dp_source = summaries[0]["planner_dp"], "the planner's plain-DP prediction (no dp run)"
    tab, tab_notes = table(summaries, dp_total, dp_source)
    if model_name(a.config, a.set) == "gpt":
        tab_notes.append("Text model: losses are cross-entropy in nats per token (bits per byte = loss / ln 2 for "
                         "the byte-level GPT); test acc is next-token accuracy on the validation split.")
    total_wall = sum(s["wall_s"] for s in summaries if not math.isnan(s["wall_s"]))
    header = [f"# Regime comparison: {a.stem}", "",
              f"Config `{os.path.relpath(os.path.abspath(a.config), ROOT)}`, W = {a.world}, S = {a.subnetworks} "
              f"(masked runs), {a.steps} steps per run, evaluation every {a.eval_every} steps, overrides: "
              f"{' '.join(a.set) or 'none'}.", ""]
    footer = ["", *[f"- {n}" for n in tab_notes + notes], "",
              "Run wall time (s, training and evaluation): " +
              ", ".join(f"{s['run']} {s['wall_s']:.0f}" for s in summaries) + f"; total {total_wall:.0f}.", "",
              "Files: steps.csv.gz (every step and rank, every metrics key; benchmarks/pack_metrics.py), evals.csv, "
              "memory.png, loss_vs_step.png, loss_vs_flops.png, eval.png; per run: command.txt, plan.txt, stdout.txt.",
              ""]
    text = "\n".join(header) + "\n" + tab + "\n" + "\n".join(footer)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(text)
    return text


def main(argv=None):
    a = parse_args(argv)
    keeps = [float(k) for k in a.keep.split(",") if k]
    runs, notes = plan_runs([r for r in a.regimes.split(",") if r], keeps, a.subnetworks)
    os.makedirs(a.out, exist_ok=True)
    t_start = time.time()
    try:
        runs_data, summaries = run_all(a, runs, notes)
    except Failure as e:
        print(f"compare.py: error: {e}", file=sys.stderr)
        return 1
    if not summaries:
        print("compare.py: error: no run was made" + "".join("\n  " + n for n in notes), file=sys.stderr)
        return 1
    write_csvs(a.out, runs_data)
    pack_metrics.pack(a.out)
    plots(a.out, runs_data, summaries, a.title)
    text = write_summary(a, summaries, notes)
    print()
    print(text)
    print(f"wrote {a.out}/summary.md, steps.csv.gz, evals.csv, memory.png, loss_vs_step.png, loss_vs_flops.png, eval.png "
          f"({time.time() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
