#!/usr/bin/env bash
# Reference GPT (vocab 256, context 128, width 256, 8 heads, 6 blocks): logits, loss,
# gradients within 1e-4 and the losses of 10 AdamW steps within 1e-4 of PyTorch.
source "$(dirname "$0")/common.sh"
cat "$ROOT"/README.md "$ROOT"/docs/*.md "$ROOT"/configs/README.md > "$WORK/text.txt"
parity gpt "$ROOT/configs/gpt_brown.toml" 1e-4 --set train.batch_size=4 --set data.path="$WORK/text.txt"
