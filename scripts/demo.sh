#!/usr/bin/env bash
# Main job: sets up a fresh machine, builds, and trains the ResNet on Fashion-MNIST with
# subnetwork data parallelism (forward masking, block level, keep 0.5, S = 4) on 4 MPI ranks.
# Extra arguments go to `subdp train` (e.g. --set train.epochs=1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
SUBDP_BUILD_TARGET=subdp "$root/scripts/build.sh"  # the engine alone: the tests are scripts/test.sh's
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ranks=${SUBDP_RANKS:-4}
mkdir -p "$root/runs"
cd "$root"
exec mpirun -np "$ranks" --oversubscribe --bind-to none --mca btl self,vader \
  "${SUBDP_BUILD_DIR:-$root/build}/subdp" train configs/resnet_fmnist_sdp.toml \
  --set log.metrics_file="runs/resnet_fmnist_sdp.rank{rank}.jsonl" "$@"
