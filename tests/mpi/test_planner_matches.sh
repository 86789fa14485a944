#!/usr/bin/env bash
# The planner's predicted peak bytes per category agree with the measured peaks of a real
# 4-rank run within 5 % (every category, every rank), for DP and each regime on the ResNet
# (block and neuron level, forward and backward masking), and --simulate-rank w/W measures
# the same peaks as the real multi-rank run.
source "$(dirname "$0")/common.sh"
compare() {  # compare ROW METRICS: ROW (dp or a subnetwork) of plan.json within 5 % (or 4 KiB)
  $CHECK planned-peaks "$WORK/plan.json" "$1" "$2" 0.05
}
cfg="$WORK/resnet.toml"
for setting in "none block" "forward block" "forward neuron" "backward block" "backward neuron"; do
  set -- $setting
  regime=$1 gran=$2
  args=(--set mask.regime=$regime --set mask.granularity=$gran)
  [[ $regime != none ]] && args+=(--set parallel.subnetworks=4 --set mask.keep=0.5)
  "$SUBDP" plan "$cfg" --world 4 "${args[@]}" --json >"$WORK/plan.json"
  run_ranks 4 train "$cfg" "${args[@]}" --set log.metrics_file="$WORK/m-{rank}.jsonl" >/dev/null
  for r in 0 1 2 3; do
    if [[ $regime == none ]]; then compare dp "$WORK/m-$r.jsonl"; else compare "$r" "$WORK/m-$r.jsonl"; fi
  done
done
# --simulate-rank: rank 3 of the forward block layout alone, same peaks as the real rank 3.
"$SUBDP" plan "$cfg" --world 4 --set parallel.subnetworks=4 --set mask.regime=forward --set mask.keep=0.5 --json >"$WORK/plan.json"
OMP_NUM_THREADS=1 "$SUBDP" train "$cfg" --simulate-rank 3/4 --set train.threads=1 --set parallel.subnetworks=4 \
  --set mask.regime=forward --set mask.keep=0.5 --set log.metrics_file="$WORK/sim-{rank}.jsonl" >/dev/null
compare 3 "$WORK/sim-3.jsonl"
