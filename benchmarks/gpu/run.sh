#!/usr/bin/env bash
# GPU check of the CUDA backend, made for the GPU machine: 5 minutes of device time, at most
# 64 MiB carried in, at most 8 files back, none of our Debian packages there, and CUDA's
# libraries perhaps only inside PyTorch's wheels.
#
# Input: gpu_bundle/bundle.tar.xz (scripts/gpu_bundle.sh: subdp and subdp_gpu_tests built here
# for sm_90, with every library they load except the C runtime and CUDA's). Without it, it
# configures and builds with -DSUBDP_CUDA=ON into build-gpu (minutes of the budget).
# Steps, each its own process under its own time limit, in this order:
#   device      nvidia-smi
#   unpack      the bundle
#   preflight   ldd on each binary with the bundle's libraries; a CUDA library the toolkit
#               lacks is looked for in PyTorch's wheels (site-packages/nvidia/*/lib,
#               torch/lib); what is still missing is named and the tests stop there
#   tests:SUITE each GPU test suite alone (a sticky CUDA error or a hang costs one suite),
#               a 1 GiB device pool each, the NCCL suite (DeviceTest) last
#   bench_*     benchmarks/gpu/bench_*.sh BIN_DIR OUT_DIR (GPT-2 small's GEMMs in each operand
#               type and its attention against PyTorch's SDPA, CPU-vs-CUDA training, GPT-2
#               small against PyTorch)
#   sanitize:*  compute-sanitizer racecheck and synccheck on the tensor-core attention tests,
#               with the time left (not in a rehearsal)
# LD_LIBRARY_PATH is set for subdp's binaries alone, through wrappers in a bin folder the
# benchmarks get, so python3 (the PyTorch peer) loads its own libraries.
# Output in OUT_DIR, 6 files at most: summary.md, logs.tar.gz (every log, the tests' XML and
# the benchmarks' raw files), train.csv, memory.csv, gpt2.csv, gemm.csv (those the benchmarks
# wrote; gemm.csv's table of gains in summary.md).
#
# On the GPU machine (the device tool): first `scripts/gpu_bundle.sh` here, then one call that
# carries ["gpu_bundle/bundle.tar.xz"] and runs `benchmarks/gpu/run.sh "$OUT"` with a limit of
# about 360 s; the 6 files come back. Rehearsed here on the emulated device:
#   scripts/gpu_bundle.sh --emulated
#   SUBDP_GPU_REHEARSAL=1 SUBDP_GPU_BUNDLE=gpu_bundle/bundle-emulated.tar.xz benchmarks/gpu/run.sh /tmp/out
# Usage: benchmarks/gpu/run.sh [OUT_DIR]      (default: $OUT)
# Environment: SUBDP_GPU_BUDGET_S (300), SUBDP_GPU_BUNDLE (gpu_bundle/bundle.tar.xz),
#   SUBDP_GPU_BUILD (build-gpu), SUBDP_CUDA_ARCHS (90-real), SUBDP_CUDA_SYNC_LAUNCHES=1
#   (every launch waits for its kernel: a fault names its launch), SUBDP_GPU_REHEARSAL=1
#   (an emulated bundle, scripts/gpu_bundle.sh --emulated, on a machine without a GPU: small
#   shapes, nvidia-smi skipped, the PyTorch peer on the CPU).
# Exit: 0 when every step that ran passed, 1 otherwise, 2 on bad usage.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT_DIR=${1:-${OUT:-}}
if [ -z "$OUT_DIR" ]; then
  echo "usage: $0 OUT_DIR (or set OUT)" >&2
  exit 2
fi
mkdir -p "$OUT_DIR"
BUDGET=${SUBDP_GPU_BUDGET_S:-300}
BUNDLE=${SUBDP_GPU_BUNDLE:-$ROOT/gpu_bundle/bundle.tar.xz}
BUILD=${SUBDP_GPU_BUILD:-$ROOT/build-gpu}
ARCHS=${SUBDP_CUDA_ARCHS:-90-real}
START=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/subdp-gpu-XXXXXX")
LOGS=$WORK/logs  # packed into OUT_DIR/logs.tar.gz at the end
mkdir -p "$LOGS"
ROWS=()     # "step|status|seconds|log"
SKIPPED=()  # what did not run, and why
FAILED=0

left() { echo $((BUDGET - ($(date +%s) - START))); }

# run_step NAME CAP_S LOG CMD...: CMD under min(CAP_S, time left - 10 s), output appended to
# LOGS/LOG. Sets STEP_RC; records a summary row. Exit 77 counts as skipped, 124/137 as timed out.
run_step() {
  local name=$1 cap=$2 log=$3
  shift 3
  local limit
  limit=$(($(left) - 10))
  [ "$limit" -gt "$cap" ] && limit=$cap
  if [ "$limit" -lt 5 ]; then
    SKIPPED+=("$name: out of time (budget ${BUDGET}s)")
    ROWS+=("$name|skipped (no time)|0|-")
    STEP_RC=124
    return
  fi
  local t0=$SECONDS status
  echo "== $name (limit ${limit}s): $*" >>"$LOGS/$log"
  timeout --kill-after=5 "$limit" "$@" >>"$LOGS/$log" 2>&1
  STEP_RC=$?
  case $STEP_RC in
    0) status=ok ;;
    77) if [ "$GPU_PRESENT" -eq 1 ]; then  # a skip on the GPU machine: the device was not usable
          status="skipped on a GPU machine (device not usable?)"; FAILED=1
        else
          status=skipped; SKIPPED+=("$name: reported skip (see $log)")
        fi ;;
    124 | 137) status="timed out (${limit}s)"; FAILED=1 ;;
    *) status="failed (rc $STEP_RC)"; FAILED=1 ;;
  esac
  ROWS+=("$name|$status|$((SECONDS - t0))|$log")
  echo "[$name] $status in $((SECONDS - t0))s"
  if [ "$STEP_RC" -ne 0 ] && [ "$STEP_RC" -ne 77 ]; then tail -n 15 "$LOGS/$log"; fi
}

skip_step() {
  ROWS+=("$1|skipped|0|-")
  SKIPPED+=("$1: $2")
}

# Folders that may hold CUDA's libraries: the toolkit's, then PyTorch's wheels.
cuda_lib_dirs() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && echo "$d"
  done
  env -u LD_LIBRARY_PATH python3 - <<'PY' 2>/dev/null
import glob, os, site, sys
roots = set(site.getsitepackages() + [site.getusersitepackages()] + [p for p in sys.path if p.endswith("-packages")])
for root in sorted(roots):
    for d in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib")) + glob.glob(os.path.join(root, "torch", "lib"))):
        print(d)
PY
}

# preflight BIN...: LIBPATH becomes the bundle's lib folder plus each folder that supplies a
# library ldd cannot find; fails naming what no folder has.
preflight() {
  local bin name dir missing=()
  local dirs
  dirs=$(cuda_lib_dirs)
  echo "folders searched for CUDA's libraries:"; echo "$dirs" | sed 's/^/  /'
  for bin in "$@"; do
    for name in $(LD_LIBRARY_PATH=$LIBPATH ldd "$bin" | awk '/not found/ {print $1}'); do
      local found=""
      for dir in $dirs; do
        if [ -e "$dir/$name" ]; then found=$dir; break; fi
      done
      if [ -n "$found" ]; then
        echo "$(basename "$bin"): $name from $found"
        case ":$LIBPATH:" in *":$found:"*) ;; *) LIBPATH=${LIBPATH:+$LIBPATH:}$found ;; esac
      else
        missing+=("$(basename "$bin"): $name")
      fi
    done
  done
  # A library found above may need others: what ldd still cannot find is missing too.
  for bin in "$@"; do
    for name in $(LD_LIBRARY_PATH=$LIBPATH ldd "$bin" | awk '/not found/ {print $1}'); do
      case " ${missing[*]-} " in *" $(basename "$bin"): $name "*) ;; *) missing+=("$(basename "$bin"): $name") ;; esac
    done
  done
  echo "LD_LIBRARY_PATH for subdp: $LIBPATH"
  for bin in "$@"; do LD_LIBRARY_PATH=$LIBPATH ldd "$bin" | grep -E "cuda|cublas|nccl|cudnn" | sed "s|^|$(basename "$bin"): |"; done
  if [ ${#missing[@]} -gt 0 ]; then
    printf 'missing (in no folder searched): %s\n' "${missing[@]}"
    return 1
  fi
}

# 1. The device.
GPU_PRESENT=0
command -v nvidia-smi >/dev/null && GPU_PRESENT=1
if [ "$GPU_PRESENT" -eq 1 ]; then
  run_step device 20 device.log nvidia-smi
else
  skip_step device "nvidia-smi not found"
fi

# 2. The binaries: the bundle when present, else configure and build.
READY=1
if [ -f "$BUNDLE" ]; then
  UNPACKED=$WORK/bundle
  mkdir -p "$UNPACKED"
  run_step unpack 30 build.log tar -C "$UNPACKED" -xJf "$BUNDLE"
  [ "$STEP_RC" -eq 0 ] || READY=0
  BIN=$UNPACKED/bin
  LIBPATH=$UNPACKED/lib
else
  GEN=()
  command -v ninja >/dev/null && [ ! -f "$BUILD/CMakeCache.txt" ] && GEN=(-G Ninja)
  run_step configure 60 build.log cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DSUBDP_CUDA=ON \
    -DCMAKE_BUILD_TYPE=Release "-DSUBDP_CUDA_ARCHITECTURES=$ARCHS"
  [ "$STEP_RC" -eq 0 ] && run_step build 240 build.log cmake --build "$BUILD" -j "$(nproc)" --target subdp_gpu_tests \
    subdp subdp_gpu_gemm_bench
  [ "$STEP_RC" -eq 0 ] || READY=0
  mkdir -p "$WORK/built"
  cp "$BUILD/subdp" "$BUILD/tests/gpu/subdp_gpu_tests" "$BUILD/subdp_gpu_gemm_bench" "$WORK/built/" 2>/dev/null
  BIN=$WORK/built
  LIBPATH=""
fi

# 3. Preflight, and wrappers that give LD_LIBRARY_PATH to subdp's binaries alone.
WRAP=$WORK/wrap
mkdir -p "$WRAP"
if [ "$READY" -eq 1 ]; then
  export -f preflight cuda_lib_dirs
  export LIBPATH
  run_step preflight 30 preflight.log bash -c 'preflight "$@"' preflight "$BIN/subdp" "$BIN/subdp_gpu_tests" \
    "$BIN/subdp_gpu_gemm_bench"
  [ "$STEP_RC" -eq 0 ] || READY=0
  LIBPATH=$(sed -n 's/^LD_LIBRARY_PATH for subdp: //p' "$LOGS/preflight.log" | tail -1)
  for b in subdp subdp_gpu_tests subdp_gpu_gemm_bench; do
    printf '#!/bin/bash\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$LIBPATH" "$BIN/$b" >"$WRAP/$b"
    chmod +x "$WRAP/$b"
  done
else
  skip_step preflight "nothing to check (unpack or build failed)"
fi

# 4. GPU tests, one process per suite, the NCCL suite last.
TESTS_OK=0 TESTS_FAILED=0
if [ "$READY" -eq 1 ]; then
  SUITES=$("$WRAP/subdp_gpu_tests" --gtest_list_tests 2>/dev/null | sed -n 's/^\([A-Za-z0-9_/]*\)\.$/\1/p' |
    grep -v '^DeviceTest$'; "$WRAP/subdp_gpu_tests" --gtest_list_tests 2>/dev/null | grep -q '^DeviceTest\.$' && echo DeviceTest)
  if [ -z "$SUITES" ]; then
    ROWS+=("gpu_tests|failed (no test suite listed: the binary did not start?)|0|gpu_tests.log")
    FAILED=1
  fi
  for suite in $SUITES; do
    run_step "tests:$suite" 60 gpu_tests.log env SUBDP_CUDA_POOL_GB=1 "$WRAP/subdp_gpu_tests" \
      "--gtest_filter=$suite.*" "--gtest_output=xml:$LOGS/tests-$suite.xml"
    case $STEP_RC in 0) TESTS_OK=$((TESTS_OK + 1)) ;; 77) ;; *) TESTS_FAILED=$((TESTS_FAILED + 1)) ;; esac
  done
else
  skip_step gpu_tests "nothing to run (see preflight)"
fi

# 5. GPU benchmarks: each gets the wrappers' folder as BIN_DIR, and its own limit.
for b in "$ROOT"/benchmarks/gpu/bench_*.sh; do
  [ -x "$b" ] || continue
  name=$(basename "$b" .sh)
  if [ "$READY" -ne 1 ]; then skip_step "$name" "nothing built"; continue; fi
  cap=90
  [[ $name == *gemm* ]] && cap=60   # about 5 s of GEMMs and attention on an H100, the rest allocation, upload and PyTorch's import
  [[ $name == *gpt2* ]] && cap=190  # three subdp runs (fp32, bf16, tf32) and four PyTorch modes
  run_step "$name" "$cap" bench.log "$b" "$WRAP" "$LOGS"
done

# 6. With the time left: compute-sanitizer's racecheck (shared-memory hazards) and synccheck
# (barriers) on the tensor-core attention, whose cp.async and ldmatrix the emulator checks by
# its own model of them (NaN until a copy's wait, warps run apart between barriers); a GPU's
# hardware view is the second opinion. Last, so that nothing above waits for it.
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ "$READY" -ne 1 ]; then
  skip_step sanitize "nothing built"
elif [ -z "$SANITIZER" ] || [ -n "${SUBDP_GPU_REHEARSAL:-}" ]; then
  skip_step sanitize "no compute-sanitizer here (or a rehearsal on the emulated device)"
else
  for tool in racecheck synccheck; do
    run_step "sanitize:$tool" 30 sanitize.log env SUBDP_CUDA_POOL_GB=1 "$SANITIZER" --tool "$tool" \
      --target-processes all --error-exitcode 1 "$WRAP/subdp_gpu_tests" '--gtest_filter=LayerKernels.TensorCoreAttention*'
  done
fi

# 7. Summary, and the results packed into at most 6 files.
for csv in train.csv memory.csv gpt2.csv gemm.csv; do [ -f "$LOGS/$csv" ] && cp "$LOGS/$csv" "$OUT_DIR/"; done
{
  echo "# subdp GPU check"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "none (nvidia-smi absent)")"
  echo "- subdp: $("$WRAP/subdp" version 2>/dev/null | sed -n 2p || echo unknown)"
  echo "- binaries: $([ -f "$BUNDLE" ] && echo "bundle $(basename "$BUNDLE")" || echo "built here ($ARCHS)"), total time: $(($(date +%s) - START)) s of ${BUDGET} s"
  echo "- GPU test suites: $TESTS_OK passed, $TESTS_FAILED failed (per test: logs.tar.gz, tests-*.xml)"
  for csv in train.csv memory.csv gpt2.csv; do
    [ -f "$OUT_DIR/$csv" ] && { echo; echo "$csv:"; echo '```'; cat "$OUT_DIR/$csv"; echo '```'; }
  done
  [ -f "$LOGS/gemm_summary.md" ] && { echo; cat "$LOGS/gemm_summary.md"; }  # gemm.csv in full: its own file
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
  grep -h -E "^\[  FAILED  \]" "$LOGS/gpu_tests.log" 2>/dev/null | sort -u | sed 's/^/    /' | head -40 |
    { IFS= read -r first && { echo; echo "Failed tests:"; echo "$first"; cat; }; }
} >"$OUT_DIR/summary.md"
tar -C "$WORK" -czf "$OUT_DIR/logs.tar.gz" logs
rm -rf "$WORK"
cat "$OUT_DIR/summary.md"
exit $FAILED
