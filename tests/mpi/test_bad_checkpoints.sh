#!/usr/bin/env bash
# Checkpoints that must be refused or skipped: resume "auto" skips a damaged newest
# checkpoint with a warning and takes the previous one; a checkpoint of another model or of
# other sizes is refused with an error naming the tensor; a missing path is an error.
# Issue 22: an edited checkpoint (CRC fixed) with a transposed, extra or missing tensor,
# missing optimizer moments or a NaN weight is refused naming the file, tensor and shapes;
# checkpoint.reset_optimizer = true is the opt-in, said on every rank; a resume at the last
# step prints a complete final line.
source "$(dirname "$0")/common.sh"
cat >> "$WORK/mlp.toml" <<TOML
[checkpoint]
dir = "$WORK/ckpt"
every = 4
keep_last = 3
TOML
"$SUBDP" train "$WORK/mlp.toml" --set parallel.backend=local >/dev/null
# Damage the newest checkpoint's weights: resume auto warns and falls back to step 4.
printf 'garbage' | dd of="$WORK/ckpt/step-00000008/model.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
out=$("$SUBDP" train "$WORK/mlp.toml" --set parallel.backend=local --set checkpoint.resume=auto \
  --set train.steps=4 --set checkpoint.dir="$WORK/ckpt" 2>&1)
grep -q "warning: skipping damaged checkpoint" <<<"$out" || { echo "FAIL: no warning"; echo "$out"; exit 1; }
grep -q "resuming from $WORK/ckpt/step-00000004" <<<"$out" || { echo "FAIL: did not fall back"; echo "$out"; exit 1; }
echo "ok: damaged newest checkpoint skipped, resumed from step 4"
expect_fail() {  # expect_fail PATTERN ARGS...
  local pattern=$1 out rc=0
  shift
  out=$("$SUBDP" "$@" 2>&1) || rc=$?
  [[ $rc != 0 ]] || { echo "FAIL: accepted: $*"; exit 1; }
  grep -q -- "$pattern" <<<"$out" || { echo "FAIL: no '$pattern' in: $out"; exit 1; }
  echo "ok: $pattern"
}
expect_fail "checkpoint of model \"mlp\"" train "$WORK/resnet.toml" --set parallel.backend=local \
  --set checkpoint.resume="$WORK/ckpt/step-00000004"
expect_fail "step-00000004/model.safetensors: tensor net.1.weight has shape (96, 784), the model expects (32, 784)" train "$WORK/mlp.toml" --set parallel.backend=local --set model.hidden=[32,64] \
  --set checkpoint.resume="$WORK/ckpt/step-00000004" --set checkpoint.dir="$WORK/other"
# Equal shapes, another model (a GPT's heads): refused, naming the key and both values.
"$SUBDP" train "$WORK/gpt.toml" --set parallel.backend=local --set checkpoint.dir="$WORK/gck" >/dev/null
expect_fail "the checkpoint's model has model.heads = 4, this run's 2" train "$WORK/gpt.toml" \
  --set parallel.backend=local --set model.heads=2 --set checkpoint.resume="$WORK/gck/step-00000004" \
  --set checkpoint.dir="$WORK/other-gpt"
# Equivalent descriptions of one LLaMA resume: ffn_width 0 (8 width / 3 rounded up to a
# multiple of 64: 128 at width 32) and 128, kv_heads 0 and heads, zero_init_residual and
# context (neither changes the weights' function); they were refused as another model.
"$SUBDP" train "$WORK/llama.toml" --set parallel.backend=local --set model.ffn_width=0 \
  --set checkpoint.dir="$WORK/lck" >/dev/null
out=$("$SUBDP" train "$WORK/llama.toml" --set parallel.backend=local --set model.ffn_width=128 \
  --set model.kv_heads=4 --set model.zero_init_residual=true --set model.context=16 \
  --set checkpoint.resume="$WORK/lck/step-00000004" --set train.steps=5 --set checkpoint.dir="$WORK/other-llama" 2>&1) ||
  { echo "FAIL: an equivalent LLaMA description refused: $out"; exit 1; }
echo "ok: ffn_width 0 = 128, kv_heads 0 = heads, zero_init_residual and context resume"
expect_fail "the checkpoint's model has model.rope_theta = 10000.0, this run's 500.0" train "$WORK/llama.toml" \
  --set parallel.backend=local --set model.ffn_width=0 --set model.rope_theta=500 \
  --set checkpoint.resume="$WORK/lck/step-00000004" --set train.steps=5 --set checkpoint.dir="$WORK/other-llama2"
expect_fail "not a subdp checkpoint" train "$WORK/mlp.toml" --set parallel.backend=local \
  --set checkpoint.resume="$WORK/nowhere"
# The checkpoint.dir itself instead of one of its step-N folders (it said manifest.json: missing).
expect_fail "$WORK/ckpt: not a checkpoint but a folder of [0-9]* checkpoint(s) (step-00000" train "$WORK/mlp.toml" \
  --set parallel.backend=local --set checkpoint.resume="$WORK/ckpt"
expect_fail "CRC32" train "$WORK/mlp.toml" --set parallel.backend=local \
  --set checkpoint.resume="$WORK/ckpt/step-00000008"
expect_fail "past the run's last step 2" train "$WORK/mlp.toml" --set parallel.backend=local \
  --set checkpoint.resume="$WORK/ckpt/step-00000004" --set train.steps=2 --set checkpoint.dir="$WORK/other"

edited() {  # edited NAME EDIT...: a copy of the step-4 checkpoint with EDIT applied (CRC fixed)
  local name=$1
  shift
  rm -rf "$WORK/$name"
  cp -r "$WORK/ckpt/step-00000004" "$WORK/$name"
  /usr/bin/python3 "$ROOT/tests/mpi/edit_checkpoint.py" "$WORK/$name" "$@"
  echo "$WORK/$name"
}
resume_from() { echo train "$WORK/mlp.toml" --set parallel.backend=local --set checkpoint.dir="$WORK/other" \
  --set checkpoint.resume="$1"; }
expect_fail "$WORK/t/model.safetensors: tensor net.1.weight has shape (784, 96), the model expects (96, 784)" \
  $(resume_from "$(edited t transpose net.1.weight)")
expect_fail "holds tensor lm_head.weight (4, 4) that the model does not have" \
  $(resume_from "$(edited x add lm_head.weight 4,4)")
expect_fail "optimizer.safetensors: lacks optimizer state net.1.weight::0 (96, 784)" \
  $(resume_from "$(edited m drop net.1.weight::0)")
expect_fail "lacks optimizer state" $(resume_from "$(edited none drop-optimizer)")
expect_fail "model.safetensors: tensor net.3.weight holds nan at element (0, 5)" \
  $(resume_from "$(edited nan set net.3.weight 5 nan)")
# The opt-in: weights only, and every rank says its optimizer state starts from zero.
out=$(run_ranks 2 $(resume_from "$(edited reset drop-optimizer)") --set parallel.backend=mpi \
  --set checkpoint.reset_optimizer=true 2>&1) || { echo "FAIL: reset_optimizer refused"; echo "$out"; exit 1; }
for r in 0 1; do
  grep -q "rank $r: checkpoint.reset_optimizer = true: weights loaded at step 4" <<<"$out" ||
    { echo "FAIL: rank $r did not say it reset"; echo "$out"; exit 1; }
done
echo "ok: reset_optimizer loads the weights, both ranks say so"
# Resume exactly at the last step: the loaded model is evaluated and the final line complete.
"$SUBDP" $(resume_from "$WORK/ckpt/step-00000004") --set train.steps=4 --set log.metrics_file="$WORK/last.jsonl" \
  >/dev/null 2>&1 || { echo "FAIL: resume at the last step failed"; exit 1; }
$CHECK positive-event "$WORK/last.jsonl" final step=4 train_loss test_loss test_acc ||
  { echo "FAIL: incomplete final record at the last step"; exit 1; }
$CHECK positive-event "$WORK/last.jsonl" eval test_loss test_acc >/dev/null || { echo "FAIL: no eval record"; exit 1; }
# ... and it leaves the checkpoint it loaded as it was (it trained nothing: no final save),
# even with reset_optimizer (which would otherwise write zeros over the saved moments).
"$SUBDP" train "$WORK/mlp.toml" --set parallel.backend=local --set train.steps=4 --set checkpoint.dir="$WORK/last" >/dev/null
sum=$(md5sum "$WORK"/last/step-00000004/*.safetensors)
"$SUBDP" train "$WORK/mlp.toml" --set parallel.backend=local --set train.steps=4 --set checkpoint.dir="$WORK/last" \
  --set checkpoint.resume=auto --set checkpoint.reset_optimizer=true >/dev/null
[[ $(md5sum "$WORK"/last/step-00000004/*.safetensors) == "$sum" ]] ||
  { echo "FAIL: resuming at the last step rewrote the checkpoint it loaded"; exit 1; }
echo "ok: resume at the last step leaves its checkpoint untouched"
