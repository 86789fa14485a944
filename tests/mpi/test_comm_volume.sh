#!/usr/bin/env bash
# The bytes all-reduced per step equal the analytical count: dense parameters plus the
# kept units' parameters (and BatchNorm buffers), 4 bytes each; so do backward masking's
# owner broadcasts (bytes_broadcast).
source "$(dirname "$0")/common.sh"
# MLP 784-96-64-10, neuron level, S = 4, keep 0.5: hidden0 has 96 units, each rank keeps 48.
# Unit = fc1 row (784) + bias (1) + fc2 column (64); dense = fc2 bias (64) + fc3 (64*10 + 10).
units=$((48 * (784 + 1 + 64))); dense=$((64 + 640 + 10))
run_ranks 4 train "$WORK/mlp.toml" --set parallel.subnetworks=4 --set mask.regime=forward \
  --set mask.granularity=neuron --set mask.keep=0.5 --set log.metrics_file="$WORK/n-{rank}.jsonl" >/dev/null
for r in 0 1 2 3; do
  $CHECK bytes-per-step "$WORK/n-$r.jsonl" $((4 * (units + dense)))
  $CHECK bytes-per-step "$WORK/n-$r.jsonl" 0 bytes_broadcast
done
# Backward masking all-reduces the same slices, then the owners broadcast every unit's updated
# values (no unit is held by all four subnetworks at keep 0.5): 96 units on every rank.
run_ranks 4 train "$WORK/mlp.toml" --set parallel.subnetworks=4 --set mask.regime=backward \
  --set mask.granularity=neuron --set mask.keep=0.5 --set log.metrics_file="$WORK/bn-{rank}.jsonl" >/dev/null
for r in 0 1 2 3; do
  $CHECK bytes-per-step "$WORK/bn-$r.jsonl" $((4 * (units + dense)))
  $CHECK bytes-per-step "$WORK/bn-$r.jsonl" $((4 * 96 * (784 + 1 + 64))) bytes_broadcast
done
# DP on 4 ranks: every parameter, once.
all=$((784 * 96 + 96 + 96 * 64 + 64 + 640 + 10))
run_ranks 4 train "$WORK/mlp.toml" --set log.metrics_file="$WORK/dp-{rank}.jsonl" >/dev/null
$CHECK bytes-per-step "$WORK/dp-0.jsonl" $((4 * all))
# ResNet 8/12/16 at block level, S = 4, keep 0.5: each rank keeps one block per stage.
# Branch (cin, cout): 9*cin*cout + 9*cout*cout + 8*cout (two BN: gamma, beta, mean, var).
branch() { echo $((9 * $1 * $2 + 9 * $2 * $2 + 8 * $2)); }
stem=$((9 * 8 + 4 * 8)); short2=$((8 * 12 + 4 * 12)); short3=$((12 * 16 + 4 * 16)); fc=$((16 * 10 + 10))
dense=$((stem + short2 + short3 + fc))
# Stage 1 blocks are (8,8) both; stage 2: (8,12) then (12,12); stage 3: (12,16) then (16,16).
run_ranks 4 train "$WORK/resnet.toml" --set parallel.subnetworks=4 --set mask.regime=forward \
  --set mask.granularity=block --set mask.keep=0.5 --set log.metrics_file="$WORK/b-{rank}.jsonl" > "$WORK/plan.txt"
for r in 0 1 2 3; do
  line=$(grep "^  subnetwork $r:" "$WORK/plan.txt")
  kept=0
  for b in 0 1 2 3 4 5; do
    if [[ $line == *" block$b "* || $line == *" block$b" ]] && [[ $line != *"block$b(dropped)"* ]]; then
      case $b in 0|1) kept=$((kept + $(branch 8 8)));; 2) kept=$((kept + $(branch 8 12)));; 3) kept=$((kept + $(branch 12 12)));;
        4) kept=$((kept + $(branch 12 16)));; 5) kept=$((kept + $(branch 16 16)));; esac
    fi
  done
  $CHECK bytes-per-step "$WORK/b-$r.jsonl" $((4 * (dense + kept)))
done
