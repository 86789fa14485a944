#!/usr/bin/env bash
# benchmarks/compare.py --checkpoint-every: a table run stopped by SIGTERM to compare.py (a
# session's end, a preempted job) stops at its next step with a checkpoint and compare.py
# exits 75; the same command with --reuse resumes it, and its every step and evaluation equal
# an uninterrupted run's bit for bit; its recorded command is the uninterrupted one's, its
# wall time sums both attempts, and no checkpoint is left once it finishes. Without
# --checkpoint-every the stop still ends the run in flight.
source "$(dirname "$0")/../mpi/common.sh"
# 3000 steps of the small GPT on 2 ranks: seconds, long enough to stop in the middle.
compare_cmd=(/usr/bin/python3 "$ROOT/benchmarks/compare.py" "$WORK/gpt.toml" --binary "$SUBDP" --world 2 --regimes dp
  --steps 3000 --evals 3)
compare() { "${compare_cmd[@]}" --reuse --out "$WORK/$1" "${@:2}"; }
# stop_midway OUT LOG ARGS...: compare.py into $WORK/OUT (output in $WORK/LOG) in the
# background, SIGTERM to it once rank 0 has logged 300 steps; rc = its exit status.
stop_midway() {
  (exec "${compare_cmd[@]}" --out "$WORK/$1" "${@:3}" >"$WORK/$2" 2>&1) &
  local pid=$! metrics=$WORK/$1/dp/metrics-0.jsonl  # pid: compare.py itself (exec), not a subshell
  for _ in $(seq 600); do [[ -f $metrics && $(wc -l <"$metrics") -ge 300 ]] && break; sleep 0.05; done
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
}
stop_midway stopped first.log --reuse --checkpoint-every 100
metrics=$WORK/stopped/dp/metrics-0.jsonl
((rc == 75)) || { echo "FAIL: compare.py exited $rc after SIGTERM, expected 75"; tail -5 "$WORK/first.log"; exit 1; }
ls "$WORK/stopped/dp/checkpoints" | grep -q "^step-" || { echo "FAIL: no checkpoint after the stop"; exit 1; }
[[ ! -f $WORK/stopped/dp/done.json ]] || { echo "FAIL: a stopped run was marked done"; exit 1; }
stopped_at=$(wc -l <"$metrics")
grep -q "stopped: run 'dp' stopped at its checkpoint" "$WORK/first.log" ||
  { echo "FAIL: compare.py did not say the run stopped at its checkpoint"; tail -3 "$WORK/first.log"; exit 1; }
compare stopped --checkpoint-every 100 >"$WORK/second.log" 2>&1 || { tail -20 "$WORK/second.log"; exit 1; }
grep -q "resuming from its checkpoint" "$WORK/second.log" || { echo "FAIL: the rerun did not resume"; exit 1; }
[[ ! -e $WORK/stopped/dp/checkpoints ]] || { echo "FAIL: checkpoints left after the run finished"; exit 1; }
compare whole >"$WORK/whole.log" 2>&1 || { tail -20 "$WORK/whole.log"; exit 1; }
/usr/bin/python3 - "$ROOT" "$WORK" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1] + "/benchmarks")
import pack_metrics
work = sys.argv[2]
# What training computed (timings, memory peaks and the process's RSS start afresh in a resumed process).
KEYS = ("file", "event", "step", "epoch", "loss", "acc", "lr", "flops", "bytes_allreduced", "bytes_broadcast",
        "test_loss", "test_acc", "bits_per_byte", "train_loss")
def records(out):  # every step record and evaluation of both ranks
    rows = [r for r in pack_metrics.read_rows(f"{work}/{out}") if r["run"] == "dp"]
    return [{k: r.get(k) for k in KEYS} for r in rows]
a, b = records("stopped"), records("whole")
steps = sum(1 for r in a if r.get("event") is None)
if steps != 2 * 3000 or a != b:
    diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    sys.exit(f"FAIL: the resumed run differs from the uninterrupted one ({steps} step records; first difference "
             f"at record {diff}: {a[diff] if diff is not None else ''} vs {b[diff] if diff is not None else ''})")
cmd = lambda out: open(f"{work}/{out}/dp/command.txt").readline()
if cmd("stopped") != cmd("whole") or "checkpoint" in cmd("stopped"):
    sys.exit(f"FAIL: recorded commands differ or name the checkpoints:\n{cmd('stopped')}{cmd('whole')}")
done = json.load(open(f"{work}/stopped/dp/done.json"))
print(f"ok: stopped and resumed: {steps} step records and the evaluations equal the uninterrupted run's; "
      f"wall {done['wall_s']:.1f} s over both attempts")
PY
echo "ok: stopped at metrics line $stopped_at of rank 0, compare.py exit 75, resumed with --reuse"

# Without --checkpoint-every a stop saves nothing, but compare.py still stops the run in flight
# (before, the run trained on with nobody to read it) and exits 75.
stop_midway plain plain.log
((rc == 75)) || { echo "FAIL: compare.py without checkpoints exited $rc after SIGTERM, expected 75"; tail -5 "$WORK/plain.log"; exit 1; }
sleep 1
if pgrep -f "$WORK/plain/dp" >/dev/null; then echo "FAIL: the stopped run still trains"; exit 1; fi
grep -q "nothing of it saved (no --checkpoint-every)" "$WORK/plain.log" ||
  { echo "FAIL: the stop did not say nothing was saved"; exit 1; }
echo "ok: without checkpoints a stop ends the run in flight (exit 75, nothing saved, no process left)"
