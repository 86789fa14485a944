#!/usr/bin/env bash
# Sets up a fresh machine, builds, and runs every test: unit, MPI invariants and faults,
# PyTorch parity (ctest), then the sanitizer build of the unit tests and a bounded fuzz run.
# SUBDP_QUICK=1 skips the sanitizer and fuzz stages.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
(cd "${SUBDP_BUILD_DIR:-$root/build}" && ctest --output-on-failure --timeout 1200 "$@")
if [[ ${SUBDP_QUICK:-0} != 1 ]]; then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer unit tests"
  "$root/scripts/sanitize.sh"
  echo "== fuzzing the config parser and file readers"
  "$root/scripts/fuzz.sh" "${SUBDP_FUZZ_SECONDS:-15}"
fi
echo "all tests passed"
