#!/usr/bin/env bash
# The LLaMA (models/llama.h) under the engine's parallel features, 4 ranks unless said:
# - the planner predicts every category's peak exactly (0 bytes apart) on every rank for DP
#   and forward / backward masking at block and neuron level (S = 4, keep 0.5), and for
#   forward block masking with grouped-query attention;
# - ZeRO-1, ZeRO-2 and FSDP with forward block masking on 2 ranks give the unsharded run's
#   losses bit for bit, and the planner predicts their peaks exactly.
# Stochastic depth, alignment, re-dealing and the fenced device run the LLaMA in their own
# tests (test_stochastic_depth, test_alignment, test_redeal, test_fenced_matches_cpu).
source "$(dirname "$0")/common.sh"
cfg="$WORK/llama.toml"
# The last setting adds grouped-query attention (model.kv_heads = 2 of 4 heads).
for setting in "none block" "forward block" "forward neuron" "backward block" "backward neuron" "forward block 2"; do
  set -- $setting
  args=(--set mask.regime=$1 --set mask.granularity=$2)
  [[ $1 != none ]] && args+=(--set parallel.subnetworks=4 --set mask.keep=0.5)
  [[ -n ${3:-} ]] && args+=(--set model.kv_heads=$3)
  "$SUBDP" plan "$cfg" --world 4 "${args[@]}" --json >"$WORK/plan.json"
  run_ranks 4 train "$cfg" "${args[@]}" --set log.metrics_file="$WORK/m-{rank}.jsonl" >/dev/null
  for r in 0 1 2 3; do
    row=$r
    [[ $1 == none ]] && row=dp
    $CHECK planned-peaks "$WORK/plan.json" "$row" "$WORK/m-$r.jsonl" 0
  done
  echo "ok: llama $1 $2${3:+ kv_heads $3}: plan = measured on 4 ranks"
done
masked=(--set parallel.subnetworks=2 --set mask.regime=forward --set mask.granularity=block --set mask.keep=0.5)
for sh in none optimizer gradients parameters; do
  run_ranks 2 train "$cfg" "${masked[@]}" --set parallel.shard=$sh --set log.metrics_file="$WORK/z-$sh-{rank}.jsonl" \
    >/dev/null
  [[ $sh == none ]] && continue
  "$SUBDP" plan "$cfg" --world 2 "${masked[@]}" --set parallel.shard=$sh --json >"$WORK/z-$sh.plan"
  for r in 0 1; do
    $CHECK same-losses "$WORK/z-none-$r.jsonl" "$WORK/z-$sh-$r.jsonl" >/dev/null ||
      { echo "FAIL: llama shard=$sh rank $r: losses differ from the unsharded run"; exit 1; }
    $CHECK planned-peaks "$WORK/z-$sh.plan" "$r" "$WORK/z-$sh-$r.jsonl" 0
  done
  echo "ok: llama forward block, shard = $sh: the unsharded losses bit for bit, plan = measured"
done
