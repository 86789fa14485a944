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
  "$SUBDP" plan "$WORK/$model.toml" --world 2 "${args[@]}" --set train.recompute=blocks --json >"$WORK/plan-$1.json"
  for r in 0 1; do
    $CHECK same-losses "$WORK/$model-$1-none-$r.jsonl" "$WORK/$model-$1-blocks-$r.jsonl"
    # Recompute lowers the activation peak; the planner predicts every measured peak exactly.
    $CHECK peak-below "$WORK/$model-$1-none-$r.jsonl" "$WORK/$model-$1-blocks-$r.jsonl" activations
    row=$r; [[ $1 == none ]] && row=baseline
    $CHECK planned-peaks "$WORK/plan-$1.json" $row "$WORK/$model-$1-blocks-$r.jsonl" 0
  done
done
done
