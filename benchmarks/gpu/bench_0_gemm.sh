#!/usr/bin/env bash
# GPU bench 0 (`bench_0_gemm.sh BIN_DIR OUT_DIR`): GPT-2 small's GEMMs on the CUDA backend's
# own calls (subdp_gpu_gemm_bench, benchmarks/gpu/gemm_bench.cpp), to decide whether bf16
# operands stored in memory are worth their refactor: today precision = "bf16" hands cuBLAS
# float32 operands that it rounds as it loads them. Writes gemm.csv (every row) and
# gemm_summary.md (per layer and pass: milliseconds in each mode, and what storing bf16
# operands would gain against today's bf16, with and without converting the activation first).
# Its last rows time attention's forward and backward (f32 fp32: CUDA cores, what precision
# fp32 runs; f32 bf16: tensor cores, what precision bf16 runs; backward from the forward's kept
# statistics, backward-recompute without them) and PyTorch's (column PyTorch).
# SUBDP_GPU_REHEARSAL=1: the small shapes, for the emulated device.
set -euo pipefail
BIN=$1
OUT=$2
[[ -x $BIN/subdp_gpu_gemm_bench ]] || { echo "no subdp_gpu_gemm_bench in $BIN: skipped"; exit 77; }
SIZE=()
# PyTorch's causal attention at the same shape (torch_attention.py, bf16 SDPA on the GPU), in
# the python3 bench_2_gpt2.sh uses; in a rehearsal Debian's torch on the CPU at the small shape.
PEER_PY=python3 PEER=()
if [[ ${SUBDP_GPU_REHEARSAL:-0} == 1 ]]; then
  SIZE=(--small)
  PEER=(--batch 2 --context 128 --heads 2 --device cpu)
  [[ -x /usr/bin/python3 ]] && PEER_PY=/usr/bin/python3
fi
"$BIN/subdp_gpu_gemm_bench" "${SIZE[@]}" --reps 10 > "$OUT/gemm.csv"
timeout 25 "$PEER_PY" "$(dirname "$0")/torch_attention.py" "${PEER[@]}" --reps 10 >>"$OUT/gemm.csv" || true
python3 - "$OUT/gemm.csv" > "$OUT/gemm_summary.md" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
ms = {(r["layer"], r["pass"], r["operands"], r["math"], r["out"]): float(r["ms"]) for r in rows}
print("GEMMs of GPT-2 small's layers (ms per call, shapes in gemm.csv; f32 = float32 operands as subdp passes them today, "
      "bf16 = operands stored in bf16; gain = today's bf16 over stored bf16, and over stored bf16 "
      "plus converting the activation operand; attention: CUDA cores under fp32, tensor cores under bf16, "
      "subdp's backward from the forward's kept log-sum-exp and output as PyTorch's, backward-recompute "
      "with the forward run again for them, as a layer keeping only some output columns runs it):")
print()
print("| layer | pass | f32 fp32 | f32 tf32 | f32 bf16 (today) | bf16 stored | convert | gain | gain with convert | PyTorch |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
torch_ms = {(r["layer"], r["pass"]): f'{float(r["ms"]):.3f} ({r["math"]}, {r["operands"]})'
            for r in rows if r["math"].startswith("torch-")}
for layer, p in dict.fromkeys((r["layer"], r["pass"]) for r in rows):
    get = lambda *k: ms.get((layer, p) + k)
    today, stored, conv = get("f32", "bf16", "f32"), get("bf16", "bf16", "f32"), get("f32->bf16", "convert", "bf16")
    cells = [get("f32", "fp32", "f32"), get("f32", "tf32", "f32"), today, stored, conv]
    gain = f"{today / stored:.2f}x" if today and stored else "-"
    gain_conv = f"{today / (stored + conv):.2f}x" if today and stored and conv is not None else "-"
    peer = torch_ms.get((layer, p), "-")
    print(f"| {layer} | {p} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + f" | {gain} | {gain_conv} | {peer} |")
PY
cat "$OUT/gemm_summary.md"
