#!/usr/bin/env bash
# Layers and models call device operations through engine/core/backend.h only: no file in
# models/ or engine/layers/ includes a kernels/cpu or kernels/cuda header or names a
# backend's namespace or a device (issue 23, "one backend under every layer"); kernels/fenced
# included; and nothing below the command line includes engine/cli.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
hits=$(grep -rnE '#include "kernels/(cpu|cuda|fenced)/|\b(cpu|cuda|fenced)::|cudaStream|Device::' "$root/models" \
  "$root/engine/layers" || true)
hits+=$(grep -rn --include='*.cpp' --include='*.h' '#include "engine/cli/' "$root/engine" "$root/models" "$root/kernels" |
  grep -v "^$root/engine/cli/" || true)
if [[ -n $hits ]]; then
  echo "FAIL: layers or models bypass the backend interface:"
  echo "$hits"
  exit 1
fi
echo "ok: models/ and engine/layers/ reach kernels through engine/core/backend.h only; engine/cli is included by nothing below it"
