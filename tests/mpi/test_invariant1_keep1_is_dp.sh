#!/usr/bin/env bash
# Invariant 1: SDP with keep ratio 1 is DP, bit for bit (losses and final weights), on the
# MLP (neuron level) and the ResNet (block level), forward and backward masking, 2 ranks;
# and it holds the same peak bytes in every memory category (no buffer for masking).
source "$(dirname "$0")/common.sh"
for model in mlp resnet; do
  gran=neuron; [[ $model == resnet ]] && gran=block
  run_ranks 2 train "$WORK/$model.toml" --set log.metrics_file="$WORK/$model-dp-{rank}.jsonl" \
    --set checkpoint.dir="$WORK/$model-dp-ckpt" >/dev/null
  for regime in forward backward; do
    tag=$model-$regime
    run_ranks 2 train "$WORK/$model.toml" --set parallel.subnetworks=2 --set mask.regime=$regime \
      --set mask.granularity=$gran --set mask.keep=1.0 --set log.metrics_file="$WORK/$tag-{rank}.jsonl" \
      --set checkpoint.dir="$WORK/$tag-ckpt" >/dev/null
    for r in 0 1; do
      $CHECK same-losses "$WORK/$model-dp-$r.jsonl" "$WORK/$tag-$r.jsonl"
      $CHECK same-peaks "$WORK/$model-dp-$r.jsonl" "$WORK/$tag-$r.jsonl"
    done
    $CHECK tensors-close "$(final_model "$WORK/$model-dp-ckpt")" "$(final_model "$WORK/$tag-ckpt")" 0
  done
done
