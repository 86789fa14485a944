#!/usr/bin/env bash
# Builds the unit tests with AddressSanitizer + UndefinedBehaviorSanitizer (CPU only, in
# build-asan/) and runs them; any sanitizer report fails the run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SUBDP_ASAN_DIR:-$root/build-asan}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DSUBDP_SANITIZE=ON -DSUBDP_CUDA=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target subdp_tests
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$root/tests/lsan.supp OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
"$build/tests/subdp_tests" --gtest_brief=1
