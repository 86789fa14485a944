#!/usr/bin/env bash
# Mask re-dealing (mask.redeal_every = K, issue 25): every K steps the plan is redrawn from
# deal d's seed (subdp plan --deal d) and every slice with its optimizer state moves to its
# new holders.
# - A run that re-deals after step 3 equals, bit for bit (losses on every rank, final model and
#   optimizer tensors), a run checkpointed at step 3 and resumed under deal 1's seed:
#   the move loses nothing. GPT forward block (4 ranks), GPT forward neuron + ZeRO-1 (4 ranks),
#   MLP backward neuron (4 ranks), ResNet forward block with its BatchNorm buffers (2 ranks),
#   LLaMA forward neuron (4 ranks).
#   The ZeRO-1 case moves its tensors in windows of 1 KiB (parallel.bucket_mb = 0.001).
# - Each re-deal's checksums of every value and moment agree on every rank, its device peak
#   stays within the largest rank's training peak plus one parallel.bucket_mb message, and it
#   moved bytes.
# - Re-dealing to the same plan (a seed whose deal 1 draws its deal 0 plan) moves nothing and
#   changes nothing.
# - Resume inside a re-dealing run (under deal 0 before a re-deal, under deal 1 after it)
#   continues bit for bit.
source "$(dirname "$0")/common.sh"
masked() { echo --set parallel.subnetworks=2 --set mask.regime=$1 --set mask.granularity=$2 --set mask.keep=0.5; }
for model in mlp resnet gpt llama; do sed -i 's/^steps = .*/steps = 6/' "$WORK/$model.toml"; done

check_redeal_metrics() {  # $1 tag, $2... every rank's metrics: checksums, memory and bytes of each re-deal
  $CHECK redeals "$@"
}
# same_final_tensors A B WHAT: the step-6 model and optimizer tensors of checkpoint dirs A and B
# are bit-identical, else FAIL naming WHAT.
same_final_tensors() {
  for f in model optimizer; do
    $CHECK tensors-close "$1/step-00000006/$f.safetensors" "$2/step-00000006/$f.safetensors" 0 >/dev/null ||
      { echo "FAIL: $3: the final $f tensors differ"; exit 1; }
  done
}
# seed_of_deal D ARGS...: the plan seed that re-deal D draws (subdp plan --deal).
seed_of_deal() {
  local d=$1
  shift
  "$SUBDP" plan "$@" --set mask.redeal_every=3 --deal "$d" --json >"$WORK/deal.json" && $CHECK plan-field "$WORK/deal.json" deal.plan_seed
}

cases=(
  "gpt|4|$(masked forward block)"
  "gpt|4|$(masked forward neuron) --set parallel.shard=optimizer --set parallel.bucket_mb=0.001"
  "mlp|4|$(masked backward neuron)"
  "resnet|2|$(masked forward block)"
  "llama|4|$(masked forward neuron)"
)
for c in "${cases[@]}"; do
  IFS='|' read -r model np rest <<<"$c"
  read -r -a args <<<"$rest"
  tag=$model-$np-${args[3]#*=}-${args[5]#*=}
  run_ranks $np train "$WORK/$model.toml" "${args[@]}" --set mask.redeal_every=3 --set checkpoint.dir="$WORK/$tag-a" \
    --set checkpoint.every=2 --set log.metrics_file="$WORK/$tag-a-{rank}.jsonl" >/dev/null
  run_ranks $np train "$WORK/$model.toml" "${args[@]}" --set checkpoint.dir="$WORK/$tag-b" --set checkpoint.every=3 \
    --set log.metrics_file="$WORK/$tag-b-{rank}.jsonl" >/dev/null
  seed1=$(seed_of_deal 1 "$WORK/$model.toml" --world $np "${args[@]}")
  [[ -n $seed1 ]] || { echo "FAIL: subdp plan --deal 1 printed no plan seed"; exit 1; }
  run_ranks $np train "$WORK/$model.toml" "${args[@]}" --set mask.seed=$seed1 --set checkpoint.resume="$WORK/$tag-b/step-00000003" \
    --set checkpoint.dir="$WORK/$tag-c" --set log.metrics_file="$WORK/$tag-c-{rank}.jsonl" >/dev/null
  for ((r = 0; r < np; ++r)); do
    $CHECK same-tail "$WORK/$tag-a-$r.jsonl" "$WORK/$tag-c-$r.jsonl" >/dev/null ||
      { echo "FAIL: $tag rank $r: the re-dealt run's losses differ from the resume under deal 1's seed"; exit 1; }
  done
  same_final_tensors "$WORK/$tag-a" "$WORK/$tag-c" "$tag, re-dealt against resumed under deal 1's seed"
  check_redeal_metrics "$tag" "$WORK/$tag-a-"*.jsonl
  echo "ok: $tag: re-dealing after step 3 = checkpoint + resume under deal 1's plan (seed $seed1), bit for bit"
  # Resume inside the re-dealing run: before the re-deal (step 2) and after it (step 4).
  for at in 2 4; do
    run_ranks $np train "$WORK/$model.toml" "${args[@]}" --set mask.redeal_every=3 \
      --set checkpoint.resume="$WORK/$tag-a/step-0000000$at" --set checkpoint.dir="$WORK/$tag-r$at" \
      --set log.metrics_file="$WORK/$tag-r$at-{rank}.jsonl" >/dev/null
    for ((r = 0; r < np; ++r)); do
      $CHECK same-tail "$WORK/$tag-a-$r.jsonl" "$WORK/$tag-r$at-$r.jsonl" >/dev/null ||
        { echo "FAIL: $tag rank $r: resume at step $at of a re-dealing run differs"; exit 1; }
    done
  done
  echo "ok: $tag: resumes at steps 2 and 4 of the re-dealing run continue bit for bit"
done

# Same plan: the first seed s whose deal 1 draws its deal 0's plan (block level, S = 2, 4 blocks).
plan_of() {  # plan_of SEED DEAL: which blocks each subnetwork keeps
  "$SUBDP" plan "$WORK/gpt.toml" --world 4 $(masked forward block) --set mask.seed=$1 --set mask.redeal_every=1 \
    --deal $2 --json >"$WORK/of.json"
  $CHECK plan-field "$WORK/of.json" plan.subnetworks
}
seed=-1
for s in $(seq 0 200); do
  if [[ "$(plan_of $s 0)" == "$(plan_of $s 1)" ]]; then seed=$s; break; fi
done
[[ $seed -ge 0 ]] || { echo "FAIL: no seed in 0..200 draws the same plan at deals 0 and 1"; exit 1; }
for every in 0 3; do
  run_ranks 4 train "$WORK/gpt.toml" $(masked forward block) --set mask.seed=$seed --set mask.redeal_every=$every \
    --set checkpoint.dir="$WORK/same-$every" --set log.metrics_file="$WORK/same-$every-{rank}.jsonl" >/dev/null
done
grep -q '"bytes_moved":0,.*"unchanged":true' "$WORK/same-3-0.jsonl" ||
  { echo "FAIL: the re-deal of seed $seed is not reported unchanged, with nothing moved"; exit 1; }
for r in 0 1 2 3; do
  $CHECK same-losses "$WORK/same-0-$r.jsonl" "$WORK/same-3-$r.jsonl" >/dev/null ||
    { echo "FAIL: re-dealing to the same plan changed rank $r's losses"; exit 1; }
done
same_final_tensors "$WORK/same-0" "$WORK/same-3" "re-dealing to the same plan"
echo "ok: re-dealing to the same plan (seed $seed, deals 0 and 1) moves nothing and changes nothing, bit for bit"

# Errors: re-dealing needs a masked regime with S > 1.
if out=$("$SUBDP" train "$WORK/gpt.toml" --set mask.redeal_every=5 2>&1); then
  echo "FAIL: redeal_every without masking was accepted"; exit 1
fi
grep -q 'redeal_every = 5' <<<"$out" || { echo "FAIL: unclear error: $out"; exit 1; }
echo "ok: mask.redeal_every without a masked regime is refused: ${out##*: }" | head -c 200; echo
