#!/usr/bin/env bash
# GPU bench 2 (`bench_2_gpt2.sh BIN_DIR OUT_DIR`): GPT-2 small (12 blocks, width 768, 12 heads,
# context 1024, vocabulary 50304, AdamW) on random tokens: subdp's CUDA backend in float32,
# with bf16 and with TF32 GEMMs ([device] precision = "bf16" / "tf32": tensor-core GEMMs on
# float32 activations, docs/architecture.md) in tokens/s and model FLOP utilisation, next to PyTorch training the same model in the same run
# (torch_gpt2.py: fp32, tf32, bf16 autocast eager, bf16 torch.compile). MFU = (6 N + 6 L C T)
# FLOPs per token (llm.c's formula) * tokens/s / peak, with the H200's dense peaks: 67 TFLOP/s
# fp32, 494 TFLOP/s TF32, 989 TFLOP/s bf16 (NVIDIA's H200 datasheet). Writes gpt2.csv, whose
# note gives the median forward, backward, check and update times on the device (CUDA events:
# the metrics' phases_s) for subdp's rows, and forward, backward and optimizer for PyTorch's.
# Memory columns: peak_bytes (subdp: its tracker's peak, every allocation of its device pool;
# PyTorch: torch.cuda.max_memory_allocated), planned_bytes (subdp plan's total for the same
# run) and device_used_bytes (subdp: the largest total - free the device reported, the CUDA
# context and libraries' own memory included).
set -euo pipefail
BIN=$1
OUT=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
"$BIN/subdp" version | grep -q cuda || { echo "subdp has no CUDA backend: skipped"; exit 77; }
B=${SUBDP_GPT2_BATCH:-8}
STEPS=${SUBDP_GPT2_STEPS:-10}
# GPT-2 small; SUBDP_GPU_REHEARSAL=1 (the emulated device): a tiny GPT of the same code paths,
# and the PyTorch peer on the CPU in float32.
V=50304 T=1024 C=768 H=12 L=12 PEER=(--modes fp32,tf32,bf16,compile) NTOK=1000000
# The peer's python3: the GPU machine's (its PyTorch); in a rehearsal Debian's, which has torch
# where a python3 earlier on the PATH (pyenv) may not.
PEER_PY=python3
if [[ ${SUBDP_GPU_REHEARSAL:-0} == 1 ]]; then
  V=512 T=64 C=64 H=4 L=2 B=2 STEPS=2 PEER=(--modes fp32 --device cpu) NTOK=20000
  [[ -x /usr/bin/python3 ]] && PEER_PY=/usr/bin/python3
fi
tokens=$OUT/gpt2_tokens.bin
# An llm.c token shard (header of 256 int32, then uint16 tokens), without numpy: the shard's
# tokens are uniform random ids below the vocabulary (the step time does not depend on them).
python3 - "$tokens" "$((V < 50257 ? V : 50257))" "$NTOK" <<'PY'
import array, random, sys
path, vocab, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
header = array.array("i", [20240520, 1, n] + [0] * 253)
rng = random.Random(0)
tokens = array.array("H", (rng.randrange(vocab) for _ in range(n)))
with open(path, "wb") as f:
    header.tofile(f)
    tokens.tofile(f)
PY
cat > "$OUT/gpt2.toml" <<TOML
[model]
name = "gpt"
vocab = $V
context = $T
width = $C
heads = $H
depth = $L
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
# Each precision its own guarded run (a failure is a row saying so), the most telling first.
for p in fp32 bf16 tf32; do
  "$BIN/subdp" train "$OUT/gpt2.toml" --set device.type=cuda --set device.precision=$p \
    --set log.metrics_file="$OUT/gpt2-subdp-$p.jsonl" > "$OUT/gpt2-subdp-$p.txt" 2>&1 ||
    echo "subdp precision $p failed: $(tail -n 3 "$OUT/gpt2-subdp-$p.txt")"
  # The planner's bytes for the same run (the plain DP row's total), beside what it measured.
  "$BIN/subdp" plan "$OUT/gpt2.toml" --set device.type=cuda --set device.precision=$p --json \
    > "$OUT/gpt2-plan-$p.json" 2>&1 || echo "subdp plan $p failed: $(tail -n 3 "$OUT/gpt2-plan-$p.json")"
done
# The peer: each mode its own guarded run inside torch_gpt2.py (a failed mode prints a row
# saying so; a peer that cannot start, e.g. without torch, one row "torch" with its last error
# line); LD_LIBRARY_PATH was never set for it (run.sh gives it to subdp's binaries only).
"$PEER_PY" "$ROOT/benchmarks/gpu/torch_gpt2.py" --batch "$B" --steps "$STEPS" --vocab "$V" --context "$T" \
  --width "$C" --heads "$H" --depth "$L" "${PEER[@]}" > "$OUT/gpt2-torch.csv" 2> "$OUT/gpt2-torch.err" ||
  echo "torch,,,failed: $(tail -n 1 "$OUT/gpt2-torch.err" | tr ',' ';')" >> "$OUT/gpt2-torch.csv"
rm -f "$tokens"
python3 - "$OUT" "$B" "$T" "$V" "$C" "$L" <<'PY'
import json, sys
out, B, T, V, C, L = sys.argv[1], *map(int, sys.argv[2:7])
def median_step(precision):
    """The median step (by time) after the 3 warm-up steps of subdp's run in `precision`; None
    when the run failed (its log says why)."""
    try:
        path = f"{out}/gpt2-subdp-{precision}.jsonl"
        steps = [r for r in map(json.loads, filter(str.strip, open(path))) if "event" not in r][3:]
        return sorted(steps, key=lambda s: s["step_time_s"])[len(steps) // 2]
    except (OSError, ValueError, IndexError):
        return None
subdp = {p: median_step(p) for p in ("fp32", "bf16", "tf32")}
def memory(precision):
    """(the tracker's peak bytes, the planner's, the device's largest total - free) of subdp's
    run in `precision`; None for what is missing."""
    def read(f, default=None):
        try:
            return f()
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            return default
    rows = read(lambda: [json.loads(l) for l in open(f"{out}/gpt2-subdp-{precision}.jsonl") if l.strip()], [])
    final = next((r for r in rows if r.get("event") == "final"), {})
    used = [r["device_used_bytes"] for r in rows if "device_used_bytes" in r]
    planned = read(lambda: json.load(open(f"{out}/gpt2-plan-{precision}.json"))["dp"]["total"])
    return final.get("peak_bytes"), planned, max(used) if used else None
def phase_note(precision):
    """Median milliseconds of each phase after the warm-up, timed by CUDA events on the
    device (the metrics' phases_s and previous_phases_s, docs/outputs.md); "" when absent."""
    try:
        path = f"{out}/gpt2-subdp-{precision}.jsonl"
        steps = [r for r in map(json.loads, filter(str.strip, open(path))) if "event" not in r][3:]
    except (OSError, ValueError):
        return ""
    cells = []
    for group, name in (("phases_s", "forward"), ("phases_s", "backward"), ("previous_phases_s", "check"),
                        ("previous_phases_s", "update")):
        values = sorted(r[group][name] for r in steps if name in r.get(group, {}))
        if values:
            cells.append(f"{name} {values[len(values) // 2] * 1e3:.2f} ms")
    return "device: " + "; ".join(cells) if cells else ""
mid = next((m for m in subdp.values() if m), None)
# MFU by llm.c's formula (train_gpt2.cu, gpt2_estimate_mfu): 6 N + 6 L C T FLOPs per token,
# N the parameters of this GPT (tied head; per block 12 C^2 + 13 C with biases and two
# LayerNorms; embeddings V C + T C; final LayerNorm 2 C), over the dense peak of the H200's
# datasheet: 67 TFLOP/s fp32, 494 TFLOP/s TF32 (dense), 989 TFLOP/s bf16. The engine's own
# count of the same step's FLOPs is printed beside it, for comparison.
peak = {"fp32": 67e12, "tf32": 494e12, "bf16": 989e12, "compile": 989e12}
N = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
flops_per_token = 6 * N + 6 * L * C * T
if mid:
    print(f"llm.c FLOPs per token {flops_per_token:.4g}, the engine's {mid['flops'] / (B * T):.4g}")
nan = float("nan")
rows = [(f"subdp-cuda-{p}", B * T / m["step_time_s"] if m else nan, m["step_time_s"] if m else nan, memory(p),
         phase_note(p) if m else "failed: see gpt2-subdp-" + p + ".txt") for p, m in subdp.items()]
for line in open(f"{out}/gpt2-torch.csv"):
    mode, tps, dt, note, phases, peak_bytes = (line.strip().split(",") + [""] * 6)[:6]
    note = f"params {note}" + (f"; device: {phases}" if phases else "") if note.isdigit() else note
    rows.append((mode, float(tps or "nan"), float(dt or "nan"), (int(peak_bytes or 0) or None, None, None), note))
cell = lambda v: "" if v is None else str(v)
with open(f"{out}/gpt2.csv", "w") as f:
    f.write("run,tokens_per_s,step_s,mfu,ratio_vs_subdp,peak_bytes,planned_bytes,device_used_bytes,note\n")
    for name, tps, dt, mem, note in rows:
        p = peak.get(name.split("-")[-1], nan)
        f.write(f"{name},{tps:.0f},{dt:.4f},{flops_per_token * tps / p:.3f},{tps / rows[0][1]:.3f},"
                f"{','.join(cell(v) for v in mem)},{note}\n")
print(open(f"{out}/gpt2.csv").read())
PY
