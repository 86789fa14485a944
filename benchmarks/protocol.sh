#!/usr/bin/env bash
# The comparison protocol of issue 25 at its full scale, resumable across sessions:
#   resnet: configs/resnet_fmnist.toml, W = 4, budget 3 epochs of DP (351 steps of 128 per rank)
#   gpt:    configs/gpt_brown.toml,     W = 4, budget 600 steps of DP (batch 16 per rank)
#   llama:  configs/llama_brown.toml,   W = 4, budget 600 steps of DP (batch 16 per rank)
# DP, stochastic depth, forward and backward masking at block and neuron level at keep 0.5,
# forward block at keep 0.25, forward block with zero-initialised residual branches
# (fwd-block+zir), FLOP-matched and step-matched, 3 seeds; forward block with the plan re-dealt
# every 50 and 200 steps (FLOP-matched; not for the LLaMA). Then benchmarks/protocol_table.py merges
# both budgets into benchmarks/results/<model>_table/table.md.
#
# Usage: benchmarks/protocol.sh resnet|gpt|llama [--finished-only]
#   --finished-only  train nothing: summarise what has finished (compare.py --finished-only)
# Environment: SUBDP_BINARY (default build/subdp), SUBDP_BINARY_COMMIT (the commit it was built
# from; default: SUBDP_BINARY.commit beside a copy, else HEAD for build/subdp). Point
# SUBDP_BINARY at a private copy outside the repository so that rebuilding build/ does not
# change a running table: cp build/subdp DIR/subdp-table && git rev-parse HEAD >DIR/subdp-table.commit.
# The results record it as build/subdp with that commit (compare.py), never its path; --reuse
# keeps a finished run while its recorded command is unchanged.
# Stopping: SIGTERM to the running compare.py (not to this script, which then just ends):
# the run in flight stops at its next step with a checkpoint (every 50 steps otherwise),
# and the same protocol.sh later resumes it bit for bit (compare.py --checkpoint-every).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-}
finished=()
case ${2:-} in
  "") ;;
  --finished-only) finished=(--finished-only) ;;
  # Anything else (a typo, --help) would otherwise start hours of 4-rank training.
  *) echo "benchmarks/protocol.sh: unknown option '$2' (expected --finished-only)" >&2
     echo "usage: benchmarks/protocol.sh resnet|gpt|llama [--finished-only]" >&2; exit 2 ;;
esac
(($# <= 2)) || { echo "benchmarks/protocol.sh: too many arguments (expected at most 2)" >&2; exit 2; }
binary=${SUBDP_BINARY:-$root/build/subdp}
case $model in
  resnet) config=configs/resnet_fmnist.toml; steps=351; stem=resnet_fmnist ;;
  gpt) config=configs/gpt_brown.toml; steps=600; stem=gpt_brown; "$root/scripts/get_brown.sh" >/dev/null ;;
  llama) config=configs/llama_brown.toml; steps=600; stem=llama_brown; "$root/scripts/get_brown.sh" >/dev/null ;;
  *) echo "usage: benchmarks/protocol.sh resnet|gpt|llama [--finished-only]" >&2; exit 2 ;;
esac
cd "$root"
results=$root/benchmarks/results
common=(--world 4 --keep 0.5 --steps "$steps" --seeds 3 --evals 3 --reuse --checkpoint-every 50 --binary "$binary"
        --binary-commit "${SUBDP_BINARY_COMMIT:-}"
        --mpirun-args "--oversubscribe --bind-to none --mca btl self,vader" "${finished[@]}")
masked=fwd-block,bwd-block,stoch-depth,fwd-neuron,bwd-neuron,fwd-block@0.25,fwd-block+zir
redeal=,fwd-block+redeal50,fwd-block+redeal200
[[ $model == llama ]] && redeal=""  # the re-dealing rows answer a GPT / ResNet question once
/usr/bin/python3 benchmarks/compare.py "$config" "${common[@]}" --match flops \
  --regimes "dp,$masked$redeal" --out "$results/${stem}_table_flops"
# DP trains its 351 / 600 steps under both budgets: protocol_table.py takes its runs from the
# FLOP-matched folder.
# Under --finished-only a budget with no finished run yet is left out of the table.
/usr/bin/python3 benchmarks/compare.py "$config" "${common[@]}" --match steps \
  --regimes "$masked" --out "$results/${stem}_table_steps" || [[ ${#finished[@]} -gt 0 ]]
folders=()
for budget in flops steps; do
  if [[ -f $results/${stem}_table_$budget/runs.csv ]]; then folders+=("$results/${stem}_table_$budget"); fi
done
/usr/bin/python3 benchmarks/protocol_table.py "${folders[@]}" --out "$results/${stem}_table"
