#!/usr/bin/env bash
# Stochastic depth (mask.regime = "stochastic"): at keep 1 it is DP bit for bit (ResNet, GPT
# and LLaMA, 2 ranks); at keep 0.5 every rank holds DP's bytes, the losses differ from DP's, the
# evaluation uses the whole model, and the MLP (no blocks) and S > 1 are refused.
source "$(dirname "$0")/common.sh"
for model in resnet gpt llama; do
  cfg="$WORK/$model.toml"
  run_ranks 2 train "$cfg" --set log.metrics_file="$WORK/$model-dp-{rank}.jsonl" >/dev/null
  run_ranks 2 train "$cfg" --set mask.regime=stochastic --set mask.keep=1 \
    --set log.metrics_file="$WORK/$model-k1-{rank}.jsonl" >/dev/null
  run_ranks 2 train "$cfg" --set mask.regime=stochastic --set mask.keep=0.5 \
    --set log.metrics_file="$WORK/$model-k05-{rank}.jsonl" >"$WORK/$model-k05.log"
  for r in 0 1; do
    $CHECK same-losses "$WORK/$model-dp-$r.jsonl" "$WORK/$model-k1-$r.jsonl"
    $CHECK same-peaks "$WORK/$model-dp-$r.jsonl" "$WORK/$model-k05-$r.jsonl"
    if $CHECK same-losses "$WORK/$model-dp-$r.jsonl" "$WORK/$model-k05-$r.jsonl" >/dev/null; then
      echo "FAIL: $model keep 0.5 trained exactly as DP (nothing dropped?)"; exit 1
    fi
  done
  $CHECK positive-event "$WORK/$model-k05-0.jsonl" final test_loss >/dev/null || { echo "FAIL: no evaluation"; exit 1; }
  echo "ok: $model: keep 1 is DP bit for bit, keep 0.5 holds DP's bytes and trains differently"
done
out=$(run_ranks 1 train "$WORK/mlp.toml" --set mask.regime=stochastic --set mask.keep=0.5 2>&1) && {
  echo "FAIL: stochastic depth accepted on the MLP"; exit 1; }
grep -q "no residual blocks to drop" <<<"$out" || { echo "FAIL: $out" | tail -2; exit 1; }
out=$("$SUBDP" train "$WORK/resnet.toml" --set mask.regime=stochastic --set parallel.subnetworks=2 2>&1) && {
  echo "FAIL: stochastic depth accepted with S = 2"; exit 1; }
grep -q "needs \[parallel\] subnetworks = 1" <<<"$out" || { echo "FAIL: $out"; exit 1; }
echo "ok: MLP and S = 2 refused"
