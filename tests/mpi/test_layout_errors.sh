#!/usr/bin/env bash
# Mistakes give clear errors and a non-zero exit within seconds, never a hang.
source "$(dirname "$0")/common.sh"
expect_error() {  # expect_error PATTERN NP ARGS...
  local pattern=$1 np=$2
  shift 2
  local out rc=0
  out=$(timeout 120 mpirun -np "$np" --oversubscribe --mca btl "$BTL" "$@" 2>&1) || rc=$?
  if [[ $rc == 0 ]]; then echo "FAIL: expected an error matching '$pattern', got success"; exit 1; fi
  if [[ $rc == 124 ]]; then echo "FAIL: hang (timeout) instead of '$pattern'"; exit 1; fi
  if ! grep -q -- "$pattern" <<<"$out"; then echo "FAIL: no '$pattern' in:"; echo "$out" | tail -5; exit 1; fi
  echo "ok: $pattern"
}
expect_error "mlp.toml: \[parallel\] subnetworks = 2 does not divide the world size W = 3" 3 "$SUBDP" train "$WORK/mlp.toml" --set parallel.subnetworks=2 \
  --set mask.regime=forward --set mask.granularity=neuron --set mask.keep=0.5
expect_error "must be a whole number" 4 "$SUBDP" train "$WORK/mlp.toml" --set parallel.subnetworks=4 \
  --set mask.regime=forward --set mask.granularity=neuron --set mask.keep=0.3
expect_error "no droppable residual block" 2 "$SUBDP" train "$WORK/mlp.toml" --set parallel.subnetworks=2 \
  --set mask.regime=forward --set mask.granularity=block --set mask.keep=0.5
# MPMD with one rank's seed changed: the error names the key and both values, not hashes.
expect_error "rank 2 was started with a different config: train.seed = 7 on rank 2, 0 on rank 0" 2 "$SUBDP" train \
  "$WORK/mlp.toml" : -np 1 "$SUBDP" train "$WORK/mlp.toml" --set train.seed=7
expect_error "checkpoint\] dir / resume are not supported" 1 "$SUBDP" train "$WORK/mlp.toml" --simulate-rank 1/4 \
  --set parallel.subnetworks=4 --set mask.regime=forward --set mask.granularity=neuron --set mask.keep=0.5 \
  --set checkpoint.dir="$WORK/sim-ckpt"
expect_error "W <= 1048576" 1 "$SUBDP" train "$WORK/mlp.toml" --simulate-rank 1/100000000
# A re-deal under --simulate-rank would receive zeros from the absent ranks (the model wiped).
expect_error "\[mask\] redeal_every = 2 moves units between ranks" 1 "$SUBDP" train "$WORK/gpt.toml" \
  --simulate-rank 1/4 --set parallel.subnetworks=4 --set mask.regime=forward --set mask.granularity=neuron \
  --set mask.keep=0.5 --set mask.redeal_every=2
# device.type = "cuda" on a machine without a GPU: one line saying so, non-zero exit.
if [[ ! -e /dev/nvidiactl ]]; then
  expect_error "\[device\] type = \"cuda\": no CUDA device was found" 1 "$SUBDP" train "$WORK/mlp.toml" \
    --set device.type=cuda
  # Two ranks pick NCCL (auto), whose device check says the same on every rank, in words (it
  # printed its raw "host|none|0|reason" entry), or, in a build without NCCL, that NCCL is
  # missing; never a hang.
  expect_error "no CUDA device was found on rank 0 (host [^|]*: 0 visible GPU(s)[^|]*; use \"cpu\"\|this build has no NCCL" 2 \
    "$SUBDP" train "$WORK/mlp.toml" \
    --set device.type=cuda
  expect_error "MPI here carries host buffers" 2 "$SUBDP" train "$WORK/mlp.toml" --set device.type=cuda \
    --set parallel.backend=mpi
fi
# Commands that run the full model on one process refuse masking instead of ignoring it.
expect_error "parity-dump runs the full model on one process" 1 "$SUBDP" parity-dump "$WORK/gpt.toml" "$WORK/pd" \
  --set parallel.subnetworks=2 --set mask.regime=forward --set mask.keep=0.5
# ... and a tensor-core precision, which its float32 PyTorch twin does not share.
expect_error "parity-dump compares with the PyTorch twin in float32" 1 "$SUBDP" parity-dump "$WORK/gpt.toml" \
  "$WORK/pd" --set device.type=cuda --set device.precision=bf16
# Its --steps and OUT_DIR are named plainly (CLI11 printed a 300-digit bound; a file as OUT_DIR
# gave the raw filesystem error).
expect_error "expected a whole number from 0 to 1048576, got '-1'" 1 "$SUBDP" parity-dump "$WORK/gpt.toml" \
  "$WORK/pd" --steps -1
touch "$WORK/pd-file"
expect_error "parity-dump OUT_DIR \"$WORK/pd-file\": cannot create the folder" 1 "$SUBDP" parity-dump \
  "$WORK/gpt.toml" "$WORK/pd-file"
run_ranks 1 train "$WORK/gpt.toml" --set checkpoint.dir="$WORK/sample-ckpt" >/dev/null
expect_error "sample runs the checkpoint's assembled full model" 1 "$SUBDP" sample "$WORK/sample-ckpt" --tokens 4 \
  --set mask.regime=forward
# ... and any other key it does not read, instead of ignoring it.
expect_error "sample does not read optim.lr, so it would have no effect" 1 "$SUBDP" sample "$WORK/sample-ckpt" \
  --tokens 4 --set " optim.lr = 0.5"
# An empty value after '=' is an empty value, not a cue to take the next argument.
out=$("$SUBDP" sample "$WORK/sample-ckpt" --prompt= --tokens 5 2>&1) || { echo "FAIL: --prompt= --tokens 5: $out"; exit 1; }
echo "ok: --prompt= is an empty prompt"
# --seed outside [0, 2^64 - 1] is refused (CLI11 wrapped -1 and clamped larger values), a file
# is not a checkpoint folder, and under mpirun rank 0 alone prints the sample.
for seed in -1 18446744073709551616 1e3; do
  expect_error "expected a whole number in \[0, 18446744073709551615\], got '$seed'" 1 "$SUBDP" sample \
    "$WORK/sample-ckpt" --tokens 2 --seed "$seed"
done
expect_error "a file, not a checkpoint directory" 1 "$SUBDP" sample "$WORK/gpt.toml"
# A checkpoint.dir whose newest checkpoint cannot be read: sample names an older step-N folder
# as the way on (it spoke of checkpoint.resume = "auto", which sample does not have).
cp -r "$WORK/sample-ckpt" "$WORK/sample-bad"
newest=$(ls -d "$WORK"/sample-bad/step-* | tail -1)
sed -i 's/"step": *\([0-9]*\)/"step": \1.5/' "$newest/manifest.json"
expect_error "its newest checkpoint $newest cannot be read: .*; name an older step-N folder instead" 1 \
  "$SUBDP" sample "$WORK/sample-bad" --tokens 2
out=$(run_ranks 2 sample "$WORK/sample-ckpt" --prompt=ab --tokens 5 --seed 3) || { echo "FAIL: sample -np 2: $out"; exit 1; }
one=$("$SUBDP" sample "$WORK/sample-ckpt" --prompt=ab --tokens 5 --seed 3)
[[ $out == "$one" ]] || { echo "FAIL: mpirun -np 2 sample printed '$out', want one sample: '$one'"; exit 1; }
echo "ok: sample under mpirun prints once"
# A weights-only copy (optimizer.safetensors deleted to save space) still samples the same text.
cp -r "$(ls -d "$WORK"/sample-ckpt/step-* | tail -1)" "$WORK/weights-only"
rm "$WORK/weights-only/optimizer.safetensors"
out=$("$SUBDP" sample "$WORK/weights-only" --prompt=ab --tokens 5 --seed 3 2>&1) && [[ $out == "$one" ]] ||
  { echo "FAIL: sample without optimizer.safetensors: '$out'"; exit 1; }
echo "ok: sample reads the weights alone"
# plan --deal D of a config that never re-deals (its runs use deal 0 alone) is refused, and
# so is --world 0 (it meant the default); sample --top-k -1 is named plainly.
expect_error "--deal 2: this config never re-deals its plan (mask.redeal_every = 0)" 1 "$SUBDP" plan "$WORK/gpt.toml" \
  --world 4 --set parallel.subnetworks=2 --set mask.regime=forward --set mask.keep=0.5 --deal 2
expect_error "expected a whole number from 1 to 1048576, got '0'" 1 "$SUBDP" plan "$WORK/gpt.toml" --world 0
expect_error "expected a whole number from 0 (all bytes) to 2147483647, got '-1'" 1 "$SUBDP" sample \
  "$WORK/sample-ckpt" --top-k -1
# A LLaMA of a long context samples without a (context, context) workspace (it asked for
# 4 TB at context 1,000,000): its weights do not depend on the context, so sample builds it
# for the positions it reaches; the text is the trained context's.
run_ranks 1 train "$WORK/llama.toml" --set checkpoint.dir="$WORK/llama-ckpt" >/dev/null
long=$(ls -d "$WORK"/llama-ckpt/step-* | tail -1)
want=$("$SUBDP" sample "$long" --prompt=ab --tokens 8 --seed 3)
sed -i 's/context = 32\b/context = 1000000/' "$long/manifest.json"
grep -q "context = 1000000" "$long/manifest.json" || { echo "FAIL: the manifest edit did not apply"; exit 1; }
out=$("$SUBDP" sample "$long" --prompt=ab --tokens 8 --seed 3 2>&1) && [[ $out == "$want" ]] ||
  { echo "FAIL: sample of a LLaMA at context 1000000: '$out', want '$want'"; exit 1; }
echo "ok: a long-context LLaMA samples what its trained context does"
# `subdp plan` under mpirun: rank 0 alone prints the plan, for the launcher's world size.
run_ranks 2 plan "$WORK/gpt.toml" --set parallel.subnetworks=2 --set mask.regime=forward --set mask.keep=0.5 --json \
  >"$WORK/plan.json"
$CHECK one-plan "$WORK/plan.json" 2 >/dev/null ||
  { echo "FAIL: plan under mpirun -np 2 should print one plan for W=2:"; cat "$WORK/plan.json"; exit 1; }
echo "ok: plan under mpirun prints one plan for the launcher's world"
# A plan that leaves a subnetwork without a dealt block (GPT of depth 1, S = 2, keep 0.5) is
# refused, naming the empty subnetwork, by train and by plan alike.
expect_error "leaves subnetwork(s) 1 with none" 2 "$SUBDP" train "$WORK/gpt.toml" --set model.depth=1 \
  --set parallel.subnetworks=2 --set mask.regime=forward --set mask.granularity=block --set mask.keep=0.5
expect_error "leaves subnetwork(s) 1 with none" 1 "$SUBDP" plan "$WORK/gpt.toml" --world 2 --set model.depth=1 \
  --set parallel.subnetworks=2 --set mask.regime=forward --set mask.granularity=block --set mask.keep=0.5
# --simulate-rank with plain DP evaluates this rank's share of the test split, as the real rank
# does: the eval and final lines say so, not present it as the whole split.
out=$("$SUBDP" train "$WORK/mlp.toml" --simulate-rank 1/4 --set log.metrics_file="$WORK/m{rank}-{rank}.jsonl" 2>&1) ||
  { echo "FAIL: simulate-rank: $out"; exit 1; }
[[ -s "$WORK/m1-1.jsonl" ]] || { echo "FAIL: every {rank} of the metrics path is the rank: $(ls "$WORK")"; exit 1; }
for part in "(on this rank's 1/4 of the test split only: --simulate-rank)" "test_split_share=rank"; do
  grep -qF "$part" <<<"$out" || { echo "FAIL: no '$part' in: $out"; exit 1; }
done
echo "ok: --simulate-rank names its share of the test split"
# An unknown command is named, with a suggestion (CLI11 alone said "A subcommand is required").
expect_error "unknown command 'trian' (did you mean 'train'?); the commands are train, plan" 1 "$SUBDP" trian \
  "$WORK/mlp.toml"
# backend = "local" under a launcher of 2 ranks (each trained alone, writing the same files).
expect_error "\[parallel\] backend = \"local\" is one process, but the launcher started 2" 2 "$SUBDP" train \
  "$WORK/mlp.toml" --set parallel.backend=local
# So is an option before the command; --version is the version command.
expect_error "unknown option '-x' before a command; the commands are train, plan" 1 "$SUBDP" -x
[[ $("$SUBDP" --version) == "$("$SUBDP" version)" ]] || { echo "FAIL: subdp --version differs from subdp version"; exit 1; }
echo "ok: subdp --version"
# plan under stochastic depth names the config's regime and the drop probability next to DP's plan.
"$SUBDP" plan "$WORK/gpt.toml" --set mask.regime=stochastic --set mask.keep=0.75 --json |
  /usr/bin/python3 -c 'import json, sys; j = json.load(sys.stdin); sys.exit(not (j["mask_regime"] == "stochastic"
and j["drop_probability"] == 0.25 and j["plan"]["regime"] == "none"))' ||
  { echo "FAIL: plan --json under stochastic depth lacks mask_regime / drop_probability"; exit 1; }
echo "ok: plan --json under stochastic depth"
# Output that cannot be written (a full disk) is an error: `plan --json > out.json` left a
# truncated file and exit 0.
if [[ -w /dev/full ]]; then
  rc=0
  out=$("$SUBDP" plan "$WORK/gpt.toml" --json 2>&1 >/dev/full) || rc=$?
  if [[ $rc != 1 || $out != *"writing the standard output failed: No space left on device"* ]]; then
    echo "FAIL: plan --json > /dev/full gave exit $rc: $out"
    exit 1
  fi
  echo "ok: a lost standard output is an error"
fi
# parity-dump of a diverging run: an internal assertion, and a losses.json holding "-nan".
rc=0
out=$("$SUBDP" parity-dump "$WORK/gpt.toml" "$WORK/pd" --steps 4 --set optim.name=sgd --set optim.lr=1e30 2>&1) || rc=$?
if [[ $rc != 1 || $out != *"parity-dump: step 2 diverged (loss -nan"* || -e $WORK/pd/losses.json ]]; then
  echo "FAIL: parity-dump of a diverging run gave exit $rc: $out"
  exit 1
fi
echo "ok: parity-dump of a diverging run"
# Each rank reads data.path itself: a relative path in another working directory stands for a
# node-local copy that is partial (the same config text on both ranks). The ranks counted other
# steps per epoch, then failed in a misleading collective (or, by steps, trained silently).
mkdir -p "$WORK/node0" "$WORK/node1"
cp "$ROOT/tests/parity/gpt_text.txt" "$WORK/node0/text.txt"
head -c 3000 "$ROOT/tests/parity/gpt_text.txt" > "$WORK/node1/text.txt"
sed "s|^path = .*|path = \"text.txt\"|" "$WORK/gpt.toml" > "$WORK/gpt_relative.toml"
expect_error "rank 1 loaded other data than rank 0 from the same \[data\] keys: \"text text.txt: 2700 train" 1 \
  --wdir "$WORK/node0" "$SUBDP" train "$WORK/gpt_relative.toml" : -np 1 --wdir "$WORK/node1" "$SUBDP" train \
  "$WORK/gpt_relative.toml"

# A warm-up as long as the run (or longer) never reaches optim.lr: a warning before step 1 (it
# trained at lr ~ 0 without a word); one shorter than the run gives none.
out=$("$SUBDP" train "$WORK/gpt.toml" --set train.steps=2 --set optim.warmup_steps=1000 2>&1 >/dev/null)
[[ $out == *"optim.warmup_steps = 1000 is not shorter than the run (2 steps): the learning rate rises to 2e-06 at most"* ]] ||
  { echo "FAIL: no warning for a warm-up longer than the run: $out"; exit 1; }
out=$("$SUBDP" train "$WORK/gpt.toml" --set train.steps=2 --set optim.warmup_steps=1 2>&1 >/dev/null)
[[ $out != *"warmup_steps"* ]] || { echo "FAIL: a warning for a warm-up shorter than the run: $out"; exit 1; }
echo "ok: a warm-up as long as the run is warned of"
