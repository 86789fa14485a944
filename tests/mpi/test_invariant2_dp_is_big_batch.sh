#!/usr/bin/env bash
# Invariant 2: DP on 4 ranks with batch b equals one process with batch 4b (float32
# tolerance): same losses (mean over ranks) and same final weights. MLP (no BatchNorm,
# whose batch statistics are per rank by design).
source "$(dirname "$0")/common.sh"
"$SUBDP" train "$WORK/mlp.toml" --set train.batch_size=64 --set parallel.backend=local \
  --set log.metrics_file="$WORK/single.jsonl" --set checkpoint.dir="$WORK/single-ckpt" >/dev/null
run_ranks 4 train "$WORK/mlp.toml" --set train.batch_size=16 --set log.metrics_file="$WORK/dp-{rank}.jsonl" \
  --set checkpoint.dir="$WORK/dp-ckpt" >/dev/null
$CHECK mean-losses "$WORK/single.jsonl" 1e-5 "$WORK"/dp-{0,1,2,3}.jsonl
$CHECK tensors-close "$WORK/single-ckpt/step-00000008/model.safetensors" "$WORK/dp-ckpt/step-00000008/model.safetensors" 1e-4
