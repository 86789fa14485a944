#!/usr/bin/env bash
# Sets up a fresh machine, builds, and runs every test: unit, MPI invariants and faults,
# PyTorch parity (ctest), the CUDA backend on the emulated device and the GPU script rehearsed
# there, then the sanitizer build of the unit tests and a bounded fuzz run.
# SUBDP_QUICK=1 skips the sanitizer and fuzz stages.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
(cd "${SUBDP_BUILD_DIR:-$root/build}" && ctest --output-on-failure --timeout 1200 "$@")
# The CUDA backend's own kernels and the trainer on the emulated device (kernels/emu): about
# 15 minutes on 2 cores (build included), its tests side by side (the emulator is one thread).
echo "== emulated CUDA device: kernels/cuda on kernels/emu (gpu.emu.*)"
emu=${SUBDP_EMU_BUILD_DIR:-$root/build-emu}
cmake -S "$root" -B "$emu" -DCMAKE_BUILD_TYPE=Release -DSUBDP_CUDA=EMULATE >/dev/null
cmake --build "$emu" --target subdp subdp_gpu_tests -j"$(nproc)"
(cd "$emu" && ctest --output-on-failure --timeout 1200 -j"$(nproc)" -R '^gpu[.]emu[.]')
# The script kept for the first GPU (benchmarks/gpu/run.sh), rehearsed on the emulated bundle,
# so that it has not rotted when a device is lent: about 2 minutes.
echo "== benchmarks/gpu/run.sh rehearsed on the emulated device"
SUBDP_GPU_BUILD_DIR=$emu "$root/scripts/gpu_bundle.sh" --emulated >/dev/null
rehearsal=$(mktemp -d "${TMPDIR:-/tmp}/subdp-rehearsal-XXXXXX")
SUBDP_GPU_REHEARSAL=1 SUBDP_GPU_BUNDLE="$root/gpu_bundle/bundle-emulated.tar.xz" \
  "$root/benchmarks/gpu/run.sh" "$rehearsal/out" >"$rehearsal/run.log" 2>&1 ||
  { cat "$rehearsal/run.log"; echo "FAIL: the GPU script's rehearsal (benchmarks/gpu/run.sh)"; exit 1; }
grep -h "GPU test suites" "$rehearsal/out/summary.md"
rm -rf "$rehearsal"
if [[ ${SUBDP_QUICK:-0} != 1 ]]; then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer unit tests"
  "$root/scripts/sanitize.sh"
  echo "== fuzzing the config parser and file readers"
  "$root/scripts/fuzz.sh" "${SUBDP_FUZZ_SECONDS:-15}"
fi
echo "all tests passed"
