#!/usr/bin/env bash
# The fenced test device (device.type = "fenced": the CPU kernels on memory that host code
# cannot touch) against the CPU backend: every model (MLP, ResNet, GPT, LLaMA) under every
# regime (DP; forward and backward masking at block and neuron level, keep 0.5) on 1, 2 and 4
# ranks (the LLaMA on 1 and 2) gives the same losses bit for bit on every rank, the same
# assembled weights and optimizer state in its final checkpoint (gathered through the device),
# and the same evaluation. A host access of device memory anywhere on the way faults the run,
# and the test with it. Then `subdp sample` runs on the fenced device from the fenced GPT
# and LLaMA checkpoints and matches the CPU's text.
source "$(dirname "$0")/common.sh"

# same_run NP MODEL TAG ARGS...: the run on both backends, compared.
same_run() {
  local np=$1 model=$2 tag=$3
  shift 3
  for dev in cpu fenced; do
    run_ranks "$np" train "$WORK/$model.toml" --set device.type=$dev "$@" \
      --set log.metrics_file="$WORK/$tag-$dev-{rank}.jsonl" --set checkpoint.dir="$WORK/$tag-$dev-ckpt" >/dev/null
  done
  for ((r = 0; r < np; r++)); do $CHECK same-losses "$WORK/$tag-cpu-$r.jsonl" "$WORK/$tag-fenced-$r.jsonl"; done
  local dir_cpu dir_fenced
  dir_cpu=$(dirname "$(final_model "$WORK/$tag-cpu-ckpt")")
  dir_fenced=$(dirname "$(final_model "$WORK/$tag-fenced-ckpt")")
  $CHECK tensors-close "$dir_cpu/model.safetensors" "$dir_fenced/model.safetensors" 0
  $CHECK tensors-close "$dir_cpu/optimizer.safetensors" "$dir_fenced/optimizer.safetensors" 0
  $CHECK same-evaluations "$WORK/$tag-cpu-0.jsonl" "$WORK/$tag-fenced-0.jsonl" >/dev/null ||
    { echo "FAIL: $tag: evaluation differs: $($CHECK same-evaluations "$WORK/$tag-cpu-0.jsonl" "$WORK/$tag-fenced-0.jsonl")"; exit 1; }
  echo "ok: $tag"
}

for model in mlp resnet gpt llama; do
  same_run 1 "$model" "$model-np1-dp"
  for np in 2 4; do
    [[ $model == llama && $np == 4 ]] && continue  # the GPT's 4-rank runs cover the layouts
    same_run "$np" "$model" "$model-np$np-dp"
    for regime in forward backward; do
      for gran in block neuron; do
        [[ $model == mlp && $gran == block ]] && continue  # the MLP has no blocks
        same_run "$np" "$model" "$model-np$np-$regime-$gran" --set parallel.subnetworks="$np" \
          --set mask.regime=$regime --set mask.granularity=$gran --set mask.keep=0.5
      done
    done
  done
done

# Sampling reads the checkpoint into a model on the device and generates on it.
for model in gpt llama; do
  ckpt=$(dirname "$(final_model "$WORK/$model-np2-forward-block-fenced-ckpt")")
  for dev in cpu fenced; do
    "$SUBDP" sample "$ckpt" --prompt "The " --tokens 24 --temperature 0 --set device.type=$dev \
      > "$WORK/sample-$model-$dev.txt"
  done
  cmp "$WORK/sample-$model-cpu.txt" "$WORK/sample-$model-fenced.txt" || { echo "FAIL: $model sample differs"; exit 1; }
  [[ -s $WORK/sample-$model-cpu.txt ]] || { echo "FAIL: empty $model sample"; exit 1; }
  echo "ok: $model sample on the fenced device: $(head -c 60 "$WORK/sample-$model-fenced.txt" | tr '\n' ' ')"
done
