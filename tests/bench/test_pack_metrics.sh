#!/usr/bin/env bash
# benchmarks/pack_metrics.py never loses a record (faults a helper found, each exit 0 before):
# - a metrics file a live run still writes (it holds the file's lock) is refused, not packed
#   and deleted under the run;
# - a JSON-lines file of another kind (a dataset) is refused, not packed into one row and
#   deleted, and a steps.csv of the user's is left (only compare.py's copy is removed);
# - packing a second file into a folder keeps the rows of a file packed there earlier.
source "$(dirname "$0")/../mpi/common.sh"
PACK=(/usr/bin/python3 "$ROOT/benchmarks/pack_metrics.py")
rows() { /usr/bin/python3 -c "import sys; sys.path.insert(0, '$ROOT/benchmarks'); import pack_metrics as p; \
print(sorted({r['file'] for r in p.read_rows('$1')}), len(p.read_rows('$1')))"; }

mkdir -p "$WORK/live"
"$SUBDP" train "$WORK/gpt.toml" --set train.steps=100000 --set log.every=1 \
  --set log.metrics_file="$WORK/live/m.jsonl" >/dev/null 2>&1 &
run=$!
for _ in $(seq 600); do [[ -s $WORK/live/m.jsonl ]] && break; sleep 0.05; done
rc=0
out=$("${PACK[@]}" "$WORK/live" 2>&1) || rc=$?
kill "$run"
wait "$run" || true
((rc == 1)) && [[ $out == *"m.jsonl: a live run is writing it"* && -s $WORK/live/m.jsonl && ! -e $WORK/live/steps.csv.gz ]] ||
  { echo "FAIL: packing a live run's metrics: exit $rc: $out"; exit 1; }
echo "ok: a live run's metrics file is refused, left as it was"

mkdir -p "$WORK/data"
printf '{"text": "ex 1"}\n{"text": "ex 2"}\n' >"$WORK/data/dataset.jsonl"
printf 'id,value\n1,important\n' >"$WORK/data/steps.csv"
rc=0
out=$("${PACK[@]}" "$WORK/data" 2>&1) || rc=$?
((rc == 1)) && [[ $out == *"dataset.jsonl: record 1 has neither a step nor an event"* ]] &&
  [[ $(wc -l <"$WORK/data/dataset.jsonl") == 2 && -f $WORK/data/steps.csv ]] ||
  { echo "FAIL: a dataset's JSON lines: exit $rc: $out"; exit 1; }
rm "$WORK/data/dataset.jsonl"
"$SUBDP" train "$WORK/gpt.toml" --set log.metrics_file="$WORK/data/m.jsonl" >/dev/null
"${PACK[@]}" "$WORK/data" >/dev/null && [[ -f $WORK/data/steps.csv ]] ||
  { echo "FAIL: packing beside a user's steps.csv removed it"; exit 1; }
echo "ok: a dataset's JSON lines refused; the user's steps.csv left"

mkdir -p "$WORK/seeds"
for seed in 0 1; do
  "$SUBDP" train "$WORK/gpt.toml" --set train.seed=$seed --set log.metrics_file="$WORK/seeds/seed$seed.jsonl" >/dev/null
  "${PACK[@]}" "$WORK/seeds" >/dev/null
done
[[ $(rows "$WORK/seeds") == "['seed0.jsonl', 'seed1.jsonl'] 12" ]] ||
  { echo "FAIL: the second pack lost the first file's rows: $(rows "$WORK/seeds")"; exit 1; }
echo "ok: a second file packed into the folder keeps the first file's rows"
