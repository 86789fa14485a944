#!/usr/bin/env bash
# GPU bench 2 (`bench_2_gpt2.sh BIN_DIR OUT_DIR`): GPT-2 small (12 blocks, width 768, 12 heads,
# context 1024, vocabulary 50304, AdamW) on random tokens: subdp's CUDA backend (float32: bf16
# is not implemented yet) in tokens/s and model FLOP utilisation, next to PyTorch training the
# same model in the same run (torch_gpt2.py: fp32, bf16 autocast eager, bf16 torch.compile).
# MFU = 6 * params * tokens/s / peak, with the H200's dense peaks: 67 TFLOP/s fp32 (no TF32),
# 989 TFLOP/s bf16 (NVIDIA's H200 datasheet). Writes gpt2.csv.
set -euo pipefail
BIN=$1
OUT=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
nvidia-smi >/dev/null 2>&1 || { echo "no NVIDIA GPU: skipped"; exit 77; }
B=${SUBDP_GPT2_BATCH:-8}
STEPS=${SUBDP_GPT2_STEPS:-10}
tokens=$OUT/gpt2_tokens.bin
python3 - "$tokens" <<'PY'
import sys
import numpy as np
n = 4_000_000
header = np.zeros(256, dtype=np.int32)
header[:3] = (20240520, 1, n)  # llm.c token shard
with open(sys.argv[1], "wb") as f:
    f.write(header.tobytes())
    f.write(np.random.default_rng(0).integers(0, 50257, n, dtype=np.uint16).tobytes())
PY
cat > "$OUT/gpt2.toml" <<TOML
[model]
name = "gpt"
vocab = 50304
context = 1024
width = 768
heads = 12
depth = 12
[data]
name = "token_shards"
path = "$tokens"
[train]
steps = $((STEPS + 3))
batch_size = $B
eval_every = 1000000
eval_batches = 1
[optim]
name = "adamw"
lr = 1e-4
[log]
every = 1
TOML
"$BIN/subdp" train "$OUT/gpt2.toml" --set device.type=cuda --set log.metrics_file="$OUT/gpt2-subdp.jsonl" \
  > "$OUT/gpt2-subdp.txt"
python3 "$ROOT/benchmarks/gpu/torch_gpt2.py" --batch "$B" --steps "$STEPS" > "$OUT/gpt2-torch.csv"
rm -f "$tokens"
python3 - "$OUT" "$B" <<'PY'
import json, sys
out, B = sys.argv[1], int(sys.argv[2])
steps = [json.loads(l) for l in open(f"{out}/gpt2-subdp.jsonl") if l.strip()][3:]  # after warm-up
step_s = sorted(s["step_time_s"] for s in steps)[len(steps) // 2]
rows = [("subdp-cuda-fp32", B * 1024 / step_s, step_s, None)]
for line in open(f"{out}/gpt2-torch.csv"):
    mode, tps, dt, params = line.strip().split(",")
    rows.append((mode, float(tps), float(dt), int(params)))
params = next(r[3] for r in rows if r[3])
peak = {"fp32": 67e12, "bf16": 989e12, "compile": 989e12}
with open(f"{out}/gpt2.csv", "w") as f:
    f.write("run,tokens_per_s,step_s,mfu\n")
    for name, tps, dt, _ in rows:
        p = peak["fp32"] if name.endswith("fp32") else peak[name.split("-")[-1]]
        f.write(f"{name},{tps:.0f},{dt:.4f},{6 * params * tps / p:.3f}\n")
print(open(f"{out}/gpt2.csv").read())
PY
