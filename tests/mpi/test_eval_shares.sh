#!/usr/bin/env bash
# Sharded evaluation with fewer evaluation batches than ranks: ranks with an empty share
# add nothing, and the full model's and the subnetworks' losses stay finite (a rank's NaN
# loss times its 0 positions once poisoned every rank's sum).
source "$(dirname "$0")/common.sh"
cat > "$WORK/gpt.toml" <<TOML
[model]
name = "gpt"
vocab = 256
context = 16
width = 16
heads = 2
depth = 2
[data]
name = "text"
path = "$ROOT/README.md"
val_fraction = 0.2
[train]
steps = 2
batch_size = 2
eval_every = 2
eval_batches = 2
threads = 1
[optim]
name = "adamw"
lr = 1e-3
TOML
finite() {  # finite LABEL VALUE
  /usr/bin/python3 -c "import math, sys; v = float(sys.argv[2]); sys.exit(0 if math.isfinite(v) and v > 0 else 1)" "$@" ||
    { echo "FAIL: $1 = $2, expected a finite positive loss"; exit 1; }
}
# Plain DP, 4 ranks, 2 evaluation batches: ranks 2 and 3 evaluate nothing.
run_ranks 4 train "$WORK/gpt.toml" > "$WORK/dp.log"
loss=$(grep -oE "^final .*test_loss=[^ ]+" "$WORK/dp.log" | sed 's/.*test_loss=//')
finite "dp test_loss" "$loss"
# Forward neuron masking, S = 2: the assembled model and the subnetworks on their shares.
run_ranks 4 train "$WORK/gpt.toml" --set parallel.subnetworks=2 --set mask.regime=forward \
  --set mask.granularity=neuron --set mask.keep=0.5 > "$WORK/sdp.log"
full=$(grep -oE "full model test_loss [^ ]+" "$WORK/sdp.log" | tail -1 | awk '{print $4}')
own=$(grep -oE "subnetworks \(own share\) loss [^ ]+" "$WORK/sdp.log" | tail -1 | awk '{print $NF}')
finite "fwd-neuron full-model test_loss" "$full"
finite "fwd-neuron subnetworks' loss" "$own"
echo "ok: dp $loss, fwd-neuron full $full, subnetworks $own"
