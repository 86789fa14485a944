#!/usr/bin/env bash
# Numerical faults: a non-finite loss or gradient is caught before the optimizer step; the
# run stops with a message naming the step, rank and tensor and writes no checkpoint over
# the last good one; with train.nonfinite = "skip" the step is skipped and the run goes on,
# up to train.max_skipped_steps in a row. Issue 22: a finite gradient whose update
# overflows (an optimizer state of 3e38 edited into a checkpoint of a neuron held by one
# rank) stops every rank at that step, naming rank, tensor and unit, with no checkpoint.
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
  $CHECK finite-tensors "$d/model.safetensors" >/dev/null || { echo "FAIL: $d holds a non-finite value"; exit 1; }
done
echo "ok: stopped at step $bad_step, checkpoints before it are finite"
rc=0
run_ranks 2 train "$WORK/mlp.toml" --set optim.lr=300 --set optim.momentum=0.0 --set train.nonfinite=skip \
  --set checkpoint.dir="$WORK/skip" --set log.metrics_file="$WORK/skip-{rank}.jsonl" >"$WORK/skip.log" 2>&1 || rc=$?
[[ $rc == 0 ]] || { echo "FAIL: skip mode exited $rc"; tail "$WORK/skip.log"; exit 1; }
grep -q "skipping step" "$WORK/skip.log" || { echo "FAIL: skip mode skipped nothing"; exit 1; }
# The final record says how many steps were skipped; its train_loss is the last batch's (skipped: NaN, null).
$CHECK skipped-final "$WORK/skip-0.jsonl" 8
echo "ok: skip mode skipped $(grep -c 'skipping step' "$WORK/skip.log") steps and finished"
rc=0
run_ranks 2 train "$WORK/mlp.toml" --set optim.lr=300 --set optim.momentum=0.0 --set train.nonfinite=skip \
  --set train.max_skipped_steps=2 --set checkpoint.dir="$WORK/give-up" >"$WORK/give-up.log" 2>&1 || rc=$?
[[ $rc != 0 ]] || { echo "FAIL: skip mode never gave up"; tail "$WORK/give-up.log"; exit 1; }
grep -q "non-finite loss or gradient in 3 consecutive steps" "$WORK/give-up.log" ||
  { echo "FAIL: no count in:"; tail -3 "$WORK/give-up.log"; exit 1; }
echo "ok: skip mode gives up after max_skipped_steps = 2"
# Forward neuron masking at S = 4, keep 0.25: each hidden unit is held by one rank.
masked=(--set parallel.subnetworks=4 --set mask.regime=forward --set mask.granularity=neuron --set mask.keep=0.25
  --set optim.name=adamw --set optim.lr=0.001)
run_ranks 4 train "$WORK/mlp.toml" "${masked[@]}" --set train.steps=4 --set checkpoint.dir="$WORK/adam" >/dev/null
unit=37
/usr/bin/python3 "$ROOT/tests/mpi/edit_checkpoint.py" "$WORK/adam/step-00000004" set net.1.weight::0 $((unit * 784 + 3)) 3e38
rc=0
run_ranks 4 train "$WORK/mlp.toml" "${masked[@]}" --set checkpoint.dir="$WORK/adam-resumed" --set checkpoint.every=1 \
  --set checkpoint.resume="$WORK/adam/step-00000004" >"$WORK/adam.log" 2>&1 || rc=$?
[[ $rc != 0 ]] || { echo "FAIL: an overflowing update trained on"; tail "$WORK/adam.log"; exit 1; }
# The edited moment makes the unit's weight huge (finite) and the next update overflows
# a state of the unit: the step and tensor depend on the data, the unit and the refusal
# to write anything from that step on do not.
want="non-finite value at step [0-9]+ \(written by the optimizer update\) on rank [0-3]: [a-z ]*net\.[13]\.weight(::[01])?, element \\([0-9, ]+\\) of the full \\([0-9, ]+\\) tensor, unit $unit of maskable layer 0"
grep -Eq "$want" "$WORK/adam.log" || { echo "FAIL: no '$want' in:"; grep -v "^\[" "$WORK/adam.log" | tail -4; exit 1; }
bad_step=$(grep -m1 -oE "non-finite value at step [0-9]+" "$WORK/adam.log" | grep -oE "[0-9]+$")
for d in "$WORK"/adam-resumed/step-*; do
  s=${d##*step-}
  ((10#$s < bad_step)) || { echo "FAIL: checkpoint $d written at or after the fault at step $bad_step"; exit 1; }
  $CHECK finite-tensors "$d/model.safetensors" "$d/optimizer.safetensors" >/dev/null ||
    { echo "FAIL: $d holds a non-finite value"; exit 1; }
done
echo "ok: $(grep -m1 -oE "non-finite value at step [0-9]+[^;]*" "$WORK/adam.log")"
# Without a checkpoint after every step, the update's count of non-finite writes is read with
# the next step's counters (one host read a step): the same step, rank and tensor are named.
rc=0
run_ranks 4 train "$WORK/mlp.toml" "${masked[@]}" --set checkpoint.resume="$WORK/adam/step-00000004" --set checkpoint.every=0 \
  >"$WORK/adam-deferred.log" 2>&1 || rc=$?
[[ $rc != 0 ]] || { echo "FAIL: an overflowing update trained on (read with the next step)"; exit 1; }
named() { grep -m1 -oE "non-finite value at step [0-9]+[^;]*" "$1"; }
[[ "$(named "$WORK/adam-deferred.log")" == "$(named "$WORK/adam.log")" ]] ||
  { echo "FAIL: read with the next step: '$(named "$WORK/adam-deferred.log")'"; exit 1; }
echo "ok: the same, read with the next step's counters"
# ZeRO-2 checks each block's gradient inside the backward pass, before reduce-scattering it:
# the GPT at lr 1e30 stops naming a block's tensor, with no checkpoint from that step on.
rc=0
run_ranks 2 train "$WORK/gpt.toml" --set parallel.shard=gradients --set optim.name=sgd --set optim.lr=1e30 \
  --set optim.momentum=0 --set train.steps=6 --set checkpoint.dir="$WORK/zero2" --set checkpoint.every=1 \
  >"$WORK/zero2.log" 2>&1 || rc=$?
[[ $rc != 0 ]] || { echo "FAIL: a diverging ZeRO-2 run exited 0"; exit 1; }
grep -Eq "rank [01]: non-finite gradient in blocks\.[0-9]+\.[a-z0-9_.]+ at step [0-9]+" "$WORK/zero2.log" ||
  { echo "FAIL: ZeRO-2: no block tensor named in:"; grep subdp "$WORK/zero2.log" | tail -3; exit 1; }
bad_step=$(grep -m1 -oE "non-finite gradient in [^ ]+ at step [0-9]+" "$WORK/zero2.log" | grep -oE "[0-9]+$")
for d in "$WORK"/zero2/step-*; do
  s=${d##*step-}
  ((10#$s < bad_step)) || { echo "FAIL: ZeRO-2 checkpoint $d written at or after the bad step $bad_step"; exit 1; }
done
echo "ok: ZeRO-2 $(grep -m1 -oE "non-finite gradient in [^ ]+ at step [0-9]+" "$WORK/zero2.log")"
