#!/usr/bin/env bash
# Sets up a fresh machine, builds, and runs every test (unit, MPI, parity) through ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "${SUBDP_BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 1200 "$@"
