#!/usr/bin/env bash
# The trainer on the emulated CUDA device (kernels/cuda on kernels/emu, device.type = "cuda")
# against the CPU backend. One rank: every model (MLP, ResNet, GPT, LLaMA), recompute,
# stochastic depth. One rank of a 4-rank layout (--simulate-rank 1/4): forward / backward masking at block
# and neuron level, ZeRO-1, ZeRO-2, FSDP. Then 2 and 4 real ranks under mpirun, whose
# collectives run on the emulated NCCL (carried over MPI): DP and every masking regime on each
# model, ZeRO-1/2, FSDP, stochastic depth, re-dealing, alignment, resume on the device, a CPU
# checkpoint resumed on the device, and a DP checkpoint resumed into forward masking. Each
# step's loss on every rank within TOL relative of the CPU's (fp32: the kernels sum in another
# order), the final weights and optimizer state within TOL, the evaluation within TOL; a resume
# on the device continues bit for bit (the emulator is deterministic for a seed). Precisions:
# tf32 and bf16 losses against fp32's; under bf16 the blocks' kept activations planned =
# measured, their saving exact, and one step's update row by row against fp32's.
# Usage: test_train.sh SUBDP_EMULATED_BINARY SOURCE_ROOT
source "$(dirname "$0")/../mpi/common.sh"
TOL=${SUBDP_EMU_TOL:-1e-4}

# Fashion-MNIST cut to 256 training and 64 test images (the same IDX format, gzipped): the
# emulator runs a block's threads as fibers, so the full 10,000-image evaluation would take
# minutes; the shapes and code paths are the same.
python3 - "$WORK/fmnist" <<'PY'
import gzip, os, struct, sys
src, dst = "/usr/share/datasets/fashion-mnist", sys.argv[1]
os.makedirs(dst)
for split, n in (("train", 256), ("t10k", 64)):
    with gzip.open(f"{src}/{split}-images-idx3-ubyte.gz") as f:
        magic, _, rows, cols = struct.unpack(">IIII", f.read(16))
        images = f.read(n * rows * cols)
    with gzip.open(f"{dst}/{split}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", magic, n, rows, cols) + images)
    with gzip.open(f"{src}/{split}-labels-idx1-ubyte.gz") as f:
        magic, _ = struct.unpack(">II", f.read(8))
        labels = f.read(n)
    with gzip.open(f"{dst}/{split}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", magic, n) + labels)
PY
sed -i "s|^name = \"fashion_mnist\"|&\npath = \"$WORK/fmnist\"|" "$WORK/mlp.toml" "$WORK/resnet.toml"
# The tiny ResNet (batch 8, train-mode BatchNorm, SGD at lr 0.05 with momentum) is chaotic:
# states 1e-6 apart after step 2 are 7 % apart after step 3 (the CPU alone, F(4x4, 3x3)
# against F(2x2, 3x3) Winograd: 1e-3 apart -> 1.2 %), while one step from the same checkpoint
# agrees within 1e-5 on both backends. So it runs two steps, where rounding has not grown yet.
sed -i "s/^steps = 4$/steps = 2/" "$WORK/resnet.toml"
# On 4 ranks even two steps are too many: under forward block masking the CPU's own two
# convolution algorithms (Winograd F(2x2, 3x3) and F(4x4, 3x3)) end 5e-3 apart in a BatchNorm
# bias, and the device matches the second to 1e-6. The runs under mpirun below train the
# ResNet one step: its loss within TOL, the weights after one update within RESNET_STEP_TOL (a
# BatchNorm bias's gradient is a sum over the batch's 1,568 positions per channel that cancels:
# blocks.2.b2.bias differs by 1.07e-3 of the tensor's largest value under forward neuron
# masking, the stem's by 2.5e-4; a wrong operand, a missing synchronisation or a lost gradient
# moves them by O(1)).
RESNET_STEP_TOL=5e-3

# compare NP TAG TENSOR_TOL: the runs $TAG-cpu and $TAG-cuda: every rank's losses within TOL,
# the final checkpoint's weights and optimizer state within TENSOR_TOL, the evaluation within TOL.
compare() {
  local np=$1 tag=$2 tensor_tol=$3
  for ((r = 0; r < np; r++)); do
    $CHECK close-losses "$WORK/$tag-cuda-$r.jsonl" "$WORK/$tag-cpu-$r.jsonl" "$TOL"
  done
  if [[ ${LOSSES_ONLY:-0} == 1 ]]; then echo "ok: $tag (losses)"; return; fi
  local dir_cpu dir_cuda
  dir_cpu=$(dirname "$(final_model "$WORK/$tag-cpu-ckpt")")
  dir_cuda=$(dirname "$(final_model "$WORK/$tag-cuda-ckpt")")
  $CHECK tensors-close "$dir_cpu/model.safetensors" "$dir_cuda/model.safetensors" "$tensor_tol"
  $CHECK tensors-close "$dir_cpu/optimizer.safetensors" "$dir_cuda/optimizer.safetensors" "$tensor_tol"
  $CHECK close-final "$WORK/$tag-cuda-0.jsonl" "$WORK/$tag-cpu-0.jsonl" "$TOL"  # rank 0's final record
  echo "ok: $tag"
}

# one_rank MODEL TAG ARGS...: one process on both backends, with a checkpoint at the end.
one_rank() {
  local model=$1 tag=$2
  shift 2
  for dev in cpu cuda; do
    "$SUBDP" train "$WORK/$model.toml" --set device.type=$dev "$@" \
      --set log.metrics_file="$WORK/$tag-$dev-{rank}.jsonl" --set checkpoint.dir="$WORK/$tag-$dev-ckpt" >/dev/null
  done
  compare 1 "$tag" "$TOL"
}

# one_of_four MODEL TAG ARGS...: rank 1 of a 4-rank layout on both backends.
one_of_four() {
  local model=$1 tag=$2
  shift 2
  for dev in cpu cuda; do
    "$SUBDP" train "$WORK/$model.toml" --simulate-rank 1/4 --set device.type=$dev "$@" \
      --set log.metrics_file="$WORK/$tag-$dev-{rank}.jsonl" >/dev/null
  done
  $CHECK close-losses "$WORK/$tag-cuda-1.jsonl" "$WORK/$tag-cpu-1.jsonl" "$TOL"
  echo "ok: $tag"
}

# The weights are compared under SGD: AdamW divides each gradient element by its own running
# magnitude, so an element that is rounding noise on both backends moves by up to lr on
# either (the GPT's qkv.bias: 7e-4 of the tensor's largest value after 4 steps). AdamW runs
# in every 1-of-4 layout below, where its updates show in the losses.
sgd=(--set optim.name=sgd --set optim.lr=0.05 --set optim.momentum=0.9)
one_rank mlp mlp-dp
one_rank resnet resnet-dp
one_rank gpt gpt-dp-sgd "${sgd[@]}"
one_rank resnet resnet-recompute --set train.recompute=blocks
one_rank gpt gpt-recompute-sgd --set train.recompute=blocks "${sgd[@]}"
one_rank resnet resnet-stochastic --set mask.regime=stochastic --set mask.keep=0.5
one_rank llama llama-dp-sgd "${sgd[@]}"
one_rank llama llama-recompute-sgd --set train.recompute=blocks "${sgd[@]}"
one_rank llama llama-gqa-sgd --set model.kv_heads=2 "${sgd[@]}"  # grouped-query: 2 query heads per k / v head
# [device] precision = "tf32" / "bf16" (cuBLAS on TF32 / bf16 tensor cores, whose operand
# rounding the emulator applies; bf16 also keeps the language models' logits in bf16): each
# model's losses within 1e-3 of its fp32 run on the device (measured: tf32 2e-6, bf16 2e-5 for
# the GPT and the LLaMA over these 4 steps, at losses near ln V, which a wrong GEMM or head
# moves by far more), and neither the fp32 bits nor, for bf16, the TF32 bits. The ResNet's
# convolutions run the batched GEMM, the GPT's and the LLaMA's linear layers the single one;
# the chaotic ResNet (above) one step only (bf16: 2.7e-4; its second loss is 1.2 % off). The
# language models run 2 heads of 16 columns here, so that bf16 runs attention on tensor cores
# (widths that are multiples of 16; measured 4.6e-5 and 2.7e-5 against fp32).
for model in gpt llama resnet; do
  for p in fp32 tf32 bf16; do
    [[ $model == resnet && $p == tf32 ]] && continue
    "$SUBDP" train "$WORK/$model.toml" --set device.type=cuda --set device.precision=$p "${sgd[@]}" \
      $([[ $model == resnet ]] && echo --set train.steps=1 || echo --set model.heads=2) \
      --set log.metrics_file="$WORK/$model-$p-{rank}.jsonl" >/dev/null
  done
  for p in tf32 bf16; do
    [[ -f $WORK/$model-$p-0.jsonl ]] || continue
    $CHECK close-losses "$WORK/$model-$p-0.jsonl" "$WORK/$model-fp32-0.jsonl" 1e-3
    ! $CHECK same-tail "$WORK/$model-fp32-0.jsonl" "$WORK/$model-$p-0.jsonl" >/dev/null 2>&1 ||
      { echo "FAIL: $model at precision = $p gave the fp32 losses bit for bit"; exit 1; }
    echo "ok: $model-$p"
  done
  [[ -f $WORK/$model-tf32-0.jsonl ]] || continue
  ! $CHECK same-tail "$WORK/$model-tf32-0.jsonl" "$WORK/$model-bf16-0.jsonl" >/dev/null 2>&1 ||
    { echo "FAIL: $model at precision = bf16 gave the TF32 losses bit for bit"; exit 1; }
done
# bf16 activations: the MLP pre-activations, q, k, v and the attention output the blocks keep
# (the GPT's fc_pre, the LLaMA's gate and up) are bf16, the planner counts them to the byte,
# alone and under recompute, and the saving is exactly theirs (rows 4 x 32 = 128, 4 blocks, 2
# bytes less per value) and the bf16 logits' (V = 256: 65,536), less the shared scratch's
# growth (attention's float32 q, k, v after dy and dqkv, max(C, 4C) + 3C = 224 floats a row):
# the GPT's fc_pre (H = 128) 131,072, qkv 98,304, y 32,768, scratch 128 -> 224 floats a row,
# -49,152; the LLaMA's gate and up (H = 96) 196,608, qkv 98,304, y 32,768, scratch 128 -> 224
# (192 for w3's output after the norm's, then d(gate) and d(up)), -49,152.
act_bytes() { $CHECK plan-field "$1" "$2.bytes.activations"; }
for model in gpt llama; do
  for rc in none blocks; do
    row=$([[ $rc == none ]] && echo dp || echo baseline)
    for p in fp32 bf16; do
      "$SUBDP" plan "$WORK/$model.toml" --world 1 --set device.type=cuda --set device.precision=$p --set model.heads=2 \
        --set train.recompute=$rc --json >"$WORK/plan-$model-$p-$rc.json"
    done
    "$SUBDP" train "$WORK/$model.toml" --set device.type=cuda --set device.precision=bf16 --set model.heads=2 \
      --set train.recompute=$rc --set log.metrics_file="$WORK/$model-bf16-$rc-{rank}.jsonl" >/dev/null
    $CHECK planned-peaks "$WORK/plan-$model-bf16-$rc.json" $row "$WORK/$model-bf16-$rc-0.jsonl" 0 activations
    [[ $rc == blocks ]] && continue  # the recompute set is one block's: its saving is a quarter of the above
    saved=$(($(act_bytes "$WORK/plan-$model-fp32-$rc.json" $row) - $(act_bytes "$WORK/plan-$model-bf16-$rc.json" $row)))
    expected=$(($([[ $model == gpt ]] && echo 131072 || echo 196608) + 98304 + 32768 + 65536 - 49152))
    [[ $saved == "$expected" ]] || { echo "FAIL: $model bf16 saves $saved activation bytes, expected $expected"; exit 1; }
    echo "ok: $model keeps its MLP pre-activations, q, k, v and y in bf16: $saved bytes saved"
  done
done
# One SGD step at lr 1 (the update is minus the gradient) in bf16 against fp32 from the same
# initial weights (a run at lr 1e-30: below every weight's rounding), heads of 16 columns
# (tensor-core attention) and of 8 (the float32 kernels on the rounded q, k, v), and under
# recompute (float32 q, k, v, the bf16 MLP pre-activations in the one shared set): every
# parameter's update row by row (a q row against q rows, not the larger v rows) within 0.25 of
# its largest element. Measured 0.03-0.08 (bf16 operands); the backward reading another block's
# q, k, v gives 1.7-8.2, a stale attention output for proj's dW 3.8, a GELU backward left out
# 1.1 of the whole tensor. The loss alone
# cannot see such bugs: at initialisation attention is nearly uniform and q and k barely move it.
one_step() {  # one_step MODEL TAG LR PRECISION ARGS...: prints the checkpoint's model file
  local model=$1 tag=$2 lr=$3 p=$4
  shift 4
  "$SUBDP" train "$WORK/$model.toml" --set device.type=cuda --set device.precision=$p --set optim.name=sgd \
    --set optim.lr=$lr --set optim.momentum=0 --set train.steps=1 --set checkpoint.dir="$WORK/$tag" "$@" >/dev/null
  final_model "$WORK/$tag"
}
for model in gpt llama; do
  for variant in "2 none" "4 none" "2 blocks"; do  # heads, train.recompute
    set -- $variant
    args=(--set model.heads=$1 --set train.recompute=$2)
    init=$(one_step $model $model-$1-$2-init 1e-30 fp32 "${args[@]}")
    bf16=$(one_step $model $model-$1-$2-bf16 1 bf16 "${args[@]}")
    fp32=$(one_step $model $model-$1-$2-fp32 1 fp32 "${args[@]}")
    $CHECK updates-close "$init" "$bf16" "$fp32" 0.25
  done
done
# ... and the masked layouts that read part of them (1 of 4 ranks): forward neuron masking (a
# narrower hidden layer), backward neuron masking (the GELU output's kept columns for fc2's
# weight gradient), backward block masking (a dropped block: no weight gradient).
for model in gpt llama; do
  for setting in "forward neuron" "backward neuron" "backward block"; do
    set -- $setting
    for p in fp32 bf16; do
      "$SUBDP" train "$WORK/$model.toml" --simulate-rank 1/4 --set device.type=cuda --set device.precision=$p \
        --set model.heads=2 --set parallel.subnetworks=4 --set mask.keep=0.5 --set mask.regime=$1 \
        --set mask.granularity=$2 --set log.metrics_file="$WORK/$model-$1-$2-$p-{rank}.jsonl" >/dev/null
    done
    $CHECK close-losses "$WORK/$model-$1-$2-bf16-1.jsonl" "$WORK/$model-$1-$2-fp32-1.jsonl" 1e-3
    echo "ok: $model-$1-$2-bf16"
  done
done
# The GPT's bf16 head and tensor-core attention under sharded gradients and parameters (rank
# 1 of 4, forward block masking, recompute): within 1e-3 of fp32 on the device.
for shard in gradients parameters; do
  for p in fp32 bf16; do
    "$SUBDP" train "$WORK/gpt.toml" --simulate-rank 1/4 --set device.type=cuda --set device.precision=$p \
      --set model.heads=2 \
      --set parallel.subnetworks=4 --set mask.keep=0.5 --set mask.regime=forward --set parallel.shard=$shard \
      --set train.recompute=blocks --set log.metrics_file="$WORK/gpt-$shard-$p-{rank}.jsonl" >/dev/null
  done
  $CHECK close-losses "$WORK/gpt-$shard-bf16-1.jsonl" "$WORK/gpt-$shard-fp32-1.jsonl" 1e-3
  echo "ok: gpt-$shard-bf16"
done

masked=(--set parallel.subnetworks=4 --set mask.keep=0.5)
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

# several NP MODEL TAG ARGS...: NP ranks under mpirun on both backends (NCCL on the device),
# every rank's losses, the final checkpoint and the evaluation compared.
several() {
  local np=$1 model=$2 tag=$3
  shift 3
  local tol=$TOL
  if [[ $model == resnet ]]; then
    set -- "$@" --set train.steps=1
    tol=$RESNET_STEP_TOL
  fi
  for dev in cpu cuda; do
    run_ranks "$np" train "$WORK/$model.toml" --set device.type=$dev "$@" \
      --set log.metrics_file="$WORK/$tag-$dev-{rank}.jsonl" --set checkpoint.dir="$WORK/$tag-$dev-ckpt" >/dev/null
  done
  compare "$np" "$tag" "$tol"
}

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
# AdamW under NCCL: its updates show in the losses (weights: see the SGD note above).
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
