# Shared by the parity tests: $1 = subdp binary, $2 = source root. Exit 77 = skipped.
set -euo pipefail
SUBDP=$1
ROOT=$2
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "SKIPPED: Debian's python3-torch is not installed (scripts/setup.sh installs it)"
  exit 77
fi
WORK=$(mktemp -d /tmp/subdp-parity-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# parity MODEL CONFIG STEP_TOL ARGS...: dump from subdp, compare in PyTorch (AdamW lr 1e-3):
# logits, loss and gradients within PARITY_TOL (default 1e-4), the losses of 10 AdamW steps
# within STEP_TOL.
parity() {
  local model=$1 config=$2 step_tol=$3
  shift 3
  "$SUBDP" parity-dump "$config" "$WORK/$model" --steps 10 --set optim.name=adamw --set optim.lr=0.001 \
    --set optim.weight_decay=0.01 --set train.threads=1 "$@" >/dev/null
  /usr/bin/python3 "$ROOT/tests/parity/parity.py" "$model" "$WORK/$model" --lr 0.001 --weight-decay 0.01 --step-tol "$step_tol" \
    --tol "${PARITY_TOL:-1e-4}"
}
