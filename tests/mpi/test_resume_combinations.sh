#!/usr/bin/env bash
# Checkpoints and resume under the memory baselines composed with SDP (issue 24), GPT, 4 ranks:
# - resuming each combination (ZeRO-1, ZeRO-2 or FSDP and / or block recompute, with DP and with forward /
#   backward masking at block and neuron level) from its step-2 checkpoint continues its
#   losses bit for bit on every rank;
# - a checkpoint written under one combination loads into another: the sharded optimizer
#   state is gathered in the full layout on save and split on load, so forward block masking +
#   ZeRO-1 + recompute -> DP + FSDP (0 further steps, re-saved) -> backward neuron masking +
#   ZeRO-1 gives back the same model and optimizer tensors, bit for bit.
source "$(dirname "$0")/common.sh"
masked() { echo --set parallel.subnetworks=2 --set mask.regime=$1 --set mask.granularity=$2 --set mask.keep=0.5; }
combos=(
  "dp-zero1|--set parallel.shard=optimizer"
  "dp-recompute|--set train.recompute=blocks"
  "dp-zero2|--set parallel.shard=gradients"
  "fwd-block-zero2-recompute|$(masked forward block) --set parallel.shard=gradients --set train.recompute=blocks"
  "dp-fsdp|--set parallel.shard=parameters"
  "fwd-neuron-fsdp-recompute|$(masked forward neuron) --set parallel.shard=parameters --set train.recompute=blocks"
  "fwd-block-zero1-recompute|$(masked forward block) --set parallel.shard=optimizer --set train.recompute=blocks"
  "fwd-neuron-zero1|$(masked forward neuron) --set parallel.shard=optimizer"
  "bwd-block-recompute|$(masked backward block) --set train.recompute=blocks"
  "bwd-neuron-zero1-recompute|$(masked backward neuron) --set parallel.shard=optimizer --set train.recompute=blocks"
)
for combo in "${combos[@]}"; do
  tag=${combo%%|*}
  read -r -a args <<<"${combo#*|}"
  run_ranks 4 train "$WORK/gpt.toml" "${args[@]}" --set checkpoint.dir="$WORK/$tag" --set checkpoint.every=2 \
    --set log.metrics_file="$WORK/$tag-full-{rank}.jsonl" >/dev/null
  run_ranks 4 train "$WORK/gpt.toml" "${args[@]}" --set checkpoint.resume="$WORK/$tag/step-00000002" \
    --set checkpoint.dir="$WORK/$tag-resumed" --set log.metrics_file="$WORK/$tag-res-{rank}.jsonl" >/dev/null
  for r in 0 1 2 3; do $CHECK same-tail "$WORK/$tag-full-$r.jsonl" "$WORK/$tag-res-$r.jsonl" >/dev/null ||
    { echo "FAIL: $tag rank $r: resumed losses differ"; exit 1; }; done
  echo "ok: $tag resumes bit for bit"
done
# Cross-loading: the step-4 checkpoint of fwd-block-zero1-recompute into DP + FSDP, then into
# backward neuron masking + ZeRO-1, no further steps: each re-saves the tensors it loaded.
src=$WORK/fwd-block-zero1-recompute/step-00000004
run_ranks 4 train "$WORK/gpt.toml" --set parallel.shard=parameters --set checkpoint.resume="$src" \
  --set checkpoint.dir="$WORK/x-dp" >/dev/null
run_ranks 4 train "$WORK/gpt.toml" $(masked backward neuron) --set parallel.shard=optimizer \
  --set checkpoint.resume="$WORK/x-dp/step-00000004" --set checkpoint.dir="$WORK/x-bwd" >/dev/null
for f in model optimizer; do
  $CHECK tensors-close "$src/$f.safetensors" "$WORK/x-dp/step-00000004/$f.safetensors" 0
  $CHECK tensors-close "$src/$f.safetensors" "$WORK/x-bwd/step-00000004/$f.safetensors" 0
done
echo "ok: a sharded, recomputed, masked checkpoint loads into DP + FSDP and into backward neuron + ZeRO-1 unchanged"
