#!/usr/bin/env bash
# Gradient alignment (log.alignment_every): under backward masking a subnetwork's gradient on
# its kept slices is the full model's, so every cosine is 1; under forward masking it is
# below 1. The probe does not change training: losses and the final checkpoint (weights,
# moments, BatchNorm running statistics, restored after the probe's forward) are bit-identical.
source "$(dirname "$0")/common.sh"
masked() { echo --set parallel.subnetworks=2 --set mask.regime=$1 --set mask.granularity=$2 --set mask.keep=0.5; }
for model in gpt resnet; do
  for setting in "backward block" "backward neuron" "forward block" "forward neuron"; do
    set -- $setting
    tag=$model-$1-$2
    run_ranks 2 train "$WORK/$model.toml" $(masked $1 $2) --set log.alignment_every=2 \
      --set log.metrics_file="$WORK/$tag-a-{rank}.jsonl" --set checkpoint.dir="$WORK/$tag-a" >/dev/null
    run_ranks 2 train "$WORK/$model.toml" $(masked $1 $2) --set log.metrics_file="$WORK/$tag-{rank}.jsonl" \
      --set checkpoint.dir="$WORK/$tag" >/dev/null
    # Every weight, moment and BatchNorm running statistic ends the same.
    for f in model optimizer; do
      $CHECK tensors-close "$(ls -d "$WORK/$tag"/step-* | tail -1)/$f.safetensors" \
        "$(ls -d "$WORK/$tag-a"/step-* | tail -1)/$f.safetensors" 0 >/dev/null ||
        { echo "FAIL: $tag: the alignment probe changed the final $f tensors"; exit 1; }
    done
    for r in 0 1; do
      $CHECK same-losses "$WORK/$tag-$r.jsonl" "$WORK/$tag-a-$r.jsonl" >/dev/null ||
        { echo "FAIL: $tag rank $r: the alignment probe changed training"; exit 1; }
      /usr/bin/python3 - "$WORK/$tag-a-$r.jsonl" "$1" "$tag rank $r" <<'PY'
import json, sys
path, regime, what = sys.argv[1:]
probes = [json.loads(l)["alignment"] for l in open(path) if "alignment" in json.loads(l)]
if len(probes) != 2:
    sys.exit(f"FAIL {what}: {len(probes)} alignment probes in 4 steps, expected 2 (steps 2 and 4)")
units = {k: v for p in probes for k, v in p.items() if k != "dense"}
if not units:
    sys.exit(f"FAIL {what}: no unit kind measured: {probes}")
for p in probes:
    for kind, c in p.items():
        if regime == "backward" and abs(c - 1) > 1e-6:
            sys.exit(f"FAIL {what}: backward masking's {kind} alignment {c} != 1")
        if regime == "forward" and kind != "dense" and not c < 0.999:
            sys.exit(f"FAIL {what}: forward masking's {kind} alignment {c} is not below 1")
print(f"ok: {what}: " + ", ".join(f"{k} {v:.4f}" for k, v in probes[-1].items()) + "; training unchanged")
PY
    done
  done
done
