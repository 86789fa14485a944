#!/usr/bin/env bash
# Gradient clipping (optim.grad_clip) clips the global norm over distinct slices: every slice
# counted once, whoever holds it. One step of plain SGD (lr 1, no momentum, no decay) clipped
# at c moves the assembled model by exactly c * g / |g|, so two runs clipped at 0.02 and 0.01
# differ by a model of norm 0.01 (relative tolerance 1e-5), in every layout: DP on one rank,
# forward and backward masking at block and neuron level (4 subnetworks, or 2 subnetworks of
# 2 replicas), and with sharded optimizer state and gradients (the norm over shard pieces).
# A norm that counted a slice once per holder, or missed one, moves it by another length.
source "$(dirname "$0")/common.sh"
masked() { echo --set parallel.subnetworks=$1 --set mask.regime=$2 --set mask.granularity=$3 --set mask.keep=0.5; }
sgd=(--set train.steps=1 --set optim.name=sgd --set optim.lr=1 --set optim.momentum=0 --set optim.weight_decay=0
     --set optim.warmup_steps=0 --set checkpoint.every=1)
cases=(
  "dp|1|"
  "fwd-neuron|4|$(masked 4 forward neuron)"
  "bwd-neuron|4|$(masked 4 backward neuron)"
  "fwd-block|4|$(masked 4 forward block)"
  "bwd-block-replicas|4|$(masked 2 backward block)"
  "fwd-neuron-zero1|4|$(masked 4 forward neuron) --set parallel.shard=optimizer"
  "bwd-neuron-zero2|4|$(masked 4 backward neuron) --set parallel.shard=gradients"
)
for c in "${cases[@]}"; do
  IFS='|' read -r tag np rest <<<"$c"
  read -r -a args <<<"$rest"
  for clip in 0.02 0.01; do
    run_ranks "$np" train "$WORK/gpt.toml" "${sgd[@]}" "${args[@]}" --set optim.grad_clip=$clip \
      --set checkpoint.dir="$WORK/$tag-$clip" >/dev/null
  done
  echo -n "$tag: "
  $CHECK model-distance "$(final_model "$WORK/$tag-0.02")" "$(final_model "$WORK/$tag-0.01")" 0.01 1e-5 ||
    { echo "FAIL: $tag: one clipped SGD step does not move the model by the clip's length"; exit 1; }
done
