#!/usr/bin/env bash
# parallel.overlap = true (engine/parallel/overlap.h): the holder all-reduces start during the
# backward pass, block by block, on a communication thread. Against the blocking run of the
# same config (parallel.bucket_mb small enough that the blocks' gradients have messages of
# their own), on every rank: the losses bit for bit, the final model and optimizer tensors bit
# for bit, the same bytes all-reduced and broadcast each step. GPT DP and forward block /
# neuron masking on 4 ranks, the ResNet under backward neuron masking (owner broadcasts,
# BatchNorm running statistics in the buckets) on 4 ranks, the LLaMA DP on 2 ranks, the MLP
# (no blocks: every message waits for the end of the pass, with a warning). A non-finite
# gradient still stops every rank naming the tensor; sharded layouts and the fenced device are
# refused (the CUDA device's overlap: tests/emu/test_overlap.sh). Every step records its phases'
# seconds (phases_s, previous_phases_s).
source "$(dirname "$0")/common.sh"
masked() { echo --set parallel.subnetworks=$1 --set mask.regime=$2 --set mask.granularity=$3 --set mask.keep=0.5; }
cases=(
  "gpt|4|--set parallel.bucket_mb=0.005"
  "gpt|4|--set parallel.bucket_mb=0.005 $(masked 4 forward block)"
  "gpt|4|--set parallel.bucket_mb=0.002 $(masked 2 forward neuron)"
  "resnet|4|--set parallel.bucket_mb=0.005 $(masked 2 backward neuron)"
  "llama|2|--set parallel.bucket_mb=0.01"
  "mlp|2|--set parallel.bucket_mb=0.01"
)
for c in "${cases[@]}"; do
  IFS='|' read -r model np rest <<<"$c"
  read -r -a args <<<"$rest"
  tag=$model-$np-$(echo "${args[*]}" | tr -cd 'a-z0-9')
  # false: blocking; true: overlapped, real timing; lockstep: overlapped, each block hook waiting
  # for what it started (SUBDP_OVERLAP_LOCKSTEP, a chunk sent too early reads unfinished gradients).
  for ov in false true lockstep; do
    SUBDP_OVERLAP_LOCKSTEP=$([[ $ov == lockstep ]] && echo 1 || echo 0) run_ranks "$np" train "$WORK/$model.toml" \
      "${args[@]}" --set parallel.overlap=$([[ $ov == false ]] && echo false || echo true) \
      --set log.metrics_file="$WORK/$tag-$ov-{rank}.jsonl" --set checkpoint.dir="$WORK/$tag-$ov" >"$WORK/$tag-$ov.log" 2>&1
  done
  for ov in true lockstep; do
    same_runs "$np" "$tag-false" "$tag-$ov" || { echo "FAIL: $model ${args[*]}: overlapped ($ov) != blocking"; exit 1; }
  done
  # Each phase's seconds (the host clock on the CPU), blocking and overlapped.
  for ov in false true; do $CHECK phases "$WORK/$tag-$ov-$((np - 1)).jsonl" >/dev/null || exit 1; done
  if [[ $model == mlp ]]; then
    grep -q "has no residual blocks: no all-reduce message can start before the backward pass ends" "$WORK/$tag-true.log" ||
      { echo "FAIL: no warning for the MLP"; exit 1; }
  else
    line=$(grep -m1 "^overlap: " "$WORK/$tag-true.log") || { echo "FAIL: $model: no overlap line"; exit 1; }
    [[ $line =~ ^overlap:\ ([1-9][0-9]*)\ of ]] || { echo "FAIL: $model: nothing overlapped: $line"; exit 1; }
  fi
  echo "ok: $model on $np ranks ${args[*]}: overlapped = blocking, bit for bit (${line:-MLP warned})"
  line=""
done
# A learning rate of 1e6 overflows the GPT within a few steps: every rank stops, naming the tensor.
rc=0
run_ranks 2 train "$WORK/gpt.toml" --set parallel.overlap=true --set parallel.bucket_mb=0.005 --set optim.lr=1e6 \
  --set train.steps=30 >"$WORK/nonfinite.log" 2>&1 || rc=$?
[[ $rc != 0 ]] || { echo "FAIL: the diverging overlapped run exited 0"; exit 1; }
grep -Eq "non-finite (gradient in [a-z0-9._]+|loss or gradient) at step [0-9]+" "$WORK/nonfinite.log" ||
  { echo "FAIL: no message:"; tail -3 "$WORK/nonfinite.log"; exit 1; }
echo "ok: $(grep -m1 -oE "non-finite [^(]*at step [0-9]+" "$WORK/nonfinite.log")"
for bad in "parallel.shard=gradients" "device.type=fenced"; do
  out=$("$SUBDP" train "$WORK/gpt.toml" --set parallel.overlap=true --set "$bad" 2>&1) &&
    { echo "FAIL: overlap with $bad accepted"; exit 1; }
  grep -q "overlap = true with" <<<"$out" || { echo "FAIL: $out"; exit 1; }
done
echo "ok: overlap refused with ZeRO-2 and on the fenced device"
