#!/usr/bin/env bash
# Checkpoint and resume: (1) resuming with the same layout continues bit for bit (DP,
# forward and backward masking, 4 ranks); (2) a checkpoint loads into another layout:
# DP (1 rank) -> SDP (4 ranks, S = 4) -> re-saved, the model and the optimizer state come
# back bit-identical, so weights were re-split by the new plan without loss.
source "$(dirname "$0")/common.sh"
sed -i 's/^steps = 8/steps = 6/' "$WORK/mlp.toml"
cat >> "$WORK/mlp.toml" <<TOML
[checkpoint]
every = 3
keep_last = 4
TOML
sed -i 's/^name = "sgd"/name = "adamw"/; s/^lr = 0.05/lr = 0.002/' "$WORK/mlp.toml"
for regime in none forward backward; do
  S=2; [[ $regime == none ]] && S=1
  args=(--set parallel.subnetworks=$S --set mask.regime=$regime --set mask.granularity=neuron)
  [[ $regime != none ]] && args+=(--set mask.keep=0.5)
  run_ranks 4 train "$WORK/mlp.toml" "${args[@]}" --set checkpoint.dir="$WORK/$regime" \
    --set log.metrics_file="$WORK/$regime-full-{rank}.jsonl" >/dev/null
  run_ranks 4 train "$WORK/mlp.toml" "${args[@]}" --set checkpoint.dir="$WORK/$regime-resumed" \
    --set checkpoint.resume="$WORK/$regime/step-00000003" --set log.metrics_file="$WORK/$regime-res-{rank}.jsonl" >/dev/null
  for r in 0 1 2 3; do $CHECK same-tail "$WORK/$regime-full-$r.jsonl" "$WORK/$regime-res-$r.jsonl"; done
done
# Re-layout: DP checkpoint at step 6 into S = 4 forward masking, 0 further steps, re-saved.
run_ranks 4 train "$WORK/mlp.toml" --set parallel.subnetworks=4 --set mask.regime=forward \
  --set mask.granularity=neuron --set mask.keep=0.5 --set checkpoint.resume="$WORK/none/step-00000006" \
  --set checkpoint.dir="$WORK/relayout" >/dev/null
$CHECK tensors-close "$WORK/none/step-00000006/model.safetensors" "$WORK/relayout/step-00000006/model.safetensors" 0
$CHECK tensors-close "$WORK/none/step-00000006/optimizer.safetensors" "$WORK/relayout/step-00000006/optimizer.safetensors" 0
