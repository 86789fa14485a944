#!/usr/bin/env bash
# GPU check of the CUDA backend, for a machine with an NVIDIA GPU. With gpu_bundle/bundle.tar.xz
# present (scripts/gpu_bundle.sh, made on a machine with our packages: the GPU machine has none
# of them) it unpacks that prebuilt binary and its libraries; otherwise it configures and
# builds with -DSUBDP_CUDA=ON into build-gpu. Then it runs the GPU tests (subdp_gpu_tests: every
# kernel and a training step of every model and regime against the CPU backend) and every GPU
# benchmark present (benchmarks/gpu/bench_*, each run as `bench BIN_DIR OUT_DIR`, BIN_DIR
# holding subdp). Logs and summary.md go to OUT_DIR; the whole run keeps within a budget of 8
# minutes, and what it skipped (and why) is printed at the end.
#
# Usage: benchmarks/gpu/run.sh [OUT_DIR]      (default: $OUT)
# Environment: SUBDP_GPU_BUDGET_S (480), SUBDP_GPU_BUILD (<repo>/build-gpu),
#              SUBDP_CUDA_ARCHS (90-real: the H100 / H200 only, half the nvcc time).
# Exit: 0 when every step that ran passed, 1 otherwise, 2 on bad usage.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT_DIR=${1:-${OUT:-}}
if [ -z "$OUT_DIR" ]; then
  echo "usage: $0 OUT_DIR (or set OUT)" >&2
  exit 2
fi
mkdir -p "$OUT_DIR"
BUILD=${SUBDP_GPU_BUILD:-$ROOT/build-gpu}
BUDGET=${SUBDP_GPU_BUDGET_S:-480}
ARCHS=${SUBDP_CUDA_ARCHS:-90-real}
JOBS=$(nproc 2>/dev/null || echo 4)
START=$(date +%s)
ROWS=()     # "step|status|seconds|log"
SKIPPED=()  # what did not run, and why
FAILED=0

left() { echo $((BUDGET - ($(date +%s) - START))); }

# run_step NAME LOG CMD...: runs CMD with the time left, appending to OUT_DIR/LOG.
# Sets STEP_RC; records a summary row. Exit 77 counts as skipped, 124 as timed out.
run_step() {
  local name=$1 log=$2
  shift 2
  local remaining
  remaining=$(left)
  if [ "$remaining" -lt 15 ]; then
    SKIPPED+=("$name: out of time (budget ${BUDGET}s)")
    ROWS+=("$name|skipped (no time)|0|-")
    STEP_RC=124
    return
  fi
  local t0=$SECONDS
  echo "== $name: $*" >>"$OUT_DIR/$log"
  timeout --kill-after=10 "$remaining" "$@" >>"$OUT_DIR/$log" 2>&1
  STEP_RC=$?
  local dt=$((SECONDS - t0)) status
  case $STEP_RC in
    0) status=ok ;;
    77) status=skipped; SKIPPED+=("$name: reported skip (see $log)") ;;
    124 | 137) status="timed out"; FAILED=1 ;;
    *) status="failed (rc $STEP_RC)"; FAILED=1 ;;
  esac
  ROWS+=("$name|$status|$dt|$log")
  echo "[$name] $status in ${dt}s (log: $OUT_DIR/$log)"
  if [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 77 ]; then tail -n 25 "$OUT_DIR/$log"; fi
}

skip_step() {
  ROWS+=("$1|skipped|0|-")
  SKIPPED+=("$1: $2")
}

# 1. The device.
if command -v nvidia-smi >/dev/null; then
  run_step device device.log nvidia-smi
else
  skip_step device "nvidia-smi not found"
fi

# 2. The binaries: the bundle when present, else configure and build (Ninja when present).
BENCHES=()
for b in "$ROOT"/benchmarks/gpu/bench_*.sh; do
  [ -x "$b" ] && BENCHES+=("$b")
done
BUNDLE=$ROOT/gpu_bundle/bundle.tar.xz
if [ -f "$BUNDLE" ]; then
  UNPACKED=${TMPDIR:-/tmp}/subdp-gpu-bundle
  rm -rf "$UNPACKED" && mkdir -p "$UNPACKED"
  run_step unpack build.log tar -C "$UNPACKED" -xJf "$BUNDLE"
  BUILT=$STEP_RC
  BIN=$UNPACKED/bin
  GPU_TESTS=$BIN/subdp_gpu_tests
  export LD_LIBRARY_PATH="$UNPACKED/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
else
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  [ -f "$BUILD/CMakeCache.txt" ] && GEN=()  # an existing build dir keeps its generator
  run_step configure configure.log cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DSUBDP_CUDA=ON \
    -DCMAKE_BUILD_TYPE=Release "-DSUBDP_CUDA_ARCHITECTURES=$ARCHS"
  CONFIGURED=$STEP_RC
  if [ "$CONFIGURED" -eq 0 ]; then
    run_step build build.log cmake --build "$BUILD" -j "$JOBS" --target subdp_gpu_tests subdp
    BUILT=$STEP_RC
  else
    skip_step build "configure failed (missing packages? make gpu_bundle/ with scripts/gpu_bundle.sh)"
    BUILT=1
  fi
  BIN=$BUILD
  GPU_TESTS=$BUILD/tests/gpu/subdp_gpu_tests
fi

# 3. GPU tests.
TESTS_LINE="-"
if [ "$BUILT" -eq 0 ]; then
  run_step gpu_tests gpu_tests.log "$GPU_TESTS" \
    "--gtest_output=xml:$OUT_DIR/gpu_tests.xml"
  TESTS_LINE=$(grep -oE "^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?" "$OUT_DIR/gpu_tests.log" |
    sed -E 's/[][]//g; s/ +/ /g; s/^ //' | paste -sd ',' -)
else
  skip_step gpu_tests "nothing built"
fi

# 4. GPU benchmarks, when present.
if [ ${#BENCHES[@]} -eq 0 ]; then
  skip_step gpu_benchmarks "none present (benchmarks/gpu/bench_*.sh)"
elif [ "$BUILT" -ne 0 ]; then
  skip_step gpu_benchmarks "nothing built"
else
  for b in "${BENCHES[@]}"; do
    run_step "$(basename "$b" .sh)" bench.log "$b" "$BIN" "$OUT_DIR"
  done
fi

# 5. Summary.
{
  echo "# subdp GPU check"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo none)"
  echo "- binaries: $([ -f "$BUNDLE" ] && echo "gpu_bundle (prebuilt)" || echo "built here ($ARCHS)"), total time: $(($(date +%s) - START)) s of ${BUDGET} s"
  echo "- GPU tests: ${TESTS_LINE}"
  for csv in train.csv memory.csv gpt2.csv; do
    [ -f "$OUT_DIR/$csv" ] && { echo; echo "$csv:"; echo '```'; cat "$OUT_DIR/$csv"; echo '```'; }
  done
  echo
  echo "| step | status | seconds | log |"
  echo "| --- | --- | --- | --- |"
  for r in "${ROWS[@]}"; do
    IFS='|' read -r a b c d <<<"$r"
    echo "| $a | $b | $c | $d |"
  done
  if [ ${#SKIPPED[@]} -gt 0 ]; then
    echo
    echo "Skipped:"
    for s in "${SKIPPED[@]}"; do echo "- $s"; done
  fi
} >"$OUT_DIR/summary.md"
cat "$OUT_DIR/summary.md"
exit $FAILED
