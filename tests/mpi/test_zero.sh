#!/usr/bin/env bash
# ZeRO-1 (parallel.shard = "optimizer"): optimizer state split over each slice's holders,
# gradients reduce-scattered, updated values all-gathered. ZeRO-2 (parallel.shard =
# "gradients"): the same, with each block's gradients reduce-scattered right after its
# backward and only this rank's shard kept. FSDP (parallel.shard = "parameters"): ZeRO-2 with
# each block's values kept as this rank's shard and gathered before the block's forward and
# backward (not with backward masking). Checks, for each, on the MLP and the GPT:
# - 2 ranks: DP and forward block / neuron masking give the unsharded run's losses and final
#   weights and optimizer state bit for bit (a sum of two addends has one order);
# - 4 ranks (holder groups of 2 under S = 2): losses within 1e-6 relative of the unsharded
#   run (MPI_Reduce_scatter may add the 4 contributions in another order than the
#   all-reduce: float32 rounding, 2^-23 per addition, a few additions deep);
# - the optimizer category shrinks to the shard (about 1/holders); under ZeRO-2 / FSDP and DP
#   the GPT's gradient category shrinks below ZeRO-1's, and under FSDP its parameter category
#   too (see the comments in the check; the MLP has no blocks, so nothing is freed early);
# - the bytes per step equal the all-reduce's (FSDP: 1.5x for the blocks, see the check), the
#   planner predicts the measured peaks, holders agree (invariant 5), and a resume from a
#   sharded checkpoint continues bit for bit.
source "$(dirname "$0")/common.sh"
set_masked() { [[ $1 == dp ]] && return; echo --set parallel.subnetworks=2 --set mask.regime=$1 --set mask.granularity=$2 --set mask.keep=0.5; }
for np in 2 4; do
  for setting in "dp -" "forward block" "backward neuron"; do
    set -- $setting
    model=gpt; [[ $2 == neuron ]] && model=mlp
    tag=$model-$np-$1-$2
    shards="optimizer gradients"
    [[ $1 != backward ]] && shards="$shards parameters"  # FSDP refuses backward masking
    for sh in none $shards; do
      run_ranks $np train "$WORK/$model.toml" $(set_masked $1 $2) --set parallel.shard=$sh \
        --set log.metrics_file="$WORK/$tag-$sh-{rank}.jsonl" --set checkpoint.dir="$WORK/$tag-$sh" >/dev/null
    done
    for sh in $shards; do
    "$SUBDP" plan "$WORK/$model.toml" --world $np $(set_masked $1 $2) --set parallel.shard=$sh --json >"$WORK/$tag-$sh.plan"
    for ((r = 0; r < np; ++r)); do
      if [[ $np == 2 ]]; then $CHECK same-losses "$WORK/$tag-none-$r.jsonl" "$WORK/$tag-$sh-$r.jsonl" >/dev/null
      else $CHECK mean-losses "$WORK/$tag-none-$r.jsonl" 1e-6 "$WORK/$tag-$sh-$r.jsonl" >/dev/null; fi ||
        { echo "FAIL: $tag $sh rank $r: losses differ from the unsharded run"; exit 1; }
      $CHECK sharded "$WORK/$tag-none-$r.jsonl" "$WORK/$tag-$sh-$r.jsonl" "$WORK/$tag-$sh.plan" "$r" "$1" "$tag" "$sh" \
        "$WORK/$tag-optimizer-$r.jsonl"
    done
    if [[ $np == 2 ]]; then
      for f in model optimizer; do
        $CHECK tensors-close "$(final_model "$WORK/$tag-none" | sed "s/model.safetensors/$f.safetensors/")" \
          "$(final_model "$WORK/$tag-$sh" | sed "s/model.safetensors/$f.safetensors/")" 0 >/dev/null ||
          { echo "FAIL: $tag $sh: final $f tensors differ"; exit 1; }
      done
    fi
    done
  done
done
# The ResNet (BatchNorm running statistics inside blocks, reduced after the backward pass;
# dropped blocks that are the identity), 2 ranks, forward block masking: ZeRO-2 and FSDP train
# bit for bit as the unsharded run (FSDP: its evaluations gather every block too), and the
# planner predicts their bytes.
res=(--set parallel.subnetworks=2 --set mask.regime=forward --set mask.keep=0.5)
for sh in none gradients parameters; do
  run_ranks 2 train "$WORK/resnet.toml" "${res[@]}" --set parallel.shard=$sh --set train.eval_every=2 \
    --set log.metrics_file="$WORK/resnet-$sh-{rank}.jsonl" --set checkpoint.dir="$WORK/resnet-$sh" >/dev/null
done
for sh in gradients parameters; do
  for r in 0 1; do $CHECK same-losses "$WORK/resnet-none-$r.jsonl" "$WORK/resnet-$sh-$r.jsonl" >/dev/null ||
    { echo "FAIL: resnet $sh rank $r: losses differ from the unsharded run"; exit 1; }; done
  $CHECK tensors-close "$(final_model "$WORK/resnet-none")" "$(final_model "$WORK/resnet-$sh")" 0 >/dev/null ||
    { echo "FAIL: resnet $sh: final model tensors differ"; exit 1; }
  $CHECK same-evaluations "$WORK/resnet-none-0.jsonl" "$WORK/resnet-$sh-0.jsonl" >/dev/null ||
    { echo "FAIL: resnet $sh: evaluations differ"; exit 1; }
  "$SUBDP" plan "$WORK/resnet.toml" --world 2 "${res[@]}" --set parallel.shard=$sh --json >"$WORK/resnet-$sh.plan"
  $CHECK planned-peaks "$WORK/resnet-$sh.plan" 0 "$WORK/resnet-$sh-0.jsonl" 0 ||
    { echo "FAIL: resnet $sh: the planner's bytes differ from the measured ones"; exit 1; }
  echo "ok: resnet $sh bit for bit, planner = measured"
done
# Invariant 5 and resume, 4 ranks, backward block masking (holder groups of 2 and owner broadcasts).
for sh in optimizer gradients parameters; do
  regime=backward; [[ $sh == parameters ]] && regime=forward  # FSDP refuses backward masking
  args=(--set parallel.subnetworks=2 --set mask.regime=$regime --set mask.keep=0.5 --set parallel.shard=$sh)
  mkdir -p "$WORK/dump-$sh"
  SUBDP_DUMP_LOCAL="$WORK/dump-$sh" run_ranks 4 train "$WORK/gpt.toml" "${args[@]}" >/dev/null
  $CHECK holders-identical "$WORK/dump-$sh"
  run_ranks 4 train "$WORK/gpt.toml" "${args[@]}" --set checkpoint.dir="$WORK/full-$sh" --set checkpoint.every=2 \
    --set log.metrics_file="$WORK/full-$sh-{rank}.jsonl" >/dev/null
  run_ranks 4 train "$WORK/gpt.toml" "${args[@]}" --set checkpoint.resume="$WORK/full-$sh/step-00000002" \
    --set checkpoint.dir="$WORK/resumed-$sh" --set log.metrics_file="$WORK/resumed-$sh-{rank}.jsonl" >/dev/null
  for r in 0 1 2 3; do $CHECK same-tail "$WORK/full-$sh-$r.jsonl" "$WORK/resumed-$sh-$r.jsonl"; done
done
