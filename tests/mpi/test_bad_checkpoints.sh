#!/usr/bin/env bash
# Checkpoints that must be refused or skipped: resume "auto" skips a damaged newest
# checkpoint with a warning and takes the previous one; a checkpoint of another model or of
# other sizes is refused with an error naming the tensor; a missing path is an error.
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
expect_fail "wrong shape" train "$WORK/mlp.toml" --set parallel.backend=local --set model.hidden=[32,64] \
  --set checkpoint.resume="$WORK/ckpt/step-00000004" --set checkpoint.dir="$WORK/other"
expect_fail "not a subdp checkpoint" train "$WORK/mlp.toml" --set parallel.backend=local \
  --set checkpoint.resume="$WORK/nowhere"
expect_fail "CRC32" train "$WORK/mlp.toml" --set parallel.backend=local \
  --set checkpoint.resume="$WORK/ckpt/step-00000008"
expect_fail "past the run's last step 2" train "$WORK/mlp.toml" --set parallel.backend=local \
  --set checkpoint.resume="$WORK/ckpt/step-00000004" --set train.steps=2 --set checkpoint.dir="$WORK/other"
