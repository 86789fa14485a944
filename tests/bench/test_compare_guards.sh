#!/usr/bin/env bash
# benchmarks/compare.py's guards, each found by trying it as a researcher would:
# - files of the user's under --out (a dataset's *.jsonl, notes) are neither packed nor removed:
#   only its run folders' metrics-N.jsonl are (before, every *.jsonl under --out was packed and
#   deleted, and a non-JSON one ended the table in a traceback);
# - --reuse refuses a finished run made from another text of the config (the command names the
#   file, not its text: the table mixed two learning rates without a word);
# - --timeout stops a run that outlasts it, with no process left (before, it counted only after
#   the run's output ended: never);
# - a --set value in a TOML spelling subdp takes (0x10) is read as subdp reads it;
# - two modifiers of one key (dp+zero1+fsdp) are refused (only the last applied).
source "$(dirname "$0")/../mpi/common.sh"
compare() {
  /usr/bin/python3 "$ROOT/benchmarks/compare.py" "$WORK/gpt.toml" --binary "$SUBDP" --world 2 --regimes dp \
    --evals 1 "$@"
}
out=$WORK/table
mkdir -p "$out/mydata" "$out/exp1"
printf '{"text":"hello","label":1}\n{"text":"world","label":0}\n' >"$out/mydata/train.jsonl"
printf 'notes, not JSON\n' >"$out/notes.jsonl"
compare --steps 2 --out "$out" --set optim.warmup_steps=0x10 >"$WORK/first.log" 2>&1 ||
  { echo "FAIL: compare.py with foreign files under --out and warmup_steps=0x10"; tail -20 "$WORK/first.log"; exit 1; }
cmp -s <(printf '{"text":"hello","label":1}\n{"text":"world","label":0}\n') "$out/mydata/train.jsonl" &&
  [[ -f $out/notes.jsonl ]] || { echo "FAIL: compare.py packed or removed files under --out that are not its own"; exit 1; }
[[ ! -e $out/dp/metrics-0.jsonl && -s $out/steps.csv.gz && -f $out/dp/config.toml ]] ||
  { echo "FAIL: the run's metrics were not packed, or its config copy is missing"; exit 1; }
echo "ok: only the run's own metrics packed; the user's *.jsonl left as they were; warmup_steps=0x10 read"

# The same command with --reuse reuses the run; after the config's text changed, it refuses.
compare --steps 2 --out "$out" --set optim.warmup_steps=0x10 --reuse >"$WORK/reuse.log" 2>&1 && grep -q "reusing the finished run" "$WORK/reuse.log" ||
  { echo "FAIL: an unchanged config's run was not reused"; tail -5 "$WORK/reuse.log"; exit 1; }
sed -i 's/^lr = 0.001/lr = 0.05/' "$WORK/gpt.toml"
rc=0
compare --steps 2 --out "$out" --set optim.warmup_steps=0x10 --reuse >"$WORK/changed.log" 2>&1 || rc=$?
((rc == 1)) && grep -q "holds a run of another text of .*gpt.toml" "$WORK/changed.log" ||
  { echo "FAIL: --reuse after the config changed exited $rc"; tail -5 "$WORK/changed.log"; exit 1; }
echo "ok: --reuse refuses a run made from another text of the config"

# A run of 100000 steps with --timeout 3: stopped within seconds, naming the limit, nothing left.
start=$SECONDS rc=0
compare --steps 100000 --out "$WORK/slow" --timeout 3 >"$WORK/slow.log" 2>&1 || rc=$?
((rc == 1 && SECONDS - start < 60)) && grep -q "ran past --timeout 3 s and was stopped" "$WORK/slow.log" ||
  { echo "FAIL: --timeout 3: exit $rc after $((SECONDS - start)) s"; tail -5 "$WORK/slow.log"; exit 1; }
sleep 1
if pgrep -f "$WORK/slow/dp" >/dev/null; then echo "FAIL: a rank of the timed-out run still trains"; exit 1; fi
echo "ok: --timeout 3 stopped the run after $((SECONDS - start)) s, no process left"

# Two modifiers of one key (+zero1+fsdp): refused, not the last one silently.
rc=0
compare --steps 2 --out "$WORK/clash" --regimes dp+zero1+fsdp >"$WORK/clash.log" 2>&1 || rc=$?
((rc == 1)) && grep -q "two modifiers set parallel.shard" "$WORK/clash.log" ||
  { echo "FAIL: dp+zero1+fsdp exited $rc"; tail -3 "$WORK/clash.log"; exit 1; }
echo "ok: two modifiers of one key refused"
