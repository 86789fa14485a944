#!/usr/bin/env bash
# Reference GPT (vocab 256, context 128, width 256, 8 heads, 6 blocks): logits, loss and
# gradients within 1e-4 of PyTorch, and the losses of 10 AdamW steps within 5e-4. The text
# is the repository's own documentation, so it changes with every docs commit, and with it
# the step losses' agreement: 1.3e-4 at one revision (the 1e-4 this test used to allow
# failed there), far less at others. Adam's normalisation amplifies float32 rounding
# differences step after step on both sides (tests/parity/test_resnet.sh); the gradients,
# held to 1e-4, carry the exactness check.
source "$(dirname "$0")/common.sh"
cat "$ROOT"/README.md "$ROOT"/docs/*.md "$ROOT"/configs/README.md > "$WORK/text.txt"
parity gpt "$ROOT/configs/gpt_brown.toml" 5e-4 --set train.batch_size=4 --set data.path="$WORK/text.txt"
