#!/usr/bin/env python3
"""Regime comparison: plain DP against forward / backward masking at block / neuron level.

For every regime x keep ratio it runs `subdp plan` (the planner's prediction) and
`mpirun -np W subdp train` (the measurement) with the same config and overrides, collects
every rank's per-step metrics (log.metrics_file) and the evaluation lines, and writes

  OUT/summary.md      one row per run (also printed): largest rank's peak bytes by category,
                      total and ratio to DP, predicted vs measured, step time, FLOPs and bytes
                      all-reduced per step per rank, final train loss, final full-model eval
  OUT/steps.csv.gz    every step of every run and rank: every key of the metrics lines
                      (benchmarks/pack_metrics.py packs them; the per-run JSON lines are removed,
                      except those of runs not finished: no done.json; no other file under OUT is
                      read or removed)
  OUT/evals.csv       every evaluation of every run (full model, and subnetworks' own share)
  OUT/runs.csv        one row per run and seed: budget, steps, FLOPs, peak and predicted bytes,
                      bytes all-reduced and broadcast per step, step and wall time, losses and accuracies
                      (benchmarks/protocol_table.py merges the folders of several budgets)
  OUT/memory.png      stacked peak bytes by category (largest rank) per run, MiB
  OUT/loss_vs_step.png, OUT/loss_vs_flops.png (training loss against cumulative FLOPs per
                      rank: the FLOP-matched comparison), OUT/eval.png
  OUT/<run>/          command.txt (the command, then "# <binary> built from commit C"), done.json
                      (command, commit, wall_s), plan.txt (the planner's command, then its --json
                      output), config.toml (the config's text as the run started), stdout.txt,
                      stderr.txt; metrics-{rank}.jsonl until packed

Recorded commands name paths relative to the repository root (they ran from it; a --out
outside the repository is written $OUT): the binary as build/subdp (or its path in the
repository) even when --binary is a private copy elsewhere, with the commit it was built
from: --binary-commit, else the file BINARY.commit beside a copy (write it when copying:
git rev-parse HEAD > DIR/subdp-table.commit), else, for a binary inside the
repository, `git rev-parse HEAD` (+"-dirty" with uncommitted changes), else "not recorded".

  /usr/bin/python3 benchmarks/compare.py configs/resnet_fmnist.toml --world 4 \\
      --regimes dp,fwd-block,bwd-block,fwd-neuron,bwd-neuron --keep 0.75,0.5,0.25 --steps 200 \\
      --set train.batch_size=32 --out benchmarks/results/resnet_fmnist

Regimes: dp (plain data parallelism, S = 1, run once), fwd-block, bwd-block, fwd-neuron,
bwd-neuron, stoch-depth (stochastic depth: every rank holds the whole model and drops each
block with probability 1 - keep per step, S = 1). A regime written `name@k` (e.g. fwd-block@0.25) is one extra run at keep k,
outside the --keep cross product. A regime written `name+recompute` (dp+recompute,
fwd-block+recompute) adds train.recompute = "blocks" (activations recomputed block by block
in the backward pass, GPT); `name+zero1` adds parallel.shard = "optimizer" (ZeRO-1),
`name+zero2` parallel.shard = "gradients" (ZeRO-2), `name+fsdp` parallel.shard = "parameters"
(FSDP; not with bwd-*);
`name+zir` model.zero_init_residual = true (every residual branch starts at 0: the ResNet's
last BatchNorm gamma, the transformers' attention output and MLP down projections);
`name+redealK` adds mask.redeal_every = K (the plan re-dealt every K steps, e.g.
fwd-block+redeal50); modifiers combine (fwd-block+zero1+recompute). Keep values whose coverage keep*S is not whole are
skipped, and so are granularities the model refuses (the MLP has no blocks), with a note.
A failing run stops the comparison with a non-zero exit naming the run and its command.

Budgets (--match, benchmarks/budget.py): steps (default) trains every run --steps steps;
flops trains each run until its cumulative training FLOPs per rank reach DP's for --steps
(the SDP paper's FLOP-matched protocol), time the same with measured step time, both from a
short calibration run of each regime (OUT/calibration/), each run's warm-up and cosine
schedule stretched to its own length. --seeds N repeats every run with train.seed =
mask.seed = 0..N-1, seed 0 of every run first: summary.md then opens with one row per run,
quality as mean +- std, and the plots draw the mean with a band of one standard deviation.

A table too long for one sitting: rerun the same command with --reuse (finished runs are
kept while their recorded command is unchanged, with the plan.txt of the binary that trained
them; a reused run of another commit than the binary's is named in summary.md's notes; a run
made from another text of the config is refused, naming its copy);
--finished-only trains nothing and summarises what has finished, naming the rest. With
--checkpoint-every N a run interrupted by a stop signal to compare.py (a session's end, a
preempted job) also resumes from its last checkpoint instead of starting over: SIGTERM,
SIGUSR1 or SIGINT to compare.py stops the run in flight at its next step with a checkpoint
(exit 75), and the same command with --reuse continues it bit for bit, its wall time summed
over the attempts (OUT/<run>/partial.json until it finishes). Without it a stop signal still
ends the run in flight, saving nothing.
benchmarks/protocol.sh runs the protocol of issue 25 this way and benchmarks/protocol_table.py
merges its budgets.
"""
import argparse
import csv
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

import budget
import child
import pack_metrics
from compare_plots import CATEGORIES, MIB, missing_modules, plots

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
MODIFIERS = {"recompute": ["train.recompute=blocks"], "zero1": ["parallel.shard=optimizer"],
             "zero2": ["parallel.shard=gradients"], "fsdp": ["parallel.shard=parameters"],
             "zir": ["model.zero_init_residual=true"]}


def known_regime(name):
    """True when name (no @keep) is a regime of REGIMES with known modifiers: base+mod+..."""
    base, *mods = name.split("+")
    return base in REGIMES and all(modifier_sets(m) is not None for m in mods)


def modifier_clash(mods):
    """Why known modifiers cannot combine (two set one key: only the last would apply), or None."""
    keys = [sets[0].partition("=")[0] for sets in map(modifier_sets, mods)]
    clash = next((k for k in keys if keys.count(k) > 1), None)
    return f"two modifiers set {clash} (only the last would apply; write one of them)" if clash else None


def modifier_sets(mod):
    """The config overrides of one modifier, or None when unknown. redealK (K a whole number
    >= 1, e.g. redeal50) re-deals the plan every K steps (mask.redeal_every = K)."""
    m = re.fullmatch(r"redeal([1-9][0-9]*)", mod)
    if m:
        return [f"mask.redeal_every={m.group(1)}"]
    return MODIFIERS.get(mod)
# Runs made by a binary older than the metrics file's eval and final records (committed
# results reused with --reuse / --finished-only): their evaluations come from stdout.txt.
LEGACY_EVAL_RE = re.compile(r"^eval step (\d+) epoch ([\d.]+): full model test_loss (\S+) test_acc (\S+)"
                            r"(?: bits_per_\w+ \S+)?(?: \| subnetworks \(own share\) loss (\S+) acc (\S+))?")
LEGACY_FINAL_RE = re.compile(r"^final step=(\d+) train_loss=(\S+) test_loss=(\S+) test_acc=(\S+) peak_bytes=(\d+) "
                             r"time_s=(\S+)")
REFUSED_RE = re.compile(r'mask\.granularity = "(block|neuron)": (.*)')


class Failure(Exception):
    pass


class NotFinished(Exception):
    """--finished-only: the run has no finished result with the same command."""


class Stopped(Exception):
    """A stop signal ended the run in flight with a checkpoint (subdp's exit 75)."""


STOPPED_EXIT = 75  # subdp train's exit after a graceful stop with a checkpoint (and compare.py's)
CHECKPOINTS = "checkpoints"  # an unfinished run's checkpoint folder, inside its run folder
CONFIG_COPY = "config.toml"  # the config's text as a run started, inside its run folder (--reuse compares it)
running = None  # the training run in flight (subprocess.Popen), for the stop-signal handler
stop_requested = False  # a stop signal came: no further run starts
checkpointing = False  # --checkpoint-every > 0 (what a stop signal saves)


def forward_stop(signum, frame):
    """SIGTERM / SIGUSR1 / SIGINT: ask the run in flight to stop at its next step (SIGUSR1,
    which mpirun forwards to every rank), with a checkpoint under --checkpoint-every, else
    saving nothing; the run then exits and compare.py with 75 (a run that finishes anyway is
    kept, and no other starts), rather than leaving the run training with nobody to read it.
    Nothing in flight: exit 75 at once."""
    global stop_requested
    stop_requested = True
    if running is None or running.poll() is not None:
        print(f"compare.py: signal {signum} between runs: stopped; rerun the same command with --reuse to go on",
              file=sys.stderr, flush=True)
        sys.exit(STOPPED_EXIT)
    saving = "with a checkpoint" if checkpointing else "saving nothing (no --checkpoint-every)"
    print(f"compare.py: signal {signum}: stopping the run in flight at its next step, {saving}",
          file=sys.stderr, flush=True)
    running.send_signal(signal.SIGUSR1)


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
        if keep == 1 and any(m.startswith("redeal") for m in name.split("+")[1:]):
            notes.append(f"skipped {name} keep 1: every subnetwork is the whole model, there is nothing to re-deal")
            return
        if (name, keep) not in seen:
            seen.add((name, keep))
            runs.append((f"{name}-k{fmt_keep(keep)}", name, keep))

    for item in regimes:
        name, _, at = item.partition("@")
        base, *mods = name.split("+")
        if not known_regime(name):
            raise SystemExit(f"compare.py: unknown regime '{name}' (expected one of {', '.join(REGIMES)}, optionally "
                             f"+{' +'.join([*MODIFIERS, 'redealK'])}; name@keep for one run)")
        clash = modifier_clash(mods)
        if clash:
            raise SystemExit(f"compare.py: regime '{name}': {clash}")
        if base in WHOLE_MODEL and any(m.startswith("redeal") for m in mods):
            raise SystemExit(f"compare.py: regime '{name}': {base} has no subnetwork plan to re-deal (redealK applies "
                             f"to fwd-/bwd- regimes)")
        if at and base == "dp":
            raise SystemExit(f"compare.py: regime '{item}': dp trains the whole model, it has no keep ratio "
                             f"(write dp without @)")
        try:
            at_keep = [float(at)] if at else keeps
        except ValueError:
            raise SystemExit(f"compare.py: regime '{item}': '{at}' after @ is not a keep ratio") from None
        for k in at_keep:
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
            f"train.eval_every={eval_every}"] + [s for m in mods for s in modifier_sets(m)]


def inside_root(path):
    p = os.path.abspath(path)
    return p == ROOT or p.startswith(ROOT + os.sep)


def repo_path(path):
    """A path as results record it: relative to the repository root when it lies inside."""
    return os.path.relpath(os.path.abspath(path), ROOT) if inside_root(path) else path


def binary_commit(binary, given=""):
    """The commit a binary was built from: given, else BINARY.commit beside it, else HEAD of the
    repository (+"-dirty" with uncommitted changes to tracked files) for a binary inside it, else
    "not recorded"."""
    if given:
        return given
    sidecar = binary + ".commit"
    if os.path.exists(sidecar):
        with open(sidecar) as f:
            return f.read().strip() or "not recorded"
    if not inside_root(binary):
        return "not recorded"
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "not recorded"
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def recorded(a, cmd):
    """cmd as results record it: the binary as a.shown_binary, paths inside the repository
    relative to its root, the output folder outside it as $OUT (no machine path)."""
    out = a.out + os.sep
    shown_out = repo_path(a.out) + os.sep if inside_root(a.out) else "$OUT/"
    res = []
    for arg in cmd:
        if arg == a.binary:
            res.append(a.shown_binary)
        elif arg == a.config:
            res.append(repo_path(arg))
        else:
            res.append(arg.replace(out, shown_out).replace(ROOT + os.sep, ""))
    return res


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
    """`subdp plan --json`'s output as {'rows': {label: [6 categories + total]}, 'worst': row of the
    largest subnetwork (or the configured DP baseline's), 'dp': plain DP's row}."""
    plan = json.loads(text)
    as_list = lambda row: [row["bytes"][c] for c in CATEGORIES] + [row["total"]]
    rows = {r["label"]: as_list(r) for r in plan["rows"]}
    rows[plan["dp"]["label"]] = dp = as_list(plan["dp"])
    worst = max((as_list(r) for r in plan["rows"]), key=lambda r: r[-1], default=dp)
    return {"rows": rows, "worst": worst, "dp": dp, "json": plan}


def run_plan(a, sets, run_dir, name, record=True):
    """The planner's figures for one run. record=False (a finished run reused) keeps the run's
    own plan.txt, written by the binary that trained it, when there is one."""
    cmd = with_sets([a.binary, "plan", a.config, "--world", str(a.world), "--json"], sets)
    p = subprocess.run(cmd, capture_output=True, text=True)
    path = os.path.join(run_dir, "plan.txt")
    if record or not os.path.exists(path):
        with open(path, "w") as f:
            f.write("$ " + shlex.join(recorded(a, cmd)) + "\n" + p.stdout + p.stderr)
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


def train_command(args, regime, keep, run_dir, steps, eval_every, extra=()):
    """The mpirun command that trains one run, that command as results record it, and its
    --set overrides (the planner's dry run of the run takes the same)."""
    metrics = os.path.join(run_dir, "metrics-{rank}.jsonl")
    sets = list(args.set) + run_sets(regime, keep, args.subnetworks, steps, eval_every, metrics) + list(extra)
    cmd = [*shlex.split(args.mpirun), "-np", str(args.world), *shlex.split(args.mpirun_args), args.binary, "train",
           args.config]
    cmd = with_sets(cmd, sets)
    return cmd, recorded(args, cmd), sets


def reusable(args, run_dir, shown):
    """True under --reuse when run_dir holds a finished run of exactly the recorded command shown,
    made from the config's present text (Failure when it was made from another)."""
    done = os.path.join(run_dir, "done.json")
    if not (args.reuse and os.path.exists(done)):
        return False
    with open(done) as f:
        same = json.load(f).get("command") == shown
    if same:
        check_same_config(args, run_dir)
    return same


def check_same_config(args, run_dir):
    """Raises Failure when run_dir's copy of the config (CONFIG_COPY, written as the run started)
    differs from args.config now: the command names the file, not its text, and --reuse would
    otherwise put runs of two configs in one table. Runs made before the copy existed pass."""
    copy = os.path.join(run_dir, CONFIG_COPY)
    if not os.path.exists(copy):
        return
    with open(copy, "rb") as then, open(args.config, "rb") as now:
        if then.read() == now.read():
            return
    raise Failure(f"{run_dir} holds a run of another text of {args.config} (the run's copy: {copy}): reusing it would "
                  "put runs of two configs in one table; use another --out, or remove that run's folder to train it "
                  "again")


def checkpoint_sets(args, run_dir):
    """The overrides of --checkpoint-every N: a checkpoint every N steps in run_dir/checkpoints
    (the last one kept), resumed from when there is one. Left out of the recorded command: a
    resumed run continues bit for bit (mpi.test_preemption), so its results are the command's."""
    if args.checkpoint_every <= 0:
        return []
    return [f"checkpoint.dir={os.path.join(run_dir, CHECKPOINTS)}", f"checkpoint.every={args.checkpoint_every}",
            "checkpoint.keep_last=1", "checkpoint.resume=auto"]


def has_checkpoint(run_dir):
    """True when run_dir/checkpoints holds a checkpoint (subdp names them step-NNNNNNNN)."""
    folder = os.path.join(run_dir, CHECKPOINTS)
    return os.path.isdir(folder) and any(d.startswith("step-") for d in os.listdir(folder))


def stopped_run(args, name, run_dir, wall):
    """The Stopped of a run a stop signal ended (subdp's exit 75, or mpirun's own status under
    SIGINT): resumable from its checkpoint, its wall time so far kept in partial.json, or with
    nothing saved."""
    if args.checkpoint_every > 0 and has_checkpoint(run_dir):
        return Stopped(f"run '{name}' stopped at its checkpoint after {wall:.0f} s in all; rerun the same command "
                       "with --reuse to resume it")
    why = "no --checkpoint-every" if args.checkpoint_every <= 0 else "stopped before its first checkpoint"
    return Stopped(f"run '{name}' stopped after {wall:.0f} s, nothing of it saved ({why}): rerun the same command "
                   "with --reuse to train it again")


def resumable(args, run_dir, shown):
    """True under --reuse --checkpoint-every when run_dir holds an unfinished run of the same
    recorded command with a checkpoint to continue from."""
    if not (args.reuse and args.checkpoint_every > 0) or os.path.exists(os.path.join(run_dir, "done.json")):
        return False
    if not has_checkpoint(run_dir):
        return False
    try:
        with open(os.path.join(run_dir, "command.txt")) as f:
            same = f.readline().rstrip("\n") == shlex.join(shown)
    except OSError:
        return False
    if same:
        check_same_config(args, run_dir)
    return same


def earlier_wall(run_dir):
    """Seconds the earlier, interrupted parts of a resumed run took (partial.json), else 0."""
    try:
        with open(os.path.join(run_dir, "partial.json")) as f:
            return float(json.load(f)["wall_s"])
    except (OSError, ValueError, KeyError):
        return 0.0


def start_afresh(args, run_dir, shown):
    """Clears what an earlier attempt left in run_dir (subdp would resume its checkpoint, and its
    metrics would mix in) and records the command."""
    for fname in os.listdir(run_dir):
        if fname.startswith("metrics-") or fname in ("done.json", "partial.json"):
            os.remove(os.path.join(run_dir, fname))
    shutil.rmtree(os.path.join(run_dir, CHECKPOINTS), ignore_errors=True)
    with open(os.path.join(run_dir, "command.txt"), "w") as f:
        f.write(shlex.join(shown) + f"\n# {args.shown_binary} built from commit {args.commit}\n")
    shutil.copyfile(args.config, os.path.join(run_dir, CONFIG_COPY))  # what --reuse compares


def run_streaming(args, name, cmd, run_dir, append):
    """Runs cmd, its output into run_dir/stdout.txt and stderr.txt (appended to a resumed run's),
    echoing the evaluation lines; its exit status ("timeout" past --timeout)."""
    global running
    mode = "a" if append else "w"
    with open(os.path.join(run_dir, "stdout.txt"), mode) as out, open(os.path.join(run_dir, "stderr.txt"), mode) as err:
        try:
            running = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=mpi_env(), bufsize=1)
        except OSError as e:
            raise Failure(f"run '{name}' could not start ({e}): {shlex.join(cmd)}")
        # A thread copies the output, so that --timeout counts while the run prints (or hangs).
        copier = threading.Thread(target=copy_output, args=(args, name, running.stdout, out), daemon=True)
        copier.start()
        try:
            rc = running.wait(timeout=args.timeout if args.timeout > 0 else None)
        except subprocess.TimeoutExpired:
            child.end(running)  # SIGTERM to mpirun, SIGKILL after child.KILL_AFTER_S
            rc = "timeout"
        copier.join(timeout=30)
        running = None
    return rc


def copy_output(args, name, stream, out):
    """Copies a run's stdout into out, echoing the evaluation lines (all with --verbose)."""
    for line in stream:
        out.write(line.replace(ROOT + os.sep, ""))  # paths as results record them (checkpoints)
        out.flush()
        if args.verbose or line.startswith(("eval ", "final ")):
            print(f"[{name}] {line}", end="", flush=True)


def train(args, name, regime, keep, run_dir, steps, eval_every, extra=()):
    cmd, shown, _ = train_command(args, regime, keep, run_dir, steps, eval_every, extra)
    cmd = with_sets(cmd, checkpoint_sets(args, run_dir))
    if reusable(args, run_dir, shown):
        print(f"[{name}] reusing the finished run in {run_dir}", flush=True)
        return cmd, None
    if args.finished_only:
        raise NotFinished(name)
    if stop_requested:
        raise Stopped(f"stopped before run '{name}' started; rerun the same command with --reuse to go on")
    resume = resumable(args, run_dir, shown)
    before = earlier_wall(run_dir) if resume else 0.0
    if not resume:
        if args.reuse and has_checkpoint(run_dir):
            print(f"[{name}] its checkpoint is of another command (or --checkpoint-every is off): starting over",
                  flush=True)
        start_afresh(args, run_dir, shown)
    # A resumed run's metrics files are cut back to its checkpoint by subdp itself.
    print(f"[{name}] {'resuming from its checkpoint: ' if resume else ''}{shlex.join(cmd)}", flush=True)
    t0 = time.time()
    rc = run_streaming(args, name, cmd, run_dir, append=resume)
    wall = before + time.time() - t0
    if rc != 0 and args.checkpoint_every > 0 and has_checkpoint(run_dir):  # a rerun resumes it
        with open(os.path.join(run_dir, "partial.json"), "w") as f:
            json.dump({"command": shown, "wall_s": wall}, f)
    if rc != 0 and (stop_requested or rc == STOPPED_EXIT):
        raise stopped_run(args, name, run_dir, wall)
    if rc != 0:
        out, err = (os.path.join(run_dir, f) for f in ("stdout.txt", "stderr.txt"))
        tail = open(err).read().strip().splitlines()[-15:] + open(out).read().strip().splitlines()[-5:]
        why = f"ran past --timeout {args.timeout:g} s and was stopped" if rc == "timeout" else f"failed (exit {rc})"
        raise Failure(f"run '{name}' {why} after {wall:.0f} s: {shlex.join(cmd)}\n"
                      f"  output in {run_dir}/stdout.txt and stderr.txt; last lines:\n    " + "\n    ".join(tail))
    with open(os.path.join(run_dir, "done.json"), "w") as f:
        json.dump({"command": shown, "commit": args.commit, "wall_s": wall}, f)
    # Finished: its checkpoints are no result (and not committed).
    shutil.rmtree(os.path.join(run_dir, CHECKPOINTS), ignore_errors=True)
    if os.path.exists(os.path.join(run_dir, "partial.json")):
        os.remove(os.path.join(run_dir, "partial.json"))
    return cmd, wall


def read_run(name, run_dir, world, steps, cmd, out):
    ranks = []
    for r in range(world):
        path = os.path.join(run_dir, f"metrics-{r}.jsonl")
        if os.path.exists(path):
            rows = pack_metrics.read_records(path)
        else:  # a reused run whose metrics were packed into OUT/steps.csv.gz
            rows = pack_metrics.rows_of(out, os.path.relpath(run_dir, out), f"metrics-{r}.jsonl")
        if not rows:
            raise Failure(f"run '{name}': rank {r} wrote no metrics ({path} missing): {shlex.join(cmd)}")
        if len(rows) != steps:
            raise Failure(f"run '{name}': rank {r} logged {len(rows)} steps, expected {steps} ({path}): {shlex.join(cmd)}")
        ranks.append(rows)
    evals, final = read_evaluations(run_dir, out)
    if final is None:
        raise Failure(f"run '{name}': no final record in {run_dir}/metrics-0.jsonl (nor a 'final ...' line in "
                      f"stdout.txt): {shlex.join(cmd)}")
    return ranks, evals, final


def read_evaluations(run_dir, out):
    """Rank 0's eval records ([{step, test_loss, test_acc, subnet_loss, subnet_acc}]) and final
    record, from its metrics file (or the packed rows); NaN where the engine wrote null. Runs of
    binaries older than those records: from stdout.txt."""
    path = os.path.join(run_dir, "metrics-0.jsonl")
    events = pack_metrics.read_events(path) if os.path.exists(path) else \
        pack_metrics.rows_of(out, os.path.relpath(run_dir, out), "metrics-0.jsonl", events=True)
    num = lambda r, k: math.nan if r.get(k) is None else float(r[k])
    evals = [{"step": e["step"], "test_loss": num(e, "test_loss"), "test_acc": num(e, "test_acc"),
              "subnet_loss": num(e, "subnetwork_loss"), "subnet_acc": num(e, "subnetwork_acc")}
             for e in events if e["event"] == "eval"]
    final = next(({"step": e["step"], "train_loss": num(e, "train_loss"), "test_loss": num(e, "test_loss"),
                   "test_acc": num(e, "test_acc"), "peak_bytes": int(e["peak_bytes"]), "time_s": num(e, "time_s")}
                  for e in reversed(events) if e["event"] == "final"), None)
    if events:
        return evals, final
    with open(os.path.join(run_dir, "stdout.txt")) as f:
        for line in f:
            m = LEGACY_EVAL_RE.match(line)
            if m:
                evals.append({"step": int(m.group(1)), "test_loss": fnum(m.group(3)), "test_acc": fnum(m.group(4)),
                              "subnet_loss": fnum(m.group(5)), "subnet_acc": fnum(m.group(6))})
            m = LEGACY_FINAL_RE.match(line)
            if m:
                final = {"step": int(m.group(1)), "train_loss": fnum(m.group(2)), "test_loss": fnum(m.group(3)),
                         "test_acc": fnum(m.group(4)), "peak_bytes": int(m.group(5)), "time_s": fnum(m.group(6))}
    return evals, final


def broadcast_bytes(regime, ranks, steps):
    """Owner-broadcast payload per step and rank (backward masking's updated unit values), bytes.
    0 for the other regimes, which never broadcast; nan for a backward run whose binary
    predates the bytes_broadcast metric."""
    if not all("bytes_broadcast" in row for rows in ranks for row in rows):
        return math.nan if regime.startswith("bwd") else 0.0
    return sum(row["bytes_broadcast"] for rows in ranks for row in rows) / (steps * len(ranks))


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
        "broadcast": broadcast_bytes(regime, ranks, steps),
        "train_loss": train_loss, "train_loss_tail": tail, "engine_train_loss": final["train_loss"],
        "test_loss": last_eval.get("test_loss", final["test_loss"]), "test_acc": last_eval.get("test_acc", final["test_acc"]),
        "subnet_loss": last_eval.get("subnet_loss", math.nan), "subnet_acc": last_eval.get("subnet_acc", math.nan),
        "engine_peak": final["peak_bytes"],
        "time_s": final["time_s"], "wall_s": wall,
        # Re-deals (mask.redeal_every): how many, their seconds (slowest rank, summed) and MB
        # moved per rank (inside the step times above; not in the all-reduced bytes).
        "redeals": sum(1 for row in ranks[0] if "redeal" in row),
        "redeal_s": sum(max(rows[i]["redeal"]["seconds"] for rows in ranks)
                        for i in range(steps) if "redeal" in ranks[0][i]),
        "redeal_mb": sum(row["redeal"]["bytes_moved"] for row in ranks[0] if "redeal" in row) / 1e6,
    }


# ---------------------------------------------------------------------------------------
# Outputs


def model_name(config, sets):
    """model.name from the config and the overrides (text models report next-token accuracy)."""
    return config_value(config, sets, "model", "name", "mlp")


def table(summaries, dp_total, dp_source):
    head = ["run", "regime", "keep", *[f"{c} MiB" for c in CATEGORIES], "total MiB", "vs DP", "predicted MiB",
            "meas/pred", "step s", "GFLOP/step/rank", "MB allreduced/step/rank", "MB broadcast/step/rank", "train loss", "test loss", "test acc", "subnet acc"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        ratio = s["total"] / dp_total if dp_total else math.nan
        cells = [s["run"], s["regime"], "-" if s["regime"].startswith("dp") else fmt_keep(s["keep"]),
                 *[f"{s['mem'][c] / MIB:.2f}" for c in CATEGORIES], f"{s['total'] / MIB:.2f}", f"{ratio:.2f}x",
                 f"{s['predicted'] / MIB:.2f}", f"{s['total'] / s['predicted']:.3f}", f"{s['step_s']:.3f}",
                 f"{s['flops'] / 1e9:.2f}", f"{s['bytes'] / 1e6:.2f}", mb_cell(s["broadcast"]), f"{s['train_loss']:.4f}", f"{s['test_loss']:.4f}",
                 f"{s['test_acc']:.4f}", "-" if math.isnan(s["subnet_acc"]) else f"{s['subnet_acc']:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [
        f"Memory: peak bytes per category of the rank with the largest total peak (MiB = 2^20 bytes); "
        f"'vs DP' divides that total by {dp_source}. 'predicted' is `subdp plan`'s largest subnetwork row; "
        f"'meas/pred' = measured / predicted total.",
        "Step s: mean over steps 2..N of the slowest rank's step time. GFLOP, MB all-reduced and MB broadcast "
        "(backward masking's owners sending updated unit values): mean per step per rank; 'n/a': a binary older "
        "than the bytes_broadcast metric.",
        f"Train loss: mean over all ranks of the last {summaries[0]['train_loss_tail'] if summaries else 0} steps. "
        "Test loss / acc: the full model assembled from the subnetworks, last evaluation on the held-out split; "
        "subnet acc: each rank's own subnetwork on its share of that split (the engine's 'subnetworks (own share)').",
    ]
    return "\n".join(lines), notes


def mb_cell(nbytes):
    """Bytes as MB with two decimals, 'n/a' for nan (not measured)."""
    return "n/a" if math.isnan(nbytes) else f"{nbytes / 1e6:.2f}"


def mean_std(values):
    """'m' for one value, 'm +- s' (sample standard deviation) for several; '-' if none."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    m = sum(values) / len(values)
    if len(values) == 1:
        return f"{m:.4f}"
    s = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
    return f"{m:.4f} +- {s:.4f}"


def budget_table(summaries):
    """One row per run over its seeds: its budget (steps, training FLOPs per rank: means over
    the seeds, which differ for stochastic depth) and quality as mean +- standard deviation."""
    head = ["run", "seeds", "steps", "GFLOP/rank", "peak MiB", "step s", "train loss", "test loss", "test acc",
            "subnet acc", "wall s", "re-deals (s, MB/rank)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_base = {}
    for s in summaries:
        by_base.setdefault(s.get("base", s["run"]), []).append(s)
    for base, runs in by_base.items():
        n = len(runs)
        cells = [base, str(n), f"{sum(r['steps'] for r in runs) / n:g}",
                 f"{sum(r['flops'] * r['steps'] for r in runs) / n / 1e9:.2f}",
                 f"{max(r['total'] for r in runs) / MIB:.2f}", f"{sum(r['step_s'] for r in runs) / len(runs):.3f}",
                 mean_std([r["train_loss"] for r in runs]), mean_std([r["test_loss"] for r in runs]),
                 mean_std([r["test_acc"] for r in runs]), mean_std([r["subnet_acc"] for r in runs]),
                 f"{sum(r['wall_s'] for r in runs) / len(runs):.0f}", redeal_cell(runs)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def redeal_cell(runs):
    """'n (s, MB)' per run, means over seeds; '-' without re-dealing."""
    if not runs[0]["redeals"]:
        return "-"
    n = len(runs)
    return (f"{sum(r['redeals'] for r in runs) / n:g} ({sum(r['redeal_s'] for r in runs) / n:.2f} s, "
            f"{sum(r['redeal_mb'] for r in runs) / n:.1f} MB)")


# runs.csv: one row per run and seed, what summary.md's tables show, for scripts
# (benchmarks/protocol_table.py). Units: bytes, seconds, FLOPs per rank; losses in nats.
RUN_FIELDS = ["run", "base", "regime", "keep", "seed", "match", "steps", "flops_per_step", "flops_total",
              "peak_bytes", "predicted_bytes", "bytes_per_step", "broadcast_bytes_per_step", "step_s", "comm_s", "wall_s", "train_loss",
              "test_loss", "test_acc", "subnet_loss", "subnet_acc", "redeals", "redeal_s", "redeal_mb"]


def run_row(s, match):
    """One runs.csv row (RUN_FIELDS) of a summarize() result under budget `match`."""
    row = {k: s[k] for k in ("run", "base", "regime", "keep", "seed", "steps", "step_s", "comm_s", "wall_s",
                             "train_loss", "test_loss", "test_acc", "subnet_loss", "subnet_acc", "redeals",
                             "redeal_s", "redeal_mb")}
    row.update(match=match, flops_per_step=s["flops"], flops_total=s["flops"] * s["steps"], peak_bytes=s["total"],
               predicted_bytes=s["predicted"], bytes_per_step=s["bytes"], broadcast_bytes_per_step=s["broadcast"])
    return row


def write_csvs(a, runs_data, summaries):
    """OUT/evals.csv (every evaluation) and OUT/runs.csv (every run and seed)."""
    with open(os.path.join(a.out, "evals.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "step", "test_loss", "test_acc", "subnet_loss", "subnet_acc"])
        for d in runs_data:
            for e in d["evals"]:
                w.writerow([d["name"], e["step"], e["test_loss"], e["test_acc"], e["subnet_loss"], e["subnet_acc"]])
    with open(os.path.join(a.out, "runs.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=RUN_FIELDS)
        w.writeheader()
        for s in summaries:
            w.writerow(run_row(s, a.match))


# ---------------------------------------------------------------------------------------


def keep_list(text):
    """--keep: comma-separated keep ratios, each a number in (0, 1]."""
    keeps = []
    for item in (k.strip() for k in text.split(",")):
        if not item:
            continue
        try:
            k = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{item}' is not a number (a comma list such as 0.75,0.5)") from None
        if not 0 < k <= 1:
            raise argparse.ArgumentTypeError(f"{item} is not in (0, 1]")
        keeps.append(k)
    if not keeps:
        raise argparse.ArgumentTypeError("no keep ratio given")
    return keeps


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("config", help="TOML run config")
    p.add_argument("--world", type=int, default=4, help="ranks W (default 4)")
    p.add_argument("--subnetworks", type=int, default=0, help="S for the masked runs (default: W)")
    p.add_argument("--regimes", default="dp,fwd-block,bwd-block,fwd-neuron,bwd-neuron",
                   help="comma list of dp, fwd-block, bwd-block, fwd-neuron, bwd-neuron, stoch-depth, each optionally "
                        "with modifiers +recompute, +zero1, +zero2, +fsdp, +zir, +redealK (e.g. fwd-block+zero1+redeal50); name@k = one run "
                        "at keep k (details below)")
    p.add_argument("--keep", default="0.75,0.5,0.25", type=keep_list,
                   help="comma list of keep ratios (default 0.75,0.5,0.25)")
    p.add_argument("--steps", type=int, required=True,
                   help="optimizer steps per run (--match steps), or DP's steps whose budget the runs match")
    p.add_argument("--match", choices=budget.MATCHES, default="steps",
                   help="budget: steps (every run --steps steps), flops (each run until its training FLOPs per rank "
                        "reach DP's for --steps) or time (the same with measured step time); default steps")
    p.add_argument("--calibration-steps", type=int, default=3,
                   help="steps of each regime's calibration run for --match flops / time (default 3)")
    p.add_argument("--alignment-every", type=int, default=0,
                   help="log.alignment_every for the masked runs: every N steps each rank's gradient cosine to the "
                        "full model's per unit kind (alignment.png); default 0 = off")
    p.add_argument("--seeds", type=int, default=1,
                   help="repeat every run with seeds 0..N-1 (train.seed and mask.seed: weights, data order, plan); "
                        "tables give mean and standard deviation, plots the mean with a band; seed 0 of every run is trained first (default 1)")
    p.add_argument("--evals", type=int, default=4, help="evaluations per run, at most: train.eval_every = ceil(steps/evals) (default 4)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override for every run (repeatable)")
    p.add_argument("--out", default="", help="output folder (default runs/compare/<config name>); one that holds "
                   "an earlier comparison is refused unless --reuse")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "subdp"),
                   help="subdp executable (a copy outside the repository is recorded as build/subdp)")
    p.add_argument("--binary-commit", default="",
                   help="the commit --binary was built from (default: BINARY.commit beside it, else HEAD of the "
                        "repository for a binary inside it, else 'not recorded')")
    p.add_argument("--mpirun", default="mpirun", help="MPI launcher (default mpirun)")
    p.add_argument("--mpirun-args", default="--oversubscribe --mca btl self,vader",
                   help="launcher options (default '--oversubscribe --mca btl self,vader')")
    p.add_argument("--timeout", type=float, default=0, help="seconds allowed per training run; 0 = no limit")
    p.add_argument("--reuse", action="store_true", help="keep runs that already finished with the same command")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="checkpoint each training run every N steps in OUT/<run>/checkpoints (the last one kept, "
                        "removed when the run finishes); SIGTERM, SIGUSR1 or SIGINT then stop the run in flight at its "
                        "next step with a checkpoint and compare.py exits 75, and a rerun with --reuse resumes it bit "
                        "for bit (the recorded command leaves these overrides out); 0 = none (default)")
    p.add_argument("--finished-only", action="store_true",
                   help="train nothing: summarise the runs that already finished with the same command (implies "
                        "--reuse) and name the others in summary.md; for a table built over several sessions")
    p.add_argument("--title", default="", help="plot title (default: the config's name)")
    p.add_argument("--verbose", action="store_true", help="echo every line of subdp train")
    a = p.parse_args(argv)
    for name, value, least in (("--steps", a.steps, 1), ("--world", a.world, 1), ("--evals", a.evals, 1),
                               ("--seeds", a.seeds, 1), ("--calibration-steps", a.calibration_steps, 2),
                               ("--timeout", a.timeout, 0), ("--alignment-every", a.alignment_every, 0),
                               ("--checkpoint-every", a.checkpoint_every, 0)):
        if not value >= least:  # nan too
            p.error(f"{name} {value:g}: must be >= {least}")
    if not os.path.exists(a.config):
        p.error(f"config {a.config} not found")
    # Its own arguments first: the binary is looked at (and its commit asked) once they hold.
    a.binary = os.path.abspath(a.binary)
    if not os.access(a.binary, os.X_OK):
        p.error(f"{a.binary} is not an executable (build it: cmake --build build --target subdp)")
    a.shown_binary = repo_path(a.binary) if inside_root(a.binary) else "build/subdp"
    a.commit = binary_commit(a.binary, a.binary_commit)
    a.reuse = a.reuse or a.finished_only
    a.subnetworks = a.subnetworks or a.world
    if a.world % a.subnetworks:
        p.error(f"--subnetworks {a.subnetworks} does not divide --world {a.world}")
    a.stem = os.path.splitext(os.path.basename(a.config))[0]
    # Default under runs/ (ignored by git), so a trial never overwrites committed results.
    a.out = os.path.abspath(a.out or os.path.join(ROOT, "runs", "compare", a.stem))
    a.title = a.title or a.stem
    return a


def config_value(config, sets, table, key, default):
    """[table] key from the config file and the overrides (the last --set wins)."""
    value = default
    try:
        import tomllib
        with open(config, "rb") as f:
            value = tomllib.load(f).get(table, {}).get(key, value)
    except Exception:
        pass
    for s in sets:
        k, _, v = s.partition("=")
        if k.strip() == f"{table}.{key}":
            try:
                value = type(default)(toml_scalar(v.strip()))
            except (TypeError, ValueError):
                raise Failure(f"--set {s}: {table}.{key} must be a {type(default).__name__}")
    return value


def toml_scalar(text):
    """A --set value as subdp reads it: a TOML value (0x10, 1_000, 1e-3, "text"), else the bare word."""
    try:
        import tomllib
        return tomllib.loads("v = " + text)["v"]
    except Exception:
        return text.strip('"')


def unfinished(a, run_dir):
    """--finished-only and no finished run in run_dir: leave it out without making its folder."""
    return a.finished_only and not os.path.exists(os.path.join(run_dir, "done.json"))


def unfinished_runs(out):
    """Run folders under OUT (relative paths) that were started (command.txt) and have not
    finished (no done.json): still training, perhaps by another compare.py on the same folder
    (a --finished-only look at a table in progress), or failed. Their metrics are not packed."""
    return {os.path.relpath(d, out) for d, _, files in os.walk(out)
            if "command.txt" in files and "done.json" not in files}


def calibrate(a, runs):
    """{run name: per-step cost} for --match flops / time, from a short run of each regime
    (and of DP, the budget's reference, even when DP is not compared). Raises Failure."""
    costs = {}
    for name, regime, keep in [("dp", "dp", 1.0)] + [r for r in runs if r[0] != "dp"]:
        run_dir = os.path.join(a.out, "calibration", name)
        try:
            if unfinished(a, run_dir):
                raise NotFinished(name)
            os.makedirs(run_dir, exist_ok=True)
            _, shown, sets = train_command(a, regime, keep, run_dir, a.calibration_steps, 10**9)
            if run_plan(a, sets, run_dir, "calibration/" + name, record=not reusable(a, run_dir, shown))[1]:
                continue  # the model refuses it: run_all skips the run with a note
            cmd, _ = train(a, "calibration/" + name, regime, keep, run_dir, a.calibration_steps, 10**9)
        except NotFinished:
            if name == "dp":
                raise Failure("--finished-only: DP's calibration run (the budget's reference) has not finished in "
                              f"{run_dir}; run without --finished-only first")
            costs[name] = None  # instances() leaves the regime out with a note
            continue
        ranks, _, _ = read_run(name, run_dir, a.world, a.calibration_steps, cmd, a.out)
        costs[name] = budget.per_step_cost(ranks)
    return costs


def instances(a, runs, costs, notes):
    """[(instance name, base run name, regime, keep, seed, steps, extra overrides)]: every run
    once per seed, with the steps of its budget and its stretched schedule. A regime whose
    calibration has not finished (cost None, --finished-only) is left out with a note."""
    warmup = config_value(a.config, a.set, "optim", "warmup_steps", 0)
    out = []
    for name, regime, keep in runs:
        if name in costs and costs[name] is None:
            notes.append(f"not run yet: {name} (no finished calibration run with this command, and "
                         "--finished-only trains none)")
            continue
        steps = budget.matched_steps(a.match, a.steps, costs["dp"], costs[name]) if name in costs else a.steps
        extra = budget.schedule_sets(steps, a.steps, warmup)
        if a.alignment_every > 0 and REGIMES[regime.split("+")[0]][0] in ("forward", "backward"):
            extra.append(f"log.alignment_every={a.alignment_every}")
        for seed in range(a.seeds):
            seed_sets = [f"train.seed={seed}", f"mask.seed={seed}"] if a.seeds > 1 else []
            label = f"{name}-s{seed}" if a.seeds > 1 else name
            out.append((label, name, regime, keep, seed, steps, extra + seed_sets))
    return out


def run_all(a, runs, notes):
    """Plans and trains every run (each seed); returns (runs_data, summaries) in regime order.
    Trains seed-major (seed 0 of every run before seed 1 of any) so that a table cut short and
    resumed with --reuse holds whole seeds first. Raises Failure."""
    costs = calibrate(a, runs) if a.match != "steps" else {}
    todo = instances(a, runs, costs, notes)
    done = {}
    for i in sorted(range(len(todo)), key=lambda i: (todo[i][4], i)):
        result = run_instance(a, *todo[i], notes)
        if result:
            done[i] = result
    return [done[i][0] for i in sorted(done)], [done[i][1] for i in sorted(done)]


def run_instance(a, name, base, regime, keep, seed, steps, extra, notes):
    """Plans, trains (or reuses) and reads one run; (run data, summary), or None when the model
    refuses it or it has not finished under --finished-only (with a note). Raises Failure."""
    run_dir = os.path.join(a.out, name)
    eval_every = -(-steps // a.evals)  # ceil: at most --evals evaluations per run
    try:
        if unfinished(a, run_dir):
            raise NotFinished(name)
        os.makedirs(run_dir, exist_ok=True)
        _, shown, sets = train_command(a, regime, keep, run_dir, steps, eval_every, extra)
        plan, refused = run_plan(a, sets, run_dir, name, record=not reusable(a, run_dir, shown))
        if refused:
            notes.append(f"skipped {name}: the model refuses it ({refused})")
            print(f"[{name}] skipped: {refused}", flush=True)
            return None
        cmd, wall = train(a, name, regime, keep, run_dir, steps, eval_every, extra)
    except NotFinished:
        notes.append(f"not run yet: {name} ({steps} steps; no finished run with this command, and "
                     "--finished-only trains none)")
        print(f"[{name}] not finished: left out (--finished-only)", flush=True)
        return None
    ranks, evals, final = read_run(name, run_dir, a.world, steps, cmd, a.out)
    commit = a.commit
    if wall is None:
        with open(os.path.join(run_dir, "done.json")) as f:
            done = json.load(f)
        wall, commit = done.get("wall_s", math.nan), done.get("commit", "not recorded")
        if commit != a.commit:
            notes.append(f"reused {name}: made by the binary of commit {commit} (this one: {a.commit})")
    s = summarize(name, regime, keep, ranks, evals, final, plan, wall)
    s.update(base=base, seed=seed, commit=commit)
    print(f"[{name}] {steps} steps, done in {wall:.0f} s", flush=True)
    return {"name": name, "base": base, "regime": regime, "keep": keep, "ranks": ranks, "evals": evals}, s


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
              f"Config `{repo_path(a.config)}`, W = {a.world}, S = {a.subnetworks} "
              f"(masked runs), at most {a.evals} evaluations per run, overrides: {' '.join(a.set) or 'none'}.", "",
              f"Binary: `{a.shown_binary}`, built from commit {commits_cell(summaries)}.", "",
              f"Budget: {budget.describe(a.match, a.steps, a.calibration_steps)}."
              + (f" Seeds: {a.seeds} per run (train.seed = mask.seed = 0..{a.seeds - 1}); quality as mean +- sample "
                 "standard deviation." if a.seeds > 1 else ""), ""]
    if a.seeds > 1 or a.match != "steps":
        header += [budget_table(summaries), "", "Every run and seed:", ""]
    footer = ["", *[f"- {n}" for n in tab_notes + notes], "",
              "Run wall time (s, training and evaluation): " +
              ", ".join(f"{s['run']} {s['wall_s']:.0f}" for s in summaries) + f"; total {total_wall:.0f}.", "",
              "Files: steps.csv.gz (every step and rank, every metrics key; benchmarks/pack_metrics.py), evals.csv, runs.csv, "
              "memory.png, loss_vs_step.png, loss_vs_flops.png, eval.png; per run: command.txt, plan.txt, stdout.txt.",
              ""]
    text = "\n".join(header) + "\n" + tab + "\n" + "\n".join(footer)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(text)
    return text


def commits_cell(summaries):
    """The commits of the runs' binaries, with how many runs each made when they differ."""
    counts = {}
    for s in summaries:
        counts[s.get("commit", "not recorded")] = counts.get(s.get("commit", "not recorded"), 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{c} ({n} runs)" for c, n in counts.items())


def earlier_results(out):
    """What of an earlier comparison --out holds: its summary, tables and run folders (names)."""
    found = [f for f in ("summary.md", "runs.csv", "evals.csv", "steps.csv.gz") if os.path.exists(os.path.join(out, f))]
    runs = [d for d in sorted(os.listdir(out)) if os.path.exists(os.path.join(out, d, "stdout.txt"))]
    return found + ([f"{len(runs)} run folder(s): {', '.join(runs[:3])}{', ...' if len(runs) > 3 else ''}"]
                    if runs else [])


def main(argv=None):
    a = parse_args(argv)
    runs, notes = plan_runs([r for r in a.regimes.split(",") if r], a.keep, a.subnetworks)
    if missing_modules():  # checked before hours of runs, not at the plots after them
        print(f"compare.py: error: {sys.executable} lacks {' and '.join(missing_modules())}, which the plots need; "
              "run `subdp compare` (it uses /usr/bin/python3, which scripts/setup.sh provides) or install them",
              file=sys.stderr)
        return 1
    try:  # the folder of every output (summaries, plots, runs), checked before any run
        os.makedirs(a.out, exist_ok=True)
        probe = os.path.join(a.out, f".write-test.{os.getpid()}")
        open(probe, "w").close()
        os.remove(probe)
    except OSError as e:
        print(f"compare.py: error: --out {a.out}: cannot write there: {e}", file=sys.stderr)
        return 1
    earlier = earlier_results(a.out)
    if earlier and not a.reuse:  # a second comparison into one folder replaced the first's results
        print(f"compare.py: error: --out {a.out} already holds a comparison ({', '.join(earlier)}); pass --reuse to "
              "keep its finished runs and add the rest, or give another --out (nothing was overwritten)",
              file=sys.stderr)
        return 1
    t_start = time.time()
    global checkpointing
    checkpointing = a.checkpoint_every > 0
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(sig, forward_stop)
    try:
        runs_data, summaries = run_all(a, runs, notes)
    except Stopped as e:
        print(f"compare.py: stopped: {e}", file=sys.stderr)
        return STOPPED_EXIT
    except (Failure, ValueError) as e:
        print(f"compare.py: error: {e}", file=sys.stderr)
        return 1
    if not summaries:
        print("compare.py: error: no run was made" + "".join("\n  " + n for n in notes), file=sys.stderr)
        return 1
    write_csvs(a, runs_data, summaries)
    pack_metrics.pack(a.out, skip=unfinished_runs(a.out), runs_only=True)
    plots(a.out, runs_data, summaries, a.title)
    text = write_summary(a, summaries, notes)
    print()
    print(text)
    print(f"wrote {a.out}/summary.md, steps.csv.gz, evals.csv, runs.csv, memory.png, loss_vs_step.png, loss_vs_flops.png, eval.png "
          f"({time.time() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
