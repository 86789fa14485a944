#!/usr/bin/env bash
# The checkpoint folder and the other outputs (issue 39): (1) a second run on a folder in use
# is refused at start naming the holder's host and pid, and a dead run's lock does not block;
# (2) every output path is checked before the first step: a file in the way of
# checkpoint.dir or of the metrics file (on one rank of two), a read-only mount; (3) a
# checkpoint of another format stops resume "auto" naming it and is never pruned; (4) a disk
# with room for one checkpoint: the second is refused before writing, with the bytes needed
# and free and the room keep_last + 1 need, and the first stays; (5) a folder as the config file;
# (6) a fresh run into a folder of checkpoints, (6b) a folder, or a file inside a checkpoint
# folder, as the metrics file; (7) a FIFO or a live run's file as the metrics file. (4) also
# runs a disk without room for one checkpoint: refused before step 1.
source "$(dirname "$0")/common.sh"
sed -i 's/^steps = 8/steps = 40/' "$WORK/mlp.toml"
local_run() { "$SUBDP" train "$WORK/mlp.toml" --set parallel.backend=local "$@"; }
expect_fail() {  # expect_fail PATTERN ARGS...: non-zero exit, PATTERN in the output, no step trained
  local pattern=$1 out rc=0
  shift
  out=$("$@" 2>&1) || rc=$?
  [[ $rc != 0 ]] || { echo "FAIL: accepted: $*"; echo "$out"; exit 1; }
  grep -qF -- "$pattern" <<<"$out" || { echo "FAIL: no '$pattern' in: $out"; exit 1; }
  ! grep -q "^epoch .* step " <<<"$out" || { echo "FAIL: trained before the error: $out"; exit 1; }
  echo "ok: $pattern"
}

# (1) Two runs, one folder.
"$SUBDP" train "$WORK/mlp.toml" --set parallel.backend=local --set train.steps=1000000 \
  --set checkpoint.dir="$WORK/ck" --set checkpoint.every=100000 >"$WORK/first.log" 2>&1 &
first=$!
for _ in $(seq 200); do grep -q "pid $first" "$WORK/ck/subdp.lock" 2>/dev/null && break; sleep 0.05; done
expect_fail "checkpoint.dir = \"$WORK/ck\" is in use by another run (host $(hostname) pid $first" \
  local_run --set checkpoint.dir="$WORK/ck"
expect_fail "is in use by another run" run_ranks 2 train "$WORK/mlp.toml" --set checkpoint.dir="$WORK/ck"
kill -KILL "$first" 2>/dev/null
wait "$first" 2>/dev/null || true
local_run --set checkpoint.dir="$WORK/ck" >/dev/null || { echo "FAIL: a dead run's lock blocked"; exit 1; }
echo "ok: the lock of a killed run does not block"

# (2) Output paths, before the first step.
echo x >"$WORK/file"
expect_fail "checkpoint.dir = \"$WORK/file/ck\": cannot create the folder" local_run --set checkpoint.dir="$WORK/file/ck"
expect_fail "checkpoint.dir = \"$WORK/file\": " local_run --set checkpoint.dir="$WORK/file"
expect_fail "log.metrics_file = \"$WORK/file/m.jsonl\"" local_run --set log.metrics_file="$WORK/file/m.jsonl"
mkdir -p "$WORK/m-1.jsonl"  # rank 1's metrics path is a folder; rank 0's is fine
expect_fail "log.metrics_file = \"$WORK/m-1.jsonl\": names a folder, expected a file path" \
  run_ranks 2 train "$WORK/mlp.toml" --set log.metrics_file="$WORK/m-{rank}.jsonl"
mkdir -p "$WORK/ro" "$WORK/small"
if mount -t tmpfs -o ro,size=1m tmpfs "$WORK/ro" 2>/dev/null; then
  expect_fail "checkpoint.dir = \"$WORK/ro/ck\": cannot create the folder" local_run --set checkpoint.dir="$WORK/ro/ck"
  umount "$WORK/ro"
else
  echo "note: cannot mount tmpfs here: the read-only mount case is not run (the file-in-the-way cases are)"
fi

# (3) Another format version in the folder.
local_run --set checkpoint.dir="$WORK/fmt" --set checkpoint.every=10 --set checkpoint.keep_last=9 >/dev/null
sed -i 's/"subdp-checkpoint-v1"/"subdp-checkpoint-v2"/' "$WORK/fmt/step-00000040/manifest.json"
expect_fail "checkpoint.resume = \"auto\": cannot read $WORK/fmt/step-00000040" \
  local_run --set checkpoint.dir="$WORK/fmt" --set checkpoint.resume=auto --set train.steps=60
[[ -d "$WORK/fmt/step-00000040" ]] || { echo "FAIL: the v2 checkpoint is gone"; exit 1; }
# Resumed from an older one by its path into the same folder, which holds the later
# checkpoints of the run that went on from it: refused before anything is written (it wrote
# over step 30 of the other timeline, and left step 40 for a later "auto" to pick).
listing() { ls -l --time-style=full-iso "$1" | grep -v subdp.lock; }  # the lock file names its holder
before=$(listing "$WORK/fmt")
expect_fail "checkpoint.resume = \"$WORK/fmt/step-00000020\" is step 20 of checkpoint.dir = \"$WORK/fmt\", which also holds 2 later checkpoint(s) (step-00000030 .. step-00000040)" \
  local_run --set checkpoint.dir="$WORK/fmt" --set checkpoint.resume="$WORK/fmt/step-00000020" --set train.steps=60 \
  --set checkpoint.every=10
[[ $(listing "$WORK/fmt") == "$before" ]] || { echo "FAIL: the folder changed: $(ls "$WORK/fmt")"; exit 1; }
# Into another folder holding earlier checkpoints and a step 40 of the other format, keep_last
# = 1: the steps it can verify are pruned (the one just written never), and at step 40 the save
# refuses to write over the v2 one (CheckpointFormats.* covers pruning's warning).
mkdir -p "$WORK/fmt2" && cp -r "$WORK"/fmt/step-000000{1,2,4}0 "$WORK/fmt2/"
out=$(local_run --set checkpoint.dir="$WORK/fmt2" --set checkpoint.resume="$WORK/fmt/step-00000020" \
  --set train.steps=60 --set checkpoint.every=10 --set checkpoint.keep_last=1 2>&1) &&
  { echo "FAIL: wrote over the v2 checkpoint: $out"; exit 1; }
grep -qF "step-00000040 exists and is not a checkpoint this run can verify" <<<"$out" || { echo "FAIL: $out"; exit 1; }
grep -qF "subdp-checkpoint-v2" "$WORK/fmt2/step-00000040/manifest.json" || { echo "FAIL: the v2 checkpoint is gone"; exit 1; }
[[ -d "$WORK/fmt2/step-00000030" && ! -d "$WORK/fmt2/step-00000010" && ! -d "$WORK/fmt2/step-00000020" ]] ||
  { echo "FAIL: pruning: $(ls "$WORK/fmt2")"; exit 1; }
echo "ok: a checkpoint of another format stops auto and survives keep_last = 1"

# (4) Room for one checkpoint (about 0.7 MiB each), not two.
if mount -t tmpfs -o size=1200k tmpfs "$WORK/small" 2>/dev/null; then
  out=$(local_run --set checkpoint.dir="$WORK/small/ck" --set checkpoint.every=20 --set checkpoint.keep_last=1 2>&1) &&
    { echo "FAIL: a second checkpoint fit: $out"; umount "$WORK/small"; exit 1; }
  for part in "the checkpoint of step 40 needs" "MiB free; nothing was written" "keep_last = 1 are kept" "needs room for 2"; do
    grep -qF "$part" <<<"$out" || { echo "FAIL: no '$part' in: $out"; umount "$WORK/small"; exit 1; }
  done
  listing=$(ls "$WORK/small/ck")
  umount "$WORK/small"
  [[ $listing == $'step-00000020\nsubdp.lock' ]] || { echo "FAIL: left in the folder: $listing"; exit 1; }
  echo "ok: a full disk: refused before writing, figures given, the step-20 checkpoint kept"
  # Room for none: refused before step 1 (it was found at the first save, after the training).
  mount -t tmpfs -o size=400k tmpfs "$WORK/small"
  expect_fail "the checkpoint of step 40 needs" local_run --set checkpoint.dir="$WORK/small/ck"
  umount "$WORK/small"
else
  echo "note: cannot mount tmpfs here: the full-disk case is not run (CheckpointSpace.* covers its message)"
fi

# (5) A folder is not a config file.
out=$("$SUBDP" train "$WORK" 2>&1) && { echo "FAIL: trained on a folder: $out"; exit 1; }
grep -qF "$WORK: is a directory, not a config file" <<<"$out" || { echo "FAIL: $out"; exit 1; }
echo "ok: a folder as the config file is refused"

# (6) A fresh run (resume empty) into a folder of an earlier run's checkpoints is refused before
# any step, and the checkpoints stay (keep_last would have pruned them).
local_run --set checkpoint.dir="$WORK/prev" --set train.steps=20 --set checkpoint.every=10 >/dev/null
expect_fail "already holds 2 checkpoint(s) of an earlier run (step-00000010 .. step-00000020)" \
  local_run --set checkpoint.dir="$WORK/prev" --set checkpoint.every=10 --set checkpoint.keep_last=1
[[ $(ls "$WORK/prev" | tr '\n' ' ') == "step-00000010 step-00000020 subdp.lock " ]] ||
  { echo "FAIL: the earlier checkpoints changed: $(ls "$WORK/prev")"; exit 1; }

# (6b) The metrics file as a folder is refused on one rank and on two (two wrote hidden
# ".rank<r>" files inside it), and inside a checkpoint folder, which keep_last deletes.
expect_fail "log.metrics_file = \"$WORK/\": names a folder, expected a file path" \
  run_ranks 2 train "$WORK/mlp.toml" --set log.metrics_file="$WORK/"
expect_fail "log.metrics_file = \"$WORK/newdir/\": names a folder" local_run --set log.metrics_file="$WORK/newdir/"
[[ ! -e "$WORK/newdir" ]] || { echo "FAIL: the refused folder was created"; exit 1; }
expect_fail "is inside a folder of checkpoint.dir = \"$WORK/prev\"" local_run --set checkpoint.dir="$WORK/prev" \
  --set checkpoint.resume=auto --set log.metrics_file="$WORK/prev/step-00000020/m.jsonl"
expect_fail "is the lock file of checkpoint.dir = \"$WORK/prev\"" local_run --set checkpoint.dir="$WORK/prev" \
  --set checkpoint.resume=auto --set log.metrics_file="$WORK/prev/subdp.lock"

# (7) The metrics file: a FIFO is refused (its open would block for ever), and a second run
# on a file a live run writes is refused before it cuts anything.
mkfifo "$WORK/fifo.jsonl"
expect_fail "log.metrics_file = \"$WORK/fifo.jsonl\": not a regular file" timeout 60 "$SUBDP" train \
  "$WORK/mlp.toml" --set parallel.backend=local --set log.metrics_file="$WORK/fifo.jsonl"
"$SUBDP" train "$WORK/mlp.toml" --set parallel.backend=local --set train.steps=1000000 \
  --set log.metrics_file="$WORK/live.jsonl" >"$WORK/live.log" 2>&1 &
live=$!
for _ in $(seq 400); do [[ -s "$WORK/live.jsonl" ]] && break; sleep 0.05; done
expect_fail "log.metrics_file = \"$WORK/live.jsonl\": in use by another run" \
  local_run --set log.metrics_file="$WORK/live.jsonl"
lines=$(wc -l <"$WORK/live.jsonl")
kill -KILL "$live" 2>/dev/null
[[ $lines -gt 0 ]] || { echo "FAIL: the live run's records were cut"; exit 1; }
