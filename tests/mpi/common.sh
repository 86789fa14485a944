# Shared set-up for the MPI tests: sourced with $1 = subdp binary, $2 = source root.
set -euo pipefail
SUBDP=$1
ROOT=$2
CHECK="/usr/bin/python3 $ROOT/tests/mpi/check.py"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
WORK=$(mktemp -d /tmp/subdp-mpi-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
BTL=${SUBDP_TEST_BTL:-self,vader}

# run_ranks NP ARGS...: subdp under mpirun with NP ranks, one thread each, bounded in time.
run_ranks() {
  local np=$1
  shift
  timeout 600 mpirun -np "$np" --oversubscribe --mca btl "$BTL" "$SUBDP" "$@"
}

# Small MLP and ResNet configs (real Fashion-MNIST) that run in seconds, and a small GPT below.
cat > "$WORK/mlp.toml" <<TOML
[model]
name = "mlp"
hidden = [96, 64]
[data]
name = "fashion_mnist"
[train]
steps = 8
batch_size = 16
threads = 1
[optim]
name = "sgd"
lr = 0.05
momentum = 0.9
weight_decay = 0.0005
schedule = "constant"
[log]
every = 4
TOML
cat > "$WORK/resnet.toml" <<TOML
[model]
name = "resnet"
widths = [8, 12, 16]
blocks_per_stage = 2
[data]
name = "fashion_mnist"
[train]
steps = 4
batch_size = 8
threads = 1
eval_every = 1000000
[optim]
name = "sgd"
lr = 0.05
momentum = 0.9
schedule = "constant"
[log]
every = 2
TOML

# A small byte-level GPT on the parity text (4 blocks of width 32, context 32, AdamW).
cat > "$WORK/gpt.toml" <<TOML
[model]
name = "gpt"
context = 32
width = 32
heads = 4
depth = 4
[data]
name = "text"
path = "$ROOT/tests/parity/gpt_text.txt"
[train]
steps = 4
batch_size = 4
threads = 1
eval_every = 1000000
eval_batches = 2
[optim]
name = "adamw"
lr = 0.001
schedule = "constant"
[log]
every = 2
TOML

# The same with the LLaMA block (RMSNorm, RoPE, SwiGLU of width 96, no biases).
sed -e 's/^name = "gpt"/name = "llama"/' -e 's/^depth = 4/depth = 4\nffn_width = 96/' "$WORK/gpt.toml" > "$WORK/llama.toml"

# SUBDP_TEST_DEVICE=fenced runs every config on the fenced test device (kernels/fenced): the
# same tests then prove that no host code touches device memory (tests/CMakeLists.txt).
DEVICE=${SUBDP_TEST_DEVICE:-cpu}
for f in mlp resnet gpt llama; do printf '[device]\ntype = "%s"\n' "$DEVICE" >> "$WORK/$f.toml"; done

# final_model DIR: model.safetensors of the newest checkpoint in DIR.
final_model() { echo "$(ls -d "$1"/step-* | tail -1)/model.safetensors"; }

# same_runs NP A B: the runs whose metrics are $WORK/A-{rank}.jsonl and checkpoints $WORK/A
# (and B's) agree bit for bit on every rank: losses, bytes moved per step, the final model and
# optimizer tensors. Returns 1 with a message naming the first difference.
same_runs() {
  local np=$1 a=$2 b=$3 r f
  for ((r = 0; r < np; ++r)); do
    $CHECK same-losses "$WORK/$a-$r.jsonl" "$WORK/$b-$r.jsonl" >/dev/null ||
      { echo "FAIL: rank $r: the losses of $b differ from $a's"; return 1; }
    $CHECK same-bytes "$WORK/$a-$r.jsonl" "$WORK/$b-$r.jsonl" >/dev/null || return 1
  done
  for f in model optimizer; do
    $CHECK tensors-close "$(final_model "$WORK/$a" | xargs dirname)/$f.safetensors" \
      "$(final_model "$WORK/$b" | xargs dirname)/$f.safetensors" 0 >/dev/null ||
      { echo "FAIL: the final $f tensors of $b differ from $a's"; return 1; }
  done
}
