#!/usr/bin/env bash
# The planner's predicted peak bytes per category agree with the measured peaks of a real
# 4-rank run within 5 % (every category, every rank), for DP and each regime on the ResNet
# (block and neuron level, forward and backward masking), and --simulate-rank w/W measures
# the same peaks as the real multi-rank run.
source "$(dirname "$0")/common.sh"
compare() {  # compare PLAN_ROW_LABEL METRICS
  /usr/bin/python3 - "$1" "$2" "$WORK/plan.txt" <<'PY'
import json, sys
label, metrics, plan = sys.argv[1:]
cats = ["params", "grads", "optimizer", "activations", "workspace", "comm"]
row = next(l for l in open(plan) if l.strip().startswith(label))
# The row ends with six categories, the total and, for subnetworks, "(0.67x DP)".
nums = [int(t) for t in row.replace("(", " ").replace(")", " ").split() if t.isdigit()]
pred = nums[-7:-1]
last = [json.loads(l) for l in open(metrics)][-1]["mem_peak"]
for c, p in zip(cats, pred):
    m = last[c]
    if abs(m - p) > 0.05 * max(m, p) and abs(m - p) > 4096:
        sys.exit(f"FAIL {label} {c}: predicted {p}, measured {m}")
print(f"ok: {label}: predicted {pred} == measured within 5 %")
PY
}
cfg="$WORK/resnet.toml"
for setting in "none block" "forward block" "forward neuron" "backward block" "backward neuron"; do
  set -- $setting
  regime=$1 gran=$2
  args=(--set mask.regime=$regime --set mask.granularity=$gran)
  [[ $regime != none ]] && args+=(--set parallel.subnetworks=4 --set mask.keep=0.5)
  "$SUBDP" plan "$cfg" --world 4 "${args[@]}" >"$WORK/plan.txt"
  run_ranks 4 train "$cfg" "${args[@]}" --set log.metrics_file="$WORK/m-{rank}.jsonl" >/dev/null
  for r in 0 1 2 3; do
    if [[ $regime == none ]]; then compare "plain DP" "$WORK/m-$r.jsonl"; else compare "subnetwork $r " "$WORK/m-$r.jsonl"; fi
  done
done
# --simulate-rank: rank 3 of the forward block layout alone, same peaks as the real rank 3.
"$SUBDP" plan "$cfg" --world 4 --set parallel.subnetworks=4 --set mask.regime=forward --set mask.keep=0.5 >"$WORK/plan.txt"
OMP_NUM_THREADS=1 "$SUBDP" train "$cfg" --simulate-rank 3/4 --set train.threads=1 --set parallel.subnetworks=4 \
  --set mask.regime=forward --set mask.keep=0.5 --set log.metrics_file="$WORK/sim-{rank}.jsonl" >/dev/null
compare "subnetwork 3 " "$WORK/sim-3.jsonl"
