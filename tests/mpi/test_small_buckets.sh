#!/usr/bin/env bash
# parallel.bucket_mb bounds every message: with 0.004 MiB (1,048 floats) each all-reduce
# bucket and each owner broadcast of backward masking goes out in several messages. On 2
# ranks a sum of two terms has one value in any order, so training must be bit-identical to
# the default single-message buckets (losses and final weights), every rank must still hold
# every value under backward masking, and the communication buffer must shrink to one
# message. MLP and GPT (neuron level) and ResNet (block level), forward and backward masking,
# S = 2, keep 0.5. The neuron-level weights hold a unit inside each row (the MLP's fc2, the
# GPT's MLP down-projection, 1 float a row; its attention projection, 8): their buckets cut
# those strided runs between and inside rows. Then W = 4, S = 2 under backward masking:
# replicas make every group communicator two ranks wide and the owner one of two holders;
# the world sums have four terms, whose order MPI may choose by message size, so the
# weights are compared within 1e-5 there.
source "$(dirname "$0")/common.sh"
small=0.004
for model in mlp resnet gpt; do
  gran=neuron; [[ $model == resnet ]] && gran=block
  for regime in forward backward; do
    tag=$model-$regime
    args=(--set parallel.subnetworks=2 --set mask.regime=$regime --set mask.granularity=$gran --set mask.keep=0.5)
    run_ranks 2 train "$WORK/$model.toml" "${args[@]}" --set log.metrics_file="$WORK/$tag-big-{rank}.jsonl" \
      --set checkpoint.dir="$WORK/$tag-big-ckpt" >/dev/null
    mkdir -p "$WORK/$tag-dump"
    SUBDP_DUMP_LOCAL="$WORK/$tag-dump" run_ranks 2 train "$WORK/$model.toml" "${args[@]}" \
      --set parallel.bucket_mb=$small --set log.metrics_file="$WORK/$tag-small-{rank}.jsonl" \
      --set checkpoint.dir="$WORK/$tag-small-ckpt" >/dev/null
    for r in 0 1; do $CHECK same-losses "$WORK/$tag-big-$r.jsonl" "$WORK/$tag-small-$r.jsonl"; done
    $CHECK tensors-close "$(final_model "$WORK/$tag-big-ckpt")" "$(final_model "$WORK/$tag-small-ckpt")" 0
    [[ $regime == backward ]] && $CHECK all-identical "$WORK/$tag-dump"
    $CHECK comm-buffer "$WORK/$tag-small-0.jsonl" "$WORK/$tag-big-0.jsonl" $((1048 * 4))  # 0.004 MiB: 1,048 floats
  done
done
for model in mlp resnet; do
  gran=neuron; [[ $model == resnet ]] && gran=block
  tag=$model-w4
  args=(--set parallel.subnetworks=2 --set mask.regime=backward --set mask.granularity=$gran --set mask.keep=0.5)
  run_ranks 4 train "$WORK/$model.toml" "${args[@]}" --set checkpoint.dir="$WORK/$tag-big-ckpt" >/dev/null
  mkdir -p "$WORK/$tag-dump"
  SUBDP_DUMP_LOCAL="$WORK/$tag-dump" run_ranks 4 train "$WORK/$model.toml" "${args[@]}" \
    --set parallel.bucket_mb=$small --set checkpoint.dir="$WORK/$tag-small-ckpt" >/dev/null
  $CHECK all-identical "$WORK/$tag-dump"
  $CHECK tensors-close "$(final_model "$WORK/$tag-big-ckpt")" "$(final_model "$WORK/$tag-small-ckpt")" 1e-5
done
