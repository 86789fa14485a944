#!/usr/bin/env bash
# The trainer on the emulated CUDA device against the CPU backend, one process each: rank 1 of
# a 4-rank layout (--simulate-rank 1/4) under forward / backward masking at block and neuron
# level, ZeRO-1, ZeRO-2 and FSDP; a resume on the device continuing bit for bit (the emulator
# is deterministic for a seed), a CPU checkpoint resumed on the device; a pool larger than the
# device named; non-finite gradients and updates stopping the run; one host synchronisation and
# one optimizer launch a step.
# Usage: test_train_layouts.sh SUBDP_EMULATED_BINARY SOURCE_ROOT
source "$(dirname "$0")/train_common.sh"
one_of_four mlp mlp-fwd-neuron "${masked[@]}" --set mask.regime=forward --set mask.granularity=neuron
one_of_four mlp mlp-bwd-neuron "${masked[@]}" --set mask.regime=backward --set mask.granularity=neuron
for regime in forward backward; do  # the LLaMA: every masking regime, 1 of 4 ranks
  for gran in block neuron; do
    one_of_four llama "llama-$regime-$gran" "${masked[@]}" --set mask.regime=$regime --set mask.granularity=$gran
  done
done
for model in resnet gpt; do
  for regime in forward backward; do
    for gran in block neuron; do
      one_of_four "$model" "$model-$regime-$gran" "${masked[@]}" --set mask.regime=$regime \
        --set mask.granularity=$gran
    done
  done
  one_of_four "$model" "$model-dp-zero1" --set parallel.shard=optimizer
  one_of_four "$model" "$model-fwd-block-zero2" "${masked[@]}" --set mask.regime=forward --set parallel.shard=gradients
  one_of_four "$model" "$model-fwd-block-fsdp" "${masked[@]}" --set mask.regime=forward \
    --set parallel.shard=parameters --set train.recompute=blocks
done

# Resume on the device: the GPT stopped at step 2 and resumed equals its uninterrupted run bit
# for bit (the emulator is deterministic for a seed, as a GPU is not promised to be).
"$SUBDP" train "$WORK/gpt.toml" --set device.type=cuda --set checkpoint.dir="$WORK/resume-ckpt" \
  --set checkpoint.every=2 --set log.metrics_file="$WORK/resume-full.jsonl" >/dev/null
"$SUBDP" train "$WORK/gpt.toml" --set device.type=cuda --set checkpoint.resume="$WORK/resume-ckpt/step-00000002" \
  --set log.metrics_file="$WORK/resume-tail.jsonl" >/dev/null
$CHECK same-tail "$WORK/resume-full.jsonl" "$WORK/resume-tail.jsonl"
# A CPU checkpoint resumed on the device continues as the CPU does.
"$SUBDP" train "$WORK/gpt.toml" --set device.type=cpu --set checkpoint.dir="$WORK/cross-ckpt" \
  --set checkpoint.every=2 --set log.metrics_file="$WORK/cross-cpu.jsonl" >/dev/null
"$SUBDP" train "$WORK/gpt.toml" --set device.type=cuda --set checkpoint.resume="$WORK/cross-ckpt/step-00000002" \
  --set log.metrics_file="$WORK/cross-cuda.jsonl" >/dev/null
grep -v '"event"' "$WORK/cross-cpu.jsonl" | tail -n +3 > "$WORK/cross-cpu-tail.jsonl"  # steps 3 on
$CHECK close-losses "$WORK/cross-cuda.jsonl" "$WORK/cross-cpu-tail.jsonl" "$TOL"
echo "ok: resume on the device, and a CPU checkpoint on the device"
# A device pool larger than the device's free memory is named (it was cudaMalloc's raw "out of
# memory" at backend.cpp).
out=$(SUBDP_EMU_DEVICE_GB=0.01 SUBDP_CUDA_POOL_GB=1 "$SUBDP" train "$WORK/gpt.toml" --set device.type=cuda 2>&1) &&
  { echo "FAIL: a pool of 1 GiB on a device of 0.01 GiB was accepted"; exit 1; }
grep -q "the device pool of 1.000 GiB (SUBDP_CUDA_POOL_GB, else 90 % of the free memory) does not fit" <<<"$out" ||
  { echo "FAIL: $out"; exit 1; }
echo "ok: a pool larger than the device is named"

# Numerical faults on the device, where the checks read one device flag per phase: a diverging
# run stops naming the step and tensor, and an update that overflows (an AdamW moment of 3e38
# edited into a checkpoint) stops naming the tensor the optimizer wrote it to.
rc=0
"$SUBDP" train "$WORK/mlp.toml" --set device.type=cuda --set optim.lr=300 --set optim.momentum=0.0 \
  >"$WORK/diverge.log" 2>&1 || rc=$?
[[ $rc != 0 ]] || { echo "FAIL: a diverging run on the device exited 0"; exit 1; }
# The step's flag stops it before the optimizer runs on the non-finite gradient (a flag lost on
# the device lets the update write the fault, and the next step's update check stop it).
grep -Eq "non-finite gradient in [a-z0-9.]+ at step [0-9]+" "$WORK/diverge.log" &&
  grep -q "non-finite loss or gradient at step [0-9]* (see the rank's message above); stopping before the optimizer" \
    "$WORK/diverge.log" || { echo "FAIL: no non-finite message:"; tail -3 "$WORK/diverge.log"; exit 1; }
adam=(--set device.type=cuda --set optim.name=adamw --set optim.lr=0.001)
"$SUBDP" train "$WORK/mlp.toml" "${adam[@]}" --set train.steps=2 --set checkpoint.dir="$WORK/adam" >/dev/null
/usr/bin/python3 "$ROOT/tests/mpi/edit_checkpoint.py" "$WORK/adam/step-00000002" set net.1.weight::0 3 3e38
rc=0
"$SUBDP" train "$WORK/mlp.toml" "${adam[@]}" --set train.steps=4 --set checkpoint.resume="$WORK/adam/step-00000002" \
  >"$WORK/overflow.log" 2>&1 || rc=$?
[[ $rc != 0 ]] || { echo "FAIL: an overflowing update on the device trained on"; exit 1; }
grep -Eq "written by the optimizer update\) on rank 0: [a-z ]*net\.[13]\.weight" "$WORK/overflow.log" ||
  { echo "FAIL: the overflow is not named:"; tail -3 "$WORK/overflow.log"; exit 1; }
echo "ok: non-finite gradients and updates on the device stop the run, naming the tensor"

# Host synchronisations per step on the device (the emulator counts stream, device and event
# waits and synchronous copies: SUBDP_EMU_HOST_WAITS=1). The GPT's step has 1 at one rank:
# the read of the backend's counters (the loss and hits, the embeddings' id checks, the
# gradients' non-finite count and the previous update's non-finite writes). (Before: 110, one
# per tensor checked and per update; 8, with the batch's two uploads waited for; 6, with the
# two embeddings' checks, the loss, the hits, the gradient flag and the update count read
# apart.)
host_waits() {
  SUBDP_EMU_HOST_WAITS=1 "$SUBDP" train "$WORK/gpt.toml" --set device.type=cuda --set train.steps="$1" \
    --set log.every=1 2>&1 >/dev/null | sed -n 's/^subdp-emu: host synchronisations: //p'
}
w4=$(host_waits 4) w8=$(host_waits 8)
per_step=$(((w8 - w4) / 4))
((per_step <= 1)) || { echo "FAIL: $per_step host synchronisations per step (4 steps: $w4, 8 steps: $w8)"; exit 1; }
echo "ok: $per_step host synchronisations per step on the device"
# Kernel launches a step, by kernel (SUBDP_EMU_LAUNCHES=1): the optimizer's update and the
# gradients' non-finite count are each one launch for the whole model (multi-tensor), not one
# per tensor (the count took 52 launches a step, one per tensor, before count_nonfinite_spans
# batched them).
for steps in 4 8; do
  SUBDP_EMU_LAUNCHES=1 "$SUBDP" train "$WORK/gpt.toml" --set device.type=cuda --set train.steps=$steps \
    --set log.every=1 2>"$WORK/launches-$steps.txt" >/dev/null
done
launches_per_step() {  # launches_per_step [KERNEL]: (launches in 8 steps - in 4) / 4, of KERNEL or all
  local key="kernel launches" a b
  [[ -n ${1:-} ]] && key="kernel launches of $1"
  a=$(sed -n "s/^subdp-emu: $key: //p" "$WORK/launches-4.txt")
  b=$(sed -n "s/^subdp-emu: $key: //p" "$WORK/launches-8.txt")
  echo $(((${b:-0} - ${a:-0}) / 4))
}
for kernel in adamw_chunks_kernel count_nonfinite_batch_kernel; do
  got=$(launches_per_step $kernel)
  ((got == 1)) || { echo "FAIL: $kernel launched $got times a step, want 1"; exit 1; }
done
echo "ok: one AdamW and one non-finite count launch a step for the whole model ($(launches_per_step) launches a step in all)"
