# Shared set-up of the trainer tests on the emulated CUDA device (test_train*.sh): sourced by
# each with $1 = the emulated build's subdp, $2 = the source root. The small configs (MLP and
# ResNet on a cut of Fashion-MNIST, GPT and LLaMA on the parity text), the tolerances and the
# helpers that run a configuration on both backends and compare them.
# The three scripts are apart so that ctest runs them side by side on 2 cores: the
# one-process runs leave a core idle (the emulator is one thread).
source "$(dirname "${BASH_SOURCE[0]}")/../mpi/common.sh"
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
# bias, and the device matches the second to 1e-6. The runs under mpirun (test_train_ranks.sh) train the
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
# in every 1-of-4 layout (test_train_layouts.sh), where its updates show in the losses.
sgd=(--set optim.name=sgd --set optim.lr=0.05 --set optim.momentum=0.9)

masked=(--set parallel.subnetworks=4 --set mask.keep=0.5)

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
