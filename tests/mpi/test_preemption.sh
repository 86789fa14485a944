#!/usr/bin/env bash
# Preemption (issue 39): SIGTERM to one rank under mpirun, SIGUSR1 to mpirun (which Open MPI
# forwards to every rank): every rank finishes its step, they stop at the same step with a
# checkpoint and exit 75; resume = "auto" then ends bit for bit where an uninterrupted run
# ends, and the metrics file holds every step once (losses bit-identical, in order). A
# SIGKILL after a checkpoint: the resumed run cuts the metrics file back to the checkpoint's
# step, so again every step appears once. Without checkpoint.dir: exit 128 + 15, nothing saved.
# A SIGTERM during the start-up stops the run after its first step, with a checkpoint.
source "$(dirname "$0")/common.sh"
sed -i 's/^steps = 8/steps = 6000/; s/^every = 4/every = 1000/' "$WORK/mlp.toml"
args=(--set checkpoint.every=2500 --set checkpoint.keep_last=9)

# The uninterrupted run.
run_ranks 2 train "$WORK/mlp.toml" "${args[@]}" --set checkpoint.dir="$WORK/ref" \
  --set log.metrics_file="$WORK/ref-{rank}.jsonl" >/dev/null

# start NAME: 2 ranks in the background; sets LAUNCHER (timeout's pid) and MPIRUN.
start() {
  timeout 600 mpirun -np 2 --oversubscribe --mca btl "$BTL" "$SUBDP" train "$WORK/mlp.toml" "${args[@]}" \
    --set checkpoint.dir="$WORK/$1" --set log.metrics_file="$WORK/$1-{rank}.jsonl" "${@:2}" >"$WORK/$1.log" 2>&1 &
  LAUNCHER=$!
  for _ in $(seq 200); do MPIRUN=$(pgrep -P "$LAUNCHER" -x mpirun) && break; sleep 0.05; done
}
# after_step NAME N: waits until rank 1 has logged step N.
after_step() {
  for _ in $(seq 1200); do
    [[ -f "$WORK/$1-1.jsonl" ]] && (($(grep -vc '"event"' "$WORK/$1-1.jsonl") >= $2)) && return  # step records
    sleep 0.05
  done
  echo "FAIL: $1 never reached step $2"; cat "$WORK/$1.log"; exit 1
}
# stopped NAME RC: the run ended with RC, said so in one line, and left its checkpoint there.
stopped() {
  local rc=0
  wait "$LAUNCHER" || rc=$?
  [[ $rc == "$2" ]] || { echo "FAIL: $1 exited $rc, expected $2"; cat "$WORK/$1.log"; exit 1; }
}
# resumed_equals_ref NAME: resume "auto" and compare with the uninterrupted run.
resumed_equals_ref() {
  run_ranks 2 train "$WORK/mlp.toml" "${args[@]}" --set checkpoint.dir="$WORK/$1" \
    --set log.metrics_file="$WORK/$1-{rank}.jsonl" --set checkpoint.resume=auto >"$WORK/$1-resumed.log" 2>&1 ||
    { echo "FAIL: $1 did not resume"; cat "$WORK/$1-resumed.log"; exit 1; }
  for f in model optimizer; do
    $CHECK tensors-close "$WORK/ref/step-00006000/$f.safetensors" "$WORK/$1/step-00006000/$f.safetensors" 0
  done
  for r in 0 1; do $CHECK same-losses "$WORK/ref-$r.jsonl" "$WORK/$1-$r.jsonl"; done
}

# (1) SIGTERM to one rank only: the other learns of it through the step's flag all-reduce.
start term
after_step term 300
kill -TERM "$(pgrep -P "$MPIRUN" | tail -1)"
stopped term 75
line=$(grep "^stopped by SIGTERM at step" "$WORK/term.log") || { echo "FAIL: no stop line"; cat "$WORK/term.log"; exit 1; }
step=$(sed -E 's/^stopped by SIGTERM at step ([0-9]+) of 6000.*/\1/' <<<"$line")
((step > 300 && step < 6000)) || { echo "FAIL: stopped at step '$step': $line"; exit 1; }
[[ -d "$WORK/term/$(printf 'step-%08d' "$step")" ]] || { echo "FAIL: no checkpoint of step $step"; ls "$WORK/term"; exit 1; }
echo "ok: SIGTERM to one rank: both stopped at step $step with a checkpoint, exit 75: $line"
resumed_equals_ref term

# (2) SIGUSR1 to mpirun: forwarded to every rank.
start usr1
after_step usr1 300
kill -USR1 "$MPIRUN"
stopped usr1 75
grep -q "^stopped by SIGUSR1 at step" "$WORK/usr1.log" || { echo "FAIL: no stop line"; cat "$WORK/usr1.log"; exit 1; }
echo "ok: SIGUSR1 to mpirun: stopped with a checkpoint, exit 75"
resumed_equals_ref usr1

# (3) SIGKILL after the step-2500 checkpoint: the resumed run repeats steps 2501.. and the
# metrics files hold each once.
start kill
after_step kill 3000
kill -KILL "$(pgrep -P "$MPIRUN" | tail -1)"
wait "$LAUNCHER" || true
resumed_equals_ref kill
echo "ok: SIGKILL then resume: every step once in the metrics files"

# (4) No checkpoint.dir: stops at the step, says nothing was saved, exits 128 + 15.
"$SUBDP" train "$WORK/mlp.toml" --set parallel.backend=local --set log.metrics_file="$WORK/nodir.jsonl" \
  >"$WORK/nodir.log" 2>&1 &
pid=$!
for _ in $(seq 1200); do [[ -s "$WORK/nodir.jsonl" ]] && (($(grep -vc '"event"' "$WORK/nodir.jsonl") >= 300)) && break; sleep 0.05; done
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc == 143 ]] || { echo "FAIL: exit $rc without checkpoint.dir, expected 143"; cat "$WORK/nodir.log"; exit 1; }
grep -q "no checkpoint.dir, nothing saved" "$WORK/nodir.log" || { echo "FAIL: no word"; cat "$WORK/nodir.log"; exit 1; }
echo "ok: without checkpoint.dir: exit 143, nothing saved, said so"

# (5) SIGTERM during the start-up (checkpoint.dir locked, data and model not ready yet): the
# handler is already there, so the run stops after its first step with a checkpoint and exit 75
# (before, the default action ended it with 143, which a requeue script does not requeue).
"$SUBDP" train "$WORK/mlp.toml" --set parallel.backend=local "${args[@]}" --set checkpoint.dir="$WORK/early" \
  >"$WORK/early.log" 2>&1 &
pid=$!
for _ in $(seq 1000); do [[ -f "$WORK/early/subdp.lock" ]] && break; sleep 0.01; done
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc == 75 && -d "$WORK/early/step-00000001" ]] ||
  { echo "FAIL: SIGTERM at start-up: exit $rc, $(ls "$WORK/early")"; cat "$WORK/early.log"; exit 1; }
echo "ok: SIGTERM during the start-up: stopped after step 1 with a checkpoint, exit 75"
# (6) The same in a run of one step: the signal comes at its last step, so it finishes (exit 0,
# the final checkpoint written) and says that the signal came (it was silent).
"$SUBDP" train "$WORK/mlp.toml" --set parallel.backend=local "${args[@]}" --set checkpoint.dir="$WORK/late" \
  --set train.steps=1 >"$WORK/late.log" 2>&1 &
pid=$!
for _ in $(seq 1000); do [[ -f "$WORK/late/subdp.lock" ]] && break; sleep 0.01; done
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc == 0 && -d "$WORK/late/step-00000001" ]] && grep -q "received SIGTERM at the last step; the run had finished, its final checkpoint is written" "$WORK/late.log" ||
  { echo "FAIL: SIGTERM at the last step: exit $rc, $(ls "$WORK/late")"; cat "$WORK/late.log"; exit 1; }
echo "ok: SIGTERM at the last step: finished, exit 0, said so"
