#!/usr/bin/env bash
# Invariant 5: after k steps every holder of a unit holds bit-identical values (and
# BatchNorm running statistics), for forward and backward masking at block and neuron
# level on the MLP and ResNet; backward masking: every rank holds every value, identical.
# W = 4 ranks, S = 2 subnetworks (2 replicas each), keep 0.5.
source "$(dirname "$0")/common.sh"
for model in mlp resnet; do
  for gran in neuron block; do
    [[ $model == mlp && $gran == block ]] && continue
    for regime in forward backward; do
      dir="$WORK/$model-$gran-$regime"
      mkdir -p "$dir"
      SUBDP_DUMP_LOCAL="$dir" run_ranks 4 train "$WORK/$model.toml" --set parallel.subnetworks=2 \
        --set mask.regime=$regime --set mask.granularity=$gran --set mask.keep=0.5 >/dev/null
      if [[ $regime == backward ]]; then $CHECK all-identical "$dir"; else $CHECK holders-identical "$dir"; fi
    done
  done
done
