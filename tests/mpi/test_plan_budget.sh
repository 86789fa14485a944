#!/usr/bin/env bash
# `subdp plan --budget` considers every regime with every memory baseline (issue 24): at a
# budget equal to forward block masking's own predicted peak (GPT, W = 4, S = 4, keep 0.5), the
# combinations listed all fit, smallest first, each with the bytes the plan predicts for it
# alone; forward block masking itself, its ZeRO-2 and its ZeRO-1 + recompute compositions are among them,
# and plain DP (which needs more) is not.
source "$(dirname "$0")/common.sh"
mask="--set parallel.subnetworks=4 --set mask.regime=forward --set mask.keep=0.5"
peak() {  # the largest per-rank total `subdp plan --json` predicts with the given overrides
  "$SUBDP" plan "$WORK/gpt.toml" --world 4 --json "$@" >"$WORK/peak.json"
  $CHECK plan-peak "$WORK/peak.json"
}
budget=$(peak $mask)
"$SUBDP" plan "$WORK/gpt.toml" --world 4 $mask --budget "$budget" --json > "$WORK/budget.json"
$CHECK budget-fits "$WORK/budget.json" "$budget" "$WORK/budget.names"
# Each listed figure is the plan of that combination alone.
while read -r name bytes; do
  args=$mask
  [[ $name == dp* ]] && args="--set parallel.subnetworks=1"
  [[ $name == bwd-* ]] && args="$args --set mask.regime=backward"
  [[ $name == *neuron* ]] && args="$args --set mask.granularity=neuron"
  [[ $name == *zero1* ]] && args="$args --set parallel.shard=optimizer"
  [[ $name == *zero2* ]] && args="$args --set parallel.shard=gradients"
  [[ $name == *fsdp* ]] && args="$args --set parallel.shard=parameters"
  [[ $name == *recompute* ]] && args="$args --set train.recompute=blocks"
  got=$(peak $args)
  [[ $got == "$bytes" ]] || { echo "FAIL: $name: listed $bytes bytes, planned alone $got"; exit 1; }
done < "$WORK/budget.names"
echo "ok: every listed combination's bytes equal its own plan"

# A budget too small for a batch of 1: the table says none (it printed "0"), the JSON keeps 0.
out=$("$SUBDP" plan "$WORK/gpt.toml" --world 4 $mask --budget 1KiB)
grep -q "plain DP .*largest batch/rank that fits: none (not even a batch of 1 per rank)" <<<"$out" ||
  { echo "FAIL: a budget of 1 KiB: $(grep 'plain DP' <<<"$out")"; exit 1; }
echo "ok: a budget too small for one sample per rank reads none"
