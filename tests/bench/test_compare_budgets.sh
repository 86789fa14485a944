#!/usr/bin/env bash
# benchmarks/compare.py --match flops --seeds 2 on a small GPT, 2 ranks: each run's step
# count is DP's budget divided by its own FLOPs per step (the analytical ratio, from the
# engine's counted FLOPs), its warm-up and cosine schedule are stretched to its own length
# (the cosine reaches the configured minimum at its own last step, not DP's), and every run is repeated with 2 seeds summarised as mean +- std.
source "$(dirname "$0")/../mpi/common.sh"
/usr/bin/python3 "$ROOT/benchmarks/compare.py" "$WORK/gpt.toml" --binary "$SUBDP" --world 2 \
  --regimes dp,fwd-block --keep 0.5 --steps 6 --match flops --seeds 2 --out "$WORK/out" \
  --set optim.schedule=cosine --set optim.min_lr_ratio=0.1 --set optim.warmup_steps=2 >"$WORK/compare.log" 2>&1 ||
  { tail -20 "$WORK/compare.log"; exit 1; }
/usr/bin/python3 - "$ROOT" "$WORK/out" <<'PY'
import math, sys
sys.path.insert(0, sys.argv[1] + "/benchmarks")
import budget, pack_metrics
out = sys.argv[2]
runs = {}
for row in pack_metrics.read_rows(out):
    if not row["run"].startswith("calibration"):
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
PY
