#!/usr/bin/env bash
# The trainer on the emulated CUDA device (kernels/cuda on kernels/emu, device.type = "cuda")
# against the CPU backend, one process: every model (MLP, ResNet, GPT, LLaMA) on one rank,
# recompute, stochastic depth, grouped-query attention; precisions tf32 and bf16 against
# fp32 (losses; under bf16 the blocks' kept activations planned = measured and their saving
# exact, one step's update row by row against fp32's, and bf16 under masking and sharding on
# rank 1 of 4). Each step's loss within TOL relative of the CPU's (fp32: the kernels sum in
# another order), the final weights and optimizer state within TOL, the evaluation within TOL.
# test_train_layouts.sh and test_train_ranks.sh hold the masked layouts and the runs under mpirun.
# Usage: test_train.sh SUBDP_EMULATED_BINARY SOURCE_ROOT
source "$(dirname "$0")/train_common.sh"
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
# the chaotic ResNet (train_common.sh) one step only (bf16: 2.7e-4; its second loss is 1.2 % off). The
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
# cublasLtMatmul refusing the heuristic's algorithm (the emulator's SUBDP_EMU_LT_REFUSE_MATMUL,
# as the library may answer NOT_SUPPORTED): the GPT's fused layers warn once per problem and
# run unfused (sgemm, then the bias / GELU kernels), and train to the fused run's losses (the
# same float operations in the same order: bit for bit, measured).
SUBDP_EMU_LT_REFUSE_MATMUL=1 "$SUBDP" train "$WORK/gpt.toml" --set device.type=cuda --set device.precision=fp32 \
  "${sgd[@]}" --set model.heads=2 --set log.metrics_file="$WORK/gpt-refused-{rank}.jsonl" \
  >/dev/null 2>"$WORK/gpt-refused.err" ||
  { cat "$WORK/gpt-refused.err"; echo "FAIL: the GPT stopped on refused cuBLASLt algorithms"; exit 1; }
grep -q "warning: cublasLtMatmul refused (NOT_SUPPORTED)" "$WORK/gpt-refused.err" ||
  { cat "$WORK/gpt-refused.err"; echo "FAIL: no warning for the refused cuBLASLt algorithms"; exit 1; }
$CHECK same-losses "$WORK/gpt-fp32-0.jsonl" "$WORK/gpt-refused-0.jsonl"
echo "ok: refused cuBLASLt algorithms: the GPT trains unfused to the fused losses, with a warning"
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
      --set train.recompute=$rc --set log.metrics_file="$WORK/$model-bf16-$rc-{rank}.jsonl" >"$WORK/$model-bf16-$rc.out"
    $CHECK planned-peaks "$WORK/plan-$model-bf16-$rc.json" $row "$WORK/$model-bf16-$rc-0.jsonl" 0 activations
    # The start-up table's total for this layout is the plan's (it printed the bytes allocated
    # before step 1, without cuBLASLt's workspace: "0.08x DP" for plain DP).
    printed=$(awk '/this layout, planned peak/ {print $(NF - 2)}' "$WORK/$model-bf16-$rc.out")
    planned=$($CHECK plan-total "$WORK/plan-$model-bf16-$rc.json" $row)
    [[ -n $printed && $printed == "$planned" ]] ||
      { echo "FAIL: $model $rc: the start-up table says $printed bytes, the plan $planned"; exit 1; }
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
