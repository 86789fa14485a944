#!/usr/bin/env bash
# Numerical faults: a non-finite loss or gradient is caught before the optimizer step; the
# run stops with a message naming the step, rank and tensor and writes no checkpoint over
# the last good one; with train.nonfinite = "skip" the step is skipped and the run goes on.
source "$(dirname "$0")/common.sh"
shopt -s nullglob
cat >> "$WORK/mlp.toml" <<TOML
[checkpoint]
dir = "$WORK/ckpt"
every = 2
TOML
# A learning rate of 300 overflows the weights within a few steps.
rc=0
run_ranks 2 train "$WORK/mlp.toml" --set optim.lr=300 --set optim.momentum=0.0 >"$WORK/stop.log" 2>&1 || rc=$?
[[ $rc != 0 ]] || { echo "FAIL: diverging run exited 0"; exit 1; }
grep -Eq "rank [0-9]+: non-finite gradient in [a-z0-9.]+ at step [0-9]+" "$WORK/stop.log" ||
  grep -Eq "non-finite loss or gradient at step [0-9]+" "$WORK/stop.log" || { echo "FAIL: no message:"; tail "$WORK/stop.log"; exit 1; }
grep -m1 -E "non-finite" "$WORK/stop.log"
bad_step=$(grep -m1 -oE "at step [0-9]+" "$WORK/stop.log" | grep -oE "[0-9]+")
for d in "$WORK"/ckpt/step-*; do
  s=${d##*step-}
  ((10#$s < bad_step)) || { echo "FAIL: checkpoint $d written at or after the bad step $bad_step (1-based)"; exit 1; }
done
# Every checkpoint left on disk is finite.
for d in "$WORK"/ckpt/step-*; do
  /usr/bin/python3 - "$d/model.safetensors" <<'PY'
import json, struct, sys
import numpy as np
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
raw = np.frombuffer(data[8 + n:], dtype=np.float32)
sys.exit(0 if np.isfinite(raw).all() else 1)
PY
done
echo "ok: stopped at step $bad_step, checkpoints before it are finite"
rc=0
run_ranks 2 train "$WORK/mlp.toml" --set optim.lr=300 --set optim.momentum=0.0 --set train.nonfinite=skip \
  --set checkpoint.dir="$WORK/skip" >"$WORK/skip.log" 2>&1 || rc=$?
[[ $rc == 0 ]] || { echo "FAIL: skip mode exited $rc"; tail "$WORK/skip.log"; exit 1; }
grep -q "skipping step" "$WORK/skip.log" || { echo "FAIL: skip mode skipped nothing"; exit 1; }
echo "ok: skip mode skipped $(grep -c 'skipping step' "$WORK/skip.log") steps and finished"
