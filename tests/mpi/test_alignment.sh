#!/usr/bin/env bash
# Gradient alignment (log.alignment_every): under backward masking a subnetwork's gradient on
# its kept slices is the full model's, so every cosine is 1; under forward masking it is
# below 1. The probe does not change training: losses and the final checkpoint (weights,
# moments, BatchNorm running statistics, restored after the probe's forward) are bit-identical.
source "$(dirname "$0")/common.sh"
masked() { echo --set parallel.subnetworks=2 --set mask.regime=$1 --set mask.granularity=$2 --set mask.keep=0.5; }
for model in gpt resnet llama; do
  for setting in "backward block" "backward neuron" "forward block" "forward neuron"; do
    set -- $setting
    tag=$model-$1-$2
    run_ranks 2 train "$WORK/$model.toml" $(masked $1 $2) --set log.alignment_every=2 \
      --set log.metrics_file="$WORK/$tag-a-{rank}.jsonl" --set checkpoint.dir="$WORK/$tag-a" >/dev/null
    run_ranks 2 train "$WORK/$model.toml" $(masked $1 $2) --set log.metrics_file="$WORK/$tag-{rank}.jsonl" \
      --set checkpoint.dir="$WORK/$tag" >/dev/null
    # Every weight, moment and BatchNorm running statistic ends the same.
    for f in model optimizer; do
      $CHECK tensors-close "$(ls -d "$WORK/$tag"/step-* | tail -1)/$f.safetensors" \
        "$(ls -d "$WORK/$tag-a"/step-* | tail -1)/$f.safetensors" 0 >/dev/null ||
        { echo "FAIL: $tag: the alignment probe changed the final $f tensors"; exit 1; }
    done
    for r in 0 1; do
      $CHECK same-losses "$WORK/$tag-$r.jsonl" "$WORK/$tag-a-$r.jsonl" >/dev/null ||
        { echo "FAIL: $tag rank $r: the alignment probe changed training"; exit 1; }
      $CHECK alignment "$WORK/$tag-a-$r.jsonl" "$1" "$tag rank $r"
    done
  done
done
