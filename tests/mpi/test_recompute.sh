#!/usr/bin/env bash
# Activation recompute (train.recompute = "blocks", GPT and ResNet): on 2 ranks, DP and forward /
# backward block masking give the losses of the same run without recompute bit for bit, the
# largest rank's activation peak falls, and the planner predicts the measured peaks exactly.
source "$(dirname "$0")/common.sh"
for model in gpt resnet; do
for setting in "none 1" "forward 2" "backward 2"; do
  set -- $setting
  args=(--set mask.regime=$1 --set parallel.subnetworks=$2)
  [[ $1 != none ]] && args+=(--set mask.keep=0.5)
  for rc in none blocks; do
    run_ranks 2 train "$WORK/$model.toml" "${args[@]}" --set train.recompute=$rc \
      --set log.metrics_file="$WORK/$model-$1-$rc-{rank}.jsonl" >/dev/null
  done
  "$SUBDP" plan "$WORK/$model.toml" --world 2 "${args[@]}" --set train.recompute=blocks >"$WORK/plan-$1.txt"
  for r in 0 1; do
    $CHECK same-losses "$WORK/$model-$1-none-$r.jsonl" "$WORK/$model-$1-blocks-$r.jsonl"
    /usr/bin/python3 - "$WORK/$model-$1-none-$r.jsonl" "$WORK/$model-$1-blocks-$r.jsonl" "$WORK/plan-$1.txt" "$r" "$model" <<'PY'
import json, sys
stored, recomputed, plan, rank, model = sys.argv[1:]
peak = lambda path: [json.loads(l) for l in open(path)][-1]["mem_peak"]
a, b = peak(stored)["activations"], peak(recomputed)["activations"]
if not b < a:
    sys.exit(f"FAIL {model} rank {rank}: activations {b} with recompute, {a} without")
label = "dp+recompute (rank 0)" if "subnetwork 0" not in open(plan).read() else f"subnetwork {rank} "
row = next(l for l in open(plan) if l.strip().startswith(label))
nums = [int(t) for t in row.replace("(", " ").replace(")", " ").split() if t.isdigit()][-7:-1]
cats = ["params", "grads", "optimizer", "activations", "workspace", "comm"]
measured = [peak(recomputed)[c] for c in cats]
if nums != measured:
    sys.exit(f"FAIL {model} rank {rank}: planner {nums} != measured {measured}")
print(f"ok: {model} rank {rank}: activations {a} -> {b} bytes ({b / a:.2f}x), planner == measured")
PY
  done
done
done
