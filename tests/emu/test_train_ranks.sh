#!/usr/bin/env bash
# The trainer on the emulated CUDA device against the CPU backend on 2 and 4 real ranks under
# mpirun, whose collectives run on the emulated NCCL (carried over MPI): DP and every masking
# regime on each model, ZeRO-1/2, FSDP, stochastic depth, re-dealing, alignment, AdamW; resume
# under NCCL bit for bit, a DP checkpoint resumed into forward masking; ZeRO-2's one host
# synchronisation a step; a stuck rank ended by the device-wait watchdog.
# Usage: test_train_ranks.sh SUBDP_EMULATED_BINARY SOURCE_ROOT
source "$(dirname "$0")/train_common.sh"
several 2 mlp mlp-np2-dp
several 4 mlp mlp-np4-fwd-neuron "${masked[@]}" --set mask.regime=forward --set mask.granularity=neuron
several 4 mlp mlp-np4-bwd-neuron "${masked[@]}" --set mask.regime=backward --set mask.granularity=neuron
for model in resnet gpt; do
  opt=()
  [[ $model == gpt ]] && opt=("${sgd[@]}")
  several 2 "$model" "$model-np2-dp" "${opt[@]}"
  for regime in forward backward; do
    for gran in block neuron; do
      several 4 "$model" "$model-np4-$regime-$gran" "${masked[@]}" "${opt[@]}" --set mask.regime=$regime \
        --set mask.granularity=$gran
    done
  done
  several 4 "$model" "$model-np4-zero1" "${opt[@]}" --set parallel.shard=optimizer
  several 4 "$model" "$model-np4-fwd-block-zero2" "${masked[@]}" "${opt[@]}" --set mask.regime=forward \
    --set parallel.shard=gradients
  several 4 "$model" "$model-np4-fwd-block-fsdp" "${masked[@]}" "${opt[@]}" --set mask.regime=forward \
    --set parallel.shard=parameters --set train.recompute=blocks
done
several 2 resnet resnet-np2-stochastic --set mask.regime=stochastic --set mask.keep=0.5
several 2 llama llama-np2-fwd-neuron --set parallel.subnetworks=2 --set mask.keep=0.5 "${sgd[@]}" \
  --set mask.regime=forward --set mask.granularity=neuron
several 4 gpt gpt-np4-redeal "${masked[@]}" "${sgd[@]}" --set mask.regime=forward --set mask.redeal_every=2
several 4 resnet resnet-np4-alignment "${masked[@]}" --set mask.regime=forward --set log.alignment_every=1
# AdamW under NCCL: its updates show in the losses (weights: see the SGD note in train_common.sh).
LOSSES_ONLY=1 several 4 gpt gpt-np4-adamw-fwd-block "${masked[@]}" --set mask.regime=forward

# Resume on the device under NCCL: 4 ranks of forward block masking stopped at step 2 and
# resumed equal the uninterrupted run bit for bit; a DP checkpoint of the device resumed into
# forward masking (the re-split through assembly) continues as the CPU's does.
run_ranks 4 train "$WORK/gpt.toml" --set device.type=cuda "${masked[@]}" --set mask.regime=forward \
  --set checkpoint.dir="$WORK/np4-ckpt" --set checkpoint.every=2 --set log.metrics_file="$WORK/np4-full-{rank}.jsonl" \
  >/dev/null
run_ranks 4 train "$WORK/gpt.toml" --set device.type=cuda "${masked[@]}" --set mask.regime=forward \
  --set checkpoint.resume="$WORK/np4-ckpt/step-00000002" --set log.metrics_file="$WORK/np4-tail-{rank}.jsonl" >/dev/null
for r in 0 1 2 3; do $CHECK same-tail "$WORK/np4-full-$r.jsonl" "$WORK/np4-tail-$r.jsonl"; done
dp=$(dirname "$(final_model "$WORK/gpt-np2-dp-cuda-ckpt")")
for dev in cpu cuda; do
  run_ranks 4 train "$WORK/gpt.toml" --set device.type=$dev "${masked[@]}" "${sgd[@]}" --set mask.regime=forward \
    --set train.steps=6 --set checkpoint.resume="$dp" --set log.metrics_file="$WORK/relayout-$dev-{rank}.jsonl" \
    >/dev/null
done
for r in 0 1 2 3; do $CHECK close-losses "$WORK/relayout-cuda-$r.jsonl" "$WORK/relayout-cpu-$r.jsonl" "$TOL"; done
echo "ok: resume under NCCL, and a DP checkpoint resumed into forward masking on the device"

# One GPU per rank through CUDA_VISIBLE_DEVICES (as Slurm's --gpus-per-task binds them): each
# rank sees one device 0, its own, and trains as ranks that see every device do, bit for bit.
# (Before, rank 1 looked for a device 1 and was refused as "two ranks on one GPU".) Two ranks
# bound to one GPU, and ranks that see none, are refused by name.
gpt_dp2=(train "$WORK/gpt.toml" --set device.type=cuda --set parallel.backend=nccl --set train.steps=2)
visible() {  # visible DEVICES_OF_RANK_0 DEVICES_OF_RANK_1 TAG: GPT DP on 2 ranks over NCCL
  local tag=$3
  timeout 600 mpirun -np 2 --oversubscribe --mca btl "$BTL" bash -c \
    'v=("$1" "$2"); shift 2; CUDA_VISIBLE_DEVICES=${v[$OMPI_COMM_WORLD_RANK]} exec "$@"' _ "$1" "$2" \
    "$SUBDP" "${gpt_dp2[@]}" --set log.metrics_file="$WORK/$tag-{rank}.jsonl"
}
run_ranks 2 "${gpt_dp2[@]}" --set log.metrics_file="$WORK/visible-all-{rank}.jsonl" >/dev/null
visible 0 1 visible-own >/dev/null
for r in 0 1; do $CHECK same-tail "$WORK/visible-all-$r.jsonl" "$WORK/visible-own-$r.jsonl"; done
out=$(visible 0 0 visible-shared 2>&1) && { echo "FAIL: two ranks bound to one GPU were accepted"; exit 1; }
grep -q "NCCL 2.28 refuses two ranks on one GPU: .*(ranks 0 and 1 both map to host .*: GPU 0000:00:00.0)" <<<"$out" ||
  { echo "FAIL: two ranks on one GPU not named: $out"; exit 1; }
out=$(visible "" "" visible-none 2>&1) && { echo "FAIL: ranks without a visible GPU were accepted"; exit 1; }
grep -q 'no CUDA device was found on rank 0 (host .*: 0 visible GPU(s), no CUDA-capable device is detected' <<<"$out" ||
  { echo "FAIL: no device not named: $out"; exit 1; }
echo "ok: one GPU per rank through CUDA_VISIBLE_DEVICES; two ranks on one GPU and none refused by name"

# ZeRO-2 on 2 ranks over NCCL: the block hooks count into the step's counters too, and the
# step's flags are all-reduced on the device before the counters are read, so a step without
# a log line has 1, the read. (2 while the flags went through the host, 7 while each block
# hook read its own flag.)
nccl_waits() {
  SUBDP_EMU_HOST_WAITS=1 run_ranks 2 train "$WORK/gpt.toml" --set device.type=cuda --set parallel.backend=nccl \
    --set parallel.shard=gradients --set train.steps="$1" --set log.every=1000 2>&1 >/dev/null |
    sed -n 's/^subdp-emu: host synchronisations: //p' | sort -n | tail -1
}
w4=$(nccl_waits 4) w8=$(nccl_waits 8)
per_step=$(((w8 - w4) / 4))
((per_step <= 1)) || { echo "FAIL: ZeRO-2 over NCCL: $per_step host synchronisations per step ($w4, $w8)"; exit 1; }
echo "ok: ZeRO-2 over NCCL on 2 ranks: $per_step host synchronisations per step"

# A stuck rank under NCCL (SIGSTOP): its peer waits inside the collective (the emulator runs
# it at the call, a GPU at the next stream synchronisation), where the device-wait watchdog
# ends it after parallel.collective_timeout_s and mpirun tears down the job. (Before, the peer
# waited for ever: only MPI's own collectives had a watchdog.)
sed 's/^steps = .*/steps = 100000/' "$WORK/gpt.toml" >"$WORK/gpt-long.toml"
run_ranks 2 train "$WORK/gpt-long.toml" --set device.type=cuda --set parallel.backend=nccl \
  --set parallel.collective_timeout_s=5 --set log.every=1 >"$WORK/nccl-stop.log" 2>&1 &
launcher=$!
for _ in $(seq 1200); do grep -q "step 2/" "$WORK/nccl-stop.log" && break; sleep 0.1; done
victim=$(pgrep -f "^$SUBDP train $WORK/gpt-long.toml" | sed -n 2p)
[[ -n $victim ]] || { echo "FAIL: the NCCL job did not start:"; tail -3 "$WORK/nccl-stop.log"; exit 1; }
t0=$SECONDS
kill -STOP "$victim"
rc=0
wait "$launcher" || rc=$?
took=$((SECONDS - t0))
kill -CONT "$victim" 2>/dev/null || true
((rc != 0 && rc != 124 && took <= 60)) ||
  { echo "FAIL: a stuck rank under NCCL: exit $rc after $took s"; tail -3 "$WORK/nccl-stop.log"; exit 1; }
grep -q "collective NCCL (.*) has waited [0-9.]* s .*a peer rank is lost or stuck (timed from the tick that saw the collective begin on the device)" "$WORK/nccl-stop.log" ||
  { echo "FAIL: no watchdog message under NCCL:"; tail -5 "$WORK/nccl-stop.log"; exit 1; }
echo "ok: a stuck rank under NCCL ends the job in $took s (exit $rc)"
