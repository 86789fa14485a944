#!/usr/bin/env bash
# The communicator's reduce-scatter and all-gather of variable-size segments (issue 24) on
# 1, 3 and 4 ranks, on the world and a subgroup: every segment equals the all-reduce's.
source "$(dirname "$0")/common.sh"
CHECKER=$(dirname "$SUBDP")/subdp_comm_check
for np in 1 3 4; do
  run_ranks_of() { timeout 120 mpirun -np "$1" --oversubscribe --mca btl "$BTL" "$CHECKER"; }
  run_ranks_of $np | grep -v "^\[" || { echo "FAIL: $np ranks"; exit 1; }
done
