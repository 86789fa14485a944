#!/usr/bin/env bash
# LLaMA (configs/llama_brown.toml: vocab 256, context 128, width 256, 8 heads, 6 blocks,
# SwiGLU 704): logits, loss, gradients within 1e-4 and the losses of 10 AdamW steps within
# 1e-4 of the PyTorch twin (benchmarks/torch_llama.py), on the GPT parity test's fixed text;
# then the same with grouped-query attention (model.kv_heads = 2: four query heads per key /
# value head, the twin repeating k and v as LLaMA's reference code does).
source "$(dirname "$0")/common.sh"
parity llama "$ROOT/configs/llama_brown.toml" 1e-4 --set train.batch_size=4 \
  --set data.path="$ROOT/tests/parity/gpt_text.txt"
parity llama-gqa "$ROOT/configs/llama_brown.toml" 1e-4 --set train.batch_size=4 \
  --set data.path="$ROOT/tests/parity/gpt_text.txt" --set model.kv_heads=2
