#!/usr/bin/env bash
# LLaMA (configs/llama_brown.toml: vocab 256, context 128, width 256, 8 heads, 6 blocks,
# SwiGLU 704): logits, loss, gradients within 1e-4 and the losses of 10 AdamW steps within
# 1e-4 of the PyTorch twin (benchmarks/torch_llama.py), on the GPT parity test's fixed text.
source "$(dirname "$0")/common.sh"
parity llama "$ROOT/configs/llama_brown.toml" 1e-4 --set train.batch_size=4 \
  --set data.path="$ROOT/tests/parity/gpt_text.txt"
