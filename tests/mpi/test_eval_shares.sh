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
# Plain DP, 4 ranks, 2 evaluation batches: ranks 2 and 3 evaluate nothing; every rank's
# metrics file holds the same evaluation.
run_ranks 4 train "$WORK/gpt.toml" --set log.metrics_file="$WORK/dp-{rank}.jsonl" >/dev/null
for r in 0 3; do $CHECK positive-event "$WORK/dp-$r.jsonl" final test_loss; done
# Forward neuron masking, S = 2: the assembled model and the subnetworks on their shares.
run_ranks 4 train "$WORK/gpt.toml" --set parallel.subnetworks=2 --set mask.regime=forward \
  --set mask.granularity=neuron --set mask.keep=0.5 --set log.metrics_file="$WORK/sdp-{rank}.jsonl" >/dev/null
for r in 0 3; do $CHECK positive-event "$WORK/sdp-$r.jsonl" eval test_loss subnetwork_loss; done
