#!/usr/bin/env bash
# benchmarks/compare.py --match flops --seeds 2 on a small GPT, 2 ranks: each run's step
# count is DP's budget divided by its own FLOPs per step (the analytical ratio, from the
# engine's counted FLOPs), its warm-up and cosine schedule are stretched to its own length
# (the cosine reaches the configured minimum at its own last step, not DP's), and every run is repeated with 2 seeds summarised as mean +- std.
# Seeds are trained seed-major and reported regime-major. Then runs.csv, --finished-only and
# benchmarks/protocol_table.py (see the second half), with a run still training in the same
# folder whose metrics file must not be packed away.
source "$(dirname "$0")/../mpi/common.sh"
/usr/bin/python3 "$ROOT/benchmarks/compare.py" "$WORK/gpt.toml" --binary "$SUBDP" --world 2 \
  --regimes dp,fwd-block --keep 0.5 --steps 6 --match flops --seeds 2 --out "$WORK/out" \
  --set optim.schedule=cosine --set optim.min_lr_ratio=0.1 --set optim.warmup_steps=2 >"$WORK/compare.log" 2>&1 ||
  { tail -20 "$WORK/compare.log"; exit 1; }
/usr/bin/python3 - "$ROOT" "$WORK/out" "$SUBDP" <<'PY'
import math, sys
sys.path.insert(0, sys.argv[1] + "/benchmarks")
import budget, pack_metrics
out = sys.argv[2]
runs = {}
for row in pack_metrics.read_rows(out):  # the step records (eval and final rows have an event)
    if not row["run"].startswith("calibration") and row.get("event") is None:
        runs.setdefault(row["run"], {}).setdefault(row["file"], []).append(row)
def per_step(run):  # FLOPs per step per rank, constant for DP and forward masking
    rows = [r for f in runs[run].values() for r in f]
    return sum(r["flops"] for r in rows) / len(rows)
for seed in (0, 1):
    dp, fwd = f"dp-s{seed}", f"fwd-block-k0.5-s{seed}"
    n_dp, n_fwd = len(runs[dp]["metrics-0.jsonl"]), len(runs[fwd]["metrics-0.jsonl"])
    want = round(6 * per_step(dp) / per_step(fwd))
    if n_dp != 6 or n_fwd != want:
        sys.exit(f"FAIL seed {seed}: steps dp {n_dp}, fwd-block {n_fwd}; analytical {want}")
    for run, n in ((dp, n_dp), (fwd, n_fwd)):
        warmup = max(1, round(2 * n / 6))
        lr = [r["lr"] for r in runs[run]["metrics-0.jsonl"]]
        expect = [budget.cosine_lr(0.001, 0.1, warmup, s, n) for s in range(n)]
        if any(abs(a - b) > 1e-9 for a, b in zip(lr, expect)):
            sys.exit(f"FAIL {run}: lr {lr} is not the schedule stretched to {n} steps {expect}")
        # Not DP's schedule cut or padded: a run longer than DP's 6 steps would sit at the
        # minimum from step 6 on, a shorter one would end above it.
        if n != 6 and lr == [budget.cosine_lr(0.001, 0.1, 2, s, 6) for s in range(n)]:
            sys.exit(f"FAIL {run}: lr follows DP's 6-step schedule")
    print(f"ok: seed {seed}: dp 6 steps, fwd-block {n_fwd} = round(6 x {per_step(dp):.4g} / {per_step(fwd):.4g}); "
          f"schedules stretched, last lr {lr[-1]:.3g}")
loss = lambda run: [r["loss"] for r in runs[run]["metrics-0.jsonl"]]
if loss("dp-s0") == loss("dp-s1"):
    sys.exit("FAIL: seeds 0 and 1 trained identically")
summary = open(out + "/summary.md").read()
if "flops-matched" not in summary or "| dp | 2 | 6 |" not in summary or "+-" not in summary:
    sys.exit("FAIL: summary lacks the budget line or the mean +- std table")
print("ok: seeds differ; summary states the budget and gives mean +- std per run")
# Recorded commands name no machine path: the binary as build/subdp with its commit, the
# repository's files relative to its root, the output folder (outside it here) as $OUT.
import json, os, subprocess
root, binary = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[3])
inside = binary.startswith(root + "/")  # an out-of-tree build: build/subdp, commit not recorded
shown = os.path.relpath(binary, root) if inside else "build/subdp"
head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() \
    if inside else "not recorded"
done = json.load(open(out + "/dp-s0/done.json"))
command = open(out + "/dp-s0/command.txt").read()
plan = open(out + "/dp-s0/plan.txt").readline()
for text in (" ".join(done["command"]), command, plan, summary):
    if out in text or root + "/" in text:
        sys.exit(f"FAIL: a recorded command names a machine path: {text[:300]}")
if done["command"][done["command"].index("train") - 1] != shown or "log.metrics_file=$OUT/dp-s0/" not in command:
    sys.exit(f"FAIL: recorded command {done['command']}")
if done.get("commit", "").removesuffix("-dirty") != head or f"# {shown} built from commit {done['commit']}" not in command \
        or f"commit {done['commit']}" not in summary:
    sys.exit(f"FAIL: commit {done.get('commit')} (HEAD {head}) not recorded in done.json, command.txt and summary.md")
print(f"ok: commands recorded without machine paths, binary {shown} at {done['commit']}")
# Seed-major training (a table cut short holds whole seeds), regime-major reporting.
import os, re
log = open(os.path.dirname(out) + "/compare.log").read()
trained = re.findall(r"^\[([\w.+@-]+)\] \S.* train ", log, re.M)
if trained != ["dp-s0", "fwd-block-k0.5-s0", "dp-s1", "fwd-block-k0.5-s1"]:
    sys.exit(f"FAIL: trained in the order {trained}, not seed 0 of every run first")
print("ok: seed 0 of every run trained before seed 1")
PY

# runs.csv, --finished-only and the protocol table: a step-matched folder without DP, then a
# --finished-only pass over the FLOP-matched folder asking for a regime never run (it must
# train nothing and name it), then protocol_table.py merging both folders.
/usr/bin/python3 "$ROOT/benchmarks/compare.py" "$WORK/gpt.toml" --binary "$SUBDP" --world 2 \
  --regimes fwd-block,bwd-block --keep 0.5 --steps 6 --seeds 2 --out "$WORK/steps" >"$WORK/steps.log" 2>&1 ||
  { tail -20 "$WORK/steps.log"; exit 1; }
# A run still training in the same folder (started, no done.json) keeps its metrics file:
# packing it would delete the file its ranks append to.
mkdir -p "$WORK/out/fwd-block-k0.5-s9"
echo "mpirun ... (still training)" >"$WORK/out/fwd-block-k0.5-s9/command.txt"
echo '{"step": 1, "loss": 2.5}' >"$WORK/out/fwd-block-k0.5-s9/metrics-0.jsonl"
# A reused run keeps the plan.txt of the binary that trained it (a later binary's planner
# rewrote it, so a table resumed over sessions changed committed files of finished runs).
echo "# the planner of the binary that trained it" >>"$WORK/out/dp-s0/plan.txt"
echo "# the planner of the binary that trained it" >>"$WORK/out/calibration/fwd-block-k0.5/plan.txt"
/usr/bin/python3 "$ROOT/benchmarks/compare.py" "$WORK/gpt.toml" --binary "$SUBDP" --world 2 \
  --regimes dp,fwd-block,bwd-block --keep 0.5 --steps 6 --match flops --seeds 2 --out "$WORK/out" --finished-only \
  --set optim.schedule=cosine --set optim.min_lr_ratio=0.1 --set optim.warmup_steps=2 >"$WORK/finished.log" 2>&1 ||
  { tail -20 "$WORK/finished.log"; exit 1; }
for f in dp-s0 calibration/fwd-block-k0.5; do
  grep -q "^# the planner of the binary that trained it" "$WORK/out/$f/plan.txt" ||
    { echo "FAIL: --finished-only rewrote the plan.txt of the finished run $f"; exit 1; }
done
/usr/bin/python3 "$ROOT/benchmarks/protocol_table.py" "$WORK/steps" "$WORK/out" --out "$WORK/table" >/dev/null
/usr/bin/python3 - "$WORK" "$ROOT" <<'PY'
import csv, os, statistics, sys
work = sys.argv[1]
sys.path.insert(0, sys.argv[2] + "/benchmarks")
import pack_metrics
rows = lambda path: list(csv.DictReader(open(path)))
flops = rows(f"{work}/out/runs.csv")
if [r["run"] for r in flops] != ["dp-s0", "dp-s1", "fwd-block-k0.5-s0", "fwd-block-k0.5-s1"]:
    sys.exit(f"FAIL: --finished-only summarised {[r['run'] for r in flops]}, not the four finished runs in "
             "regime order")
if os.path.exists(f"{work}/out/bwd-block-k0.5-s0") or os.path.exists(f"{work}/out/calibration/bwd-block-k0.5"):
    sys.exit("FAIL: --finished-only trained bwd-block or made its folders")
if not os.path.exists(f"{work}/out/fwd-block-k0.5-s9/metrics-0.jsonl"):
    sys.exit("FAIL: --finished-only packed (and removed) the metrics of a run still training")
packed = {r["run"] for r in pack_metrics.read_rows(f"{work}/out")}
if "fwd-block-k0.5-s9" in packed or "fwd-block-k0.5-s0" not in packed:
    sys.exit(f"FAIL: steps.csv.gz holds the runs {sorted(packed)}")
if "not run yet: bwd-block-k0.5" not in open(f"{work}/out/summary.md").read():
    sys.exit("FAIL: summary.md does not name the run --finished-only left out")
for r in flops:
    if r["match"] != "flops" or abs(float(r["flops_total"]) - float(r["flops_per_step"]) * float(r["steps"])) > 1:
        sys.exit(f"FAIL: runs.csv row {r}")
table = {(r["run"], r["match"]): r for r in rows(f"{work}/table/table.csv")}
if set(table) != {("dp", "flops"), ("dp", "steps"), ("fwd-block-k0.5", "flops"), ("fwd-block-k0.5", "steps"),
                  ("bwd-block-k0.5", "steps")}:
    sys.exit(f"FAIL: table rows {sorted(table)}")
# Owner broadcasts: none outside backward masking; under it every block's values (12,704
# floats a block of this GPT; no block is held by both subnetworks), each step, every rank.
bcast = {r["run"]: float(r["broadcast_bytes_per_step"]) for r in rows(f"{work}/steps/runs.csv")}
want = {"fwd-block-k0.5-s0": 0, "fwd-block-k0.5-s1": 0, "bwd-block-k0.5-s0": 4 * 4 * 12704, "bwd-block-k0.5-s1": 4 * 4 * 12704}
if bcast != want or float(table[("bwd-block-k0.5", "steps")]["broadcast_bytes_per_step"]) != want["bwd-block-k0.5-s0"]:
    sys.exit(f"FAIL: broadcast bytes per step {bcast}, expected {want}")
for match, folder in (("flops", "out"), ("steps", "steps")):
    # Test loss: the seeds' accuracies can tie on this small model, their losses do not.
    losses = [float(r["test_loss"]) for r in rows(f"{work}/{folder}/runs.csv") if r["base"] == "fwd-block-k0.5"]
    got = table[("fwd-block-k0.5", match)]
    if len(losses) != 2 or losses[0] == losses[1] or abs(float(got["test_loss"]) - statistics.fmean(losses)) > 1e-12 \
            or abs(float(got["test_loss_std"]) - statistics.stdev(losses)) > 1e-12:
        sys.exit(f"FAIL: {match} fwd-block test loss {got['test_loss']} +- {got['test_loss_std']}, runs {losses}")
if table[("dp", "steps")]["test_acc"] != table[("dp", "flops")]["test_acc"]:
    sys.exit("FAIL: the step-matched table does not take DP's runs from the FLOP-matched folder")
md = open(f"{work}/table/table.md").read()
if "DP under the step-matched budget" not in md or "within 1 DP std" not in md:
    sys.exit("FAIL: table.md lacks the lent-DP note or the against-DP table")
print("ok: runs.csv rows, --finished-only trains nothing new, protocol table means and stds from runs.csv")
PY
# Issue 39: a bad option is named with its value; an unwritable --out is refused before any
# run; a metrics file cut by a crash (half line) or with a step logged twice reads as one
# record per step.
rc=0
err=$(/usr/bin/python3 "$ROOT/benchmarks/compare.py" "$WORK/gpt.toml" --binary "$SUBDP" --steps 2 --seeds 0 2>&1) || rc=$?
[[ $rc == 2 ]] && grep -qF -- "--seeds 0: must be >= 1" <<<"$err" || { echo "FAIL: --seeds 0 (rc $rc): $err"; exit 1; }
# Bad values are named before the binary is looked at: a keep that is not a number (was a
# traceback), a negative timeout (was accepted), a keep given to dp (was dropped silently).
for bad in "--keep abc|'abc' is not a number" "--timeout -1|--timeout -1: must be >= 0" \
  "--regimes dp@0.5|dp trains the whole model, it has no keep ratio"; do
  rc=0
  err=$(/usr/bin/python3 "$ROOT/benchmarks/compare.py" "$WORK/gpt.toml" --binary "$SUBDP" --steps 2 \
    --out "$WORK/bad" ${bad%%|*} 2>&1) || rc=$?
  [[ $rc != 0 ]] && grep -qF -- "${bad#*|}" <<<"$err" && ! grep -q Traceback <<<"$err" ||
    { echo "FAIL: ${bad%%|*} (rc $rc): $err"; exit 1; }
done
# A python3 without numpy (-S hides Debian's dist-packages) prints --help, and refuses a run
# before it starts, naming what is missing and `subdp compare` (was a traceback at import).
/usr/bin/python3 -S "$ROOT/benchmarks/compare.py" --help | grep -q -- "--match" || { echo "FAIL: --help without numpy"; exit 1; }
rc=0
err=$(/usr/bin/python3 -S "$ROOT/benchmarks/compare.py" "$WORK/gpt.toml" --binary "$SUBDP" --steps 2 \
  --out "$WORK/no-numpy" 2>&1) || rc=$?
[[ $rc == 1 ]] && grep -qF "lacks numpy and matplotlib" <<<"$err" && [[ ! -e $WORK/no-numpy/runs.csv ]] ||
  { echo "FAIL: compare.py without numpy (rc $rc): $err"; exit 1; }
# A second comparison into the folder of a first, without --reuse, is refused before it runs
# anything and leaves the first's results byte for byte (they were replaced silently).
sum_before=$(md5sum "$WORK/out/summary.md")
rc=0
err=$(/usr/bin/python3 "$ROOT/benchmarks/compare.py" "$WORK/gpt.toml" --binary "$SUBDP" --world 2 --regimes dp \
  --steps 2 --out "$WORK/out" 2>&1) || rc=$?
[[ $rc == 1 ]] && grep -qF -- "--out $WORK/out already holds a comparison (summary.md, runs.csv" <<<"$err" &&
  grep -qF "pass --reuse" <<<"$err" && [[ $(md5sum "$WORK/out/summary.md") == "$sum_before" ]] ||
  { echo "FAIL: a second comparison into one --out (rc $rc): $err"; exit 1; }
echo x >"$WORK/in-the-way"
rc=0
err=$(/usr/bin/python3 "$ROOT/benchmarks/compare.py" "$WORK/gpt.toml" --binary "$SUBDP" --out "$WORK/in-the-way/out" \
  --regimes dp --steps 2 2>&1) || rc=$?
[[ $rc == 1 ]] && grep -qF -- "--out $WORK/in-the-way/out: cannot write there" <<<"$err" ||
  { echo "FAIL: unwritable --out (rc $rc): $err"; exit 1; }
printf '{"step": 1, "loss": 3}\n{"step": 2, "loss": 2}\n{"event": "eval", "step": 2, "test_loss": null}\n{"step": 2, "loss": 1}\n{"step": 3, "lo' >"$WORK/cut.jsonl"
/usr/bin/python3 - "$ROOT" "$WORK/cut.jsonl" <<'PY'
import sys
sys.path.insert(0, sys.argv[1] + "/benchmarks")
import pack_metrics
got = [(r["step"], r["loss"]) for r in pack_metrics.read_records(sys.argv[2])]
if got != [(1, 3), (2, 1)]:
    sys.exit(f"FAIL: read_records gave {got}")
events = pack_metrics.read_events(sys.argv[2])
if events != [{"event": "eval", "step": 2, "test_loss": None}]:
    sys.exit(f"FAIL: read_events gave {events}")
PY
echo "ok: compare.py names the bad option, refuses an unwritable --out; metrics read one record per step, events apart"
