#!/usr/bin/env bash
# MLP 784-1024-1024-10: logits, loss, gradients and 10 AdamW steps match PyTorch (rel 1e-4).
source "$(dirname "$0")/common.sh"
parity mlp "$ROOT/configs/mlp_fmnist.toml" 1e-4 --set train.batch_size=16
