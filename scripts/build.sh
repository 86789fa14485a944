#!/usr/bin/env bash
# Configures and builds subdp (Release) into build/ (or $SUBDP_BUILD_DIR). Extra args go to cmake.
# SUBDP_BUILD_TARGET=subdp builds the engine alone (the main job), not the test binaries.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SUBDP_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j"$(nproc)" ${SUBDP_BUILD_TARGET:+--target "$SUBDP_BUILD_TARGET"}
