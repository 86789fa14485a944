#!/usr/bin/env bash
# GPU bench 1 (benchmarks/gpu/run.sh runs it as `bench_1_train.sh BIN_DIR OUT_DIR`): the CUDA
# backend trains. (a) The GPT of configs/gpt_brown.toml's shape on tests/parity/gpt_text.txt,
# 20 steps on cuda and on cpu: the losses of the two backends, step by step (float32: they
# agree to rounding, not bit for bit). (b) Device memory at W = 8 through --simulate-rank 0/8
# for DP and forward / backward masking at block and neuron level (keep 0.5), fp32, and DP and
# backward neuron masking in bf16 (bf16 logits and kept activations), next to `subdp plan`
# (--set device.type=cuda: the plan of the CUDA backend's run). Writes train.csv and memory.csv;
# a regime whose run or plan fails is a row saying so, and the others still run.
# SUBDP_GPU_REHEARSAL=1: a GPT of width 32 and 3 steps, for the emulated device.
set -euo pipefail
BIN=$1
OUT=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
"$BIN/subdp" version | grep -q cuda || { echo "subdp has no CUDA backend: skipped"; exit 77; }
CFG=$ROOT/configs/gpt_brown.toml
DATA="--set data.path=$ROOT/tests/parity/gpt_text.txt --set data.val_fraction=0.1"
STEPS=20
if [[ ${SUBDP_GPU_REHEARSAL:-0} == 1 ]]; then  # the emulated device: same steps, small shapes
  DATA="$DATA --set model.width=32 --set model.heads=4 --set model.depth=2 --set model.context=32 --set train.batch_size=4"
  STEPS=3
fi
COMMON="$DATA --set train.steps=$STEPS --set train.eval_every=1000000 --set train.eval_batches=2 --set log.every=1"
for dev in cuda cpu; do
  "$BIN/subdp" train "$CFG" $COMMON --set device.type=$dev --set train.threads=8 \
    --set log.metrics_file="$OUT/train-$dev.jsonl" > "$OUT/train-$dev.txt"
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
steps = lambda path: [r for r in map(json.loads, filter(str.strip, open(path))) if "event" not in r]  # no eval / final
runs = {d: steps(f"{out}/train-{d}.jsonl") for d in ("cuda", "cpu")}
with open(f"{out}/train.csv", "w") as f:
    f.write("step,loss_cuda,loss_cpu,rel_diff,step_s_cuda,step_s_cpu\n")
    worst = 0.0
    for a, b in zip(runs["cuda"], runs["cpu"]):
        rel = abs(a["loss"] - b["loss"]) / abs(b["loss"])
        worst = max(worst, rel)
        f.write(f"{a['step']},{a['loss']:.7g},{b['loss']:.7g},{rel:.3g},{a.get('step_time_s', '')},{b.get('step_time_s', '')}\n")
print(f"train: {len(runs['cuda'])} steps, largest relative loss difference cuda vs cpu {worst:.3g}")
PY
echo "regime,measured_peak_bytes,planned_peak_bytes,ratio" > "$OUT/memory.csv"
for regime in "none block fp32" "forward block fp32" "backward block fp32" "forward neuron fp32" \
  "backward neuron fp32" "none block bf16" "backward neuron bf16"; do
  set -- $regime
  args="--set parallel.subnetworks=8 --set mask.regime=$1 --set mask.granularity=$2 --set mask.keep=0.5"
  [[ $1 == none ]] && args="--set parallel.subnetworks=1"
  args="$args --set device.precision=$3"
  measured=$("$BIN/subdp" train "$CFG" $DATA --set train.steps=2 --set train.eval_every=1000000 \
    --set train.eval_batches=1 --set device.type=cuda $args --simulate-rank 0/8 2>>"$OUT/memory-errors.txt" |
    sed -n 's/^final.*peak_bytes=\([0-9]*\).*/\1/p') || true
  planned=$("$BIN/subdp" plan "$CFG" --world 8 $DATA $args --set device.type=cuda 2>>"$OUT/memory-errors.txt" |
    awk '/^  subnetwork 0 / {print $(NF-2); exit} /^  plain DP/ {print $NF; exit}') || true
  if [[ -z $measured || -z $planned ]]; then
    echo "$1-$2-$3,${measured:-failed},${planned:-failed},(see memory-errors.txt)" >> "$OUT/memory.csv"
    continue
  fi
  echo "$1-$2-$3,$measured,$planned,$(python3 -c "print(round($measured / max(1, $planned), 3))")" >> "$OUT/memory.csv"
done
cat "$OUT/train.csv" | tail -3
cat "$OUT/memory.csv"
