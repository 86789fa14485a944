#!/usr/bin/env bash
# A lost rank: (1) SIGKILL one of 4 ranks mid-run: every process exits non-zero within 60 s
# with a message naming the failed rank, none is left, and the newest checkpoint loads;
# (2) a stuck rank (SIGSTOP): the collective watchdog ends the job within its timeout.
source "$(dirname "$0")/common.sh"
sed -i 's/^steps = 8/steps = 100000/' "$WORK/mlp.toml"
cat >> "$WORK/mlp.toml" <<TOML
[checkpoint]
dir = "$WORK/ckpt"
every = 5
TOML
# Waits up to 60 s for a checkpoint, failing with LOG when none appears. Any complete one will
# do: older ones are pruned (keep last K), so a fixed step name can come and go between two
# polls when steps are fast.
await_checkpoint() {  # await_checkpoint LOG
  have_checkpoint() { compgen -G "$WORK/ckpt/step-????????" >/dev/null; }
  for _ in $(seq 600); do have_checkpoint && break; sleep 0.1; done
  have_checkpoint || { echo "FAIL: no checkpoint appeared"; cat "$1"; exit 1; }
}
lost_rank_run() {  # lost_rank_run SIGNAL LOG EXTRA_ARGS...: start 4 ranks, signal rank 2's pid once a checkpoint exists
  local signal=$1 log=$2
  shift 2
  timeout 300 mpirun -np 4 --oversubscribe --mca btl "$BTL" --output-filename "$WORK/out-$signal" \
    "$SUBDP" train "$WORK/mlp.toml" "$@" >"$log" 2>&1 &
  local launcher=$!
  await_checkpoint "$log"
  local victim
  victim=$(pgrep -f "^$SUBDP train $WORK/mlp.toml" | sed -n 3p)  # a rank, not mpirun
  local t0=$SECONDS
  kill -"$signal" "$victim"
  local rc=0
  wait "$launcher" || rc=$?
  local took=$((SECONDS - t0))
  [[ $rc != 0 ]] || { echo "FAIL: job exited 0 after SIG$signal"; exit 1; }
  [[ $rc != 124 ]] || { echo "FAIL: job hung after SIG$signal"; exit 1; }
  ((took <= 60)) || { echo "FAIL: took $took s to end after SIG$signal"; exit 1; }
  kill -CONT "$victim" 2>/dev/null || true
  sleep 1
  if pgrep -f "subdp train $WORK/mlp.toml" >/dev/null; then echo "FAIL: processes left"; pkill -9 -f "subdp train $WORK/mlp.toml"; exit 1; fi
  echo "ok: SIG$signal on one rank ended the job in $took s (exit $rc)"
}
lost_rank_run KILL "$WORK/kill.log"
grep -Eq "process rank [0-9]+ .*signal 9|error on rank [0-9]" "$WORK/kill.log" || { echo "FAIL: no message naming the failed rank:"; tail "$WORK/kill.log"; exit 1; }
grep -m2 -E "process rank [0-9]+ .*signal 9|error on rank [0-9]" "$WORK/kill.log"
# The newest checkpoint still loads (resume into one process, no further steps).
newest=$(ls -d "$WORK"/ckpt/step-* | grep -v '\.tmp$' | tail -1)
step=${newest##*step-}
"$SUBDP" train "$WORK/mlp.toml" --set parallel.backend=local --set checkpoint.resume="$newest" \
  --set train.steps=$((10#$step)) --set checkpoint.dir="$WORK/reload" >"$WORK/reload.log"
grep -q "resuming from" "$WORK/reload.log" || { echo "FAIL: newest checkpoint did not load"; exit 1; }
echo "ok: newest checkpoint $newest loads"
rm -rf "$WORK/ckpt"
lost_rank_run STOP "$WORK/stop.log" --set parallel.collective_timeout_s=5
grep -q "collective .* has waited" "$WORK/stop.log" || { echo "FAIL: no watchdog message"; tail "$WORK/stop.log"; exit 1; }
grep -m1 "has waited" "$WORK/stop.log"
# (3) The whole job suspended for longer than the timeout (SIGSTOP to every process, as SLURM's
# `scontrol suspend` does), then resumed: the time stopped does not count and the run finishes.
# (Before, every rank waiting in a collective timed out at the resume: a lost hour of a table.)
rm -rf "$WORK/ckpt"
timeout 300 mpirun -np 2 --oversubscribe --mca btl "$BTL" "$SUBDP" train "$WORK/mlp.toml" \
  --set train.steps=3000 --set parallel.collective_timeout_s=3 >"$WORK/suspend.log" 2>&1 &
launcher=$!
await_checkpoint "$WORK/suspend.log"
job=$(pgrep -f "$SUBDP train $WORK/mlp.toml" | tr '\n' ' ')
kill -STOP $job
sleep 6
kill -CONT $job
rc=0
wait "$launcher" || rc=$?
[[ $rc == 0 ]] || { echo "FAIL: the resumed job exited $rc:"; tail -5 "$WORK/suspend.log"; exit 1; }
grep -q "did not run for [0-9]* s (stopped" "$WORK/suspend.log" || { echo "FAIL: no note of the stop"; exit 1; }
echo "ok: a job suspended for 6 s under a 3 s collective timeout resumes and finishes"
# (4) A rank stuck before MPI_Init (it stops itself there): the others wait inside MPI_Init,
# which the watchdog guards too (it starts before MPI), so the job ends naming MPI_Init.
t0=$SECONDS
rc=0
timeout 120 mpirun -np 2 --oversubscribe --mca btl "$BTL" sh -c \
  '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && kill -STOP $$; exec "$0" "$@"' "$SUBDP" train "$WORK/mlp.toml" \
  --set train.steps=5 --set parallel.collective_timeout_s=3 >"$WORK/init.log" 2>&1 || rc=$?
took=$((SECONDS - t0))
((rc != 0 && rc != 124 && took <= 60)) || { echo "FAIL: a rank stuck before MPI_Init: exit $rc after $took s"; exit 1; }
grep -q "collective MPI_Init has waited" "$WORK/init.log" || { echo "FAIL: no MPI_Init message:"; tail -3 "$WORK/init.log"; exit 1; }
echo "ok: a rank stuck before MPI_Init ends the job in $took s (exit $rc)"
