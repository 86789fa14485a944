#!/usr/bin/env bash
# parallel.overlap = true on the emulated CUDA device over the emulated NCCL
# (engine/parallel/overlap.h, StreamOverlap): each block's chunks are packed on the compute
# stream and all-reduced by deferred NCCL collectives during the backward pass, joined and
# unpacked after it. Against the blocking run of the same config, on every rank: the losses,
# the final model and optimizer tensors and the bytes all-reduced, bit for bit (the same
# chunks, the same sums). The emulator lands each collective's result as late as a GPU may
# and reads its input when queued, so a pack not waited for, a join left out or an unpack
# before it reads stale values here. GPT DP and forward block / neuron masking on 4 ranks,
# the LLaMA DP on 2. Also: overlap adds no host synchronisation (1 a step), the planner
# counts the per-chunk buffers (category comm) exactly, and backend = "mpi" on the device is
# refused. Every step records its phases' seconds (phases_s, previous_phases_s).
# Usage: test_overlap.sh SUBDP_EMULATED_BINARY SOURCE_ROOT
source "$(dirname "$0")/../mpi/common.sh"
masked() { echo --set parallel.subnetworks=$1 --set mask.regime=$2 --set mask.granularity=$3 --set mask.keep=0.5; }
device=(--set device.type=cuda --set parallel.backend=nccl)
cases=(
  "gpt|4|--set parallel.bucket_mb=0.005"
  "gpt|4|--set parallel.bucket_mb=0.005 $(masked 4 forward block)"
  "gpt|4|--set parallel.bucket_mb=0.002 $(masked 2 forward neuron)"
  "llama|2|--set parallel.bucket_mb=0.01"
)
for c in "${cases[@]}"; do
  IFS='|' read -r model np rest <<<"$c"
  read -r -a args <<<"$rest"
  tag=$model-$np-$(echo "${args[*]}" | tr -cd 'a-z0-9')
  for ov in false true; do
    run_ranks "$np" train "$WORK/$model.toml" "${device[@]}" "${args[@]}" --set parallel.overlap=$ov \
      --set log.metrics_file="$WORK/$tag-$ov-{rank}.jsonl" --set checkpoint.dir="$WORK/$tag-$ov" >"$WORK/$tag-$ov.log" 2>&1 ||
      { echo "FAIL: $model ${args[*]} overlap=$ov:"; tail -5 "$WORK/$tag-$ov.log"; exit 1; }
  done
  same_runs "$np" "$tag-false" "$tag-true" || { echo "FAIL: $model ${args[*]}: overlapped != blocking"; exit 1; }
  # Each phase's seconds where the work ran (event timestamps on the device), blocking and overlapped.
  for ov in false true; do $CHECK phases "$WORK/$tag-$ov-$((np - 1)).jsonl" >/dev/null || exit 1; done
  line=$(grep -m1 "^overlap: " "$WORK/$tag-true.log") || { echo "FAIL: $model: no overlap line"; exit 1; }
  [[ $line =~ ^overlap:\ ([1-9][0-9]*)\ of ]] || { echo "FAIL: $model: nothing overlapped: $line"; exit 1; }
  echo "ok: $model on $np ranks ${args[*]}: overlapped = blocking, bit for bit ($line)"
done

# The per-chunk buffers: category comm planned = measured to the byte, with and without
# overlap (rank 0 of the GPT DP), and overlap adds something.
tag=gpt-4-$(echo "--set parallel.bucket_mb=0.005" | tr -cd 'a-z0-9')
for ov in false true; do
  "$SUBDP" plan "$WORK/gpt.toml" --world 4 "${device[@]}" --set parallel.bucket_mb=0.005 --set parallel.overlap=$ov \
    --json >"$WORK/plan-$ov.json"
done
/usr/bin/python3 - "$WORK" "$tag" <<'PY'
import json, sys
work, tag = sys.argv[1:]
def planned(ov):
    return json.load(open(f"{work}/plan-{ov}.json"))["dp"]["bytes"]["comm"]
def measured(ov):
    steps = [json.loads(l) for l in open(f"{work}/{tag}-{ov}-0.jsonl") if '"mem_peak"' in l]
    return steps[-1]["mem_peak"]["comm"]
for ov in ("false", "true"):
    if planned(ov) != measured(ov):
        sys.exit(f"FAIL: overlap = {ov}: comm planned {planned(ov)} bytes, measured {measured(ov)}")
if planned("true") <= planned("false"):
    sys.exit("FAIL: the plan counts no overlap buffer")
print(f"ok: comm planned = measured, {planned('false')} and {planned('true')} bytes with overlap")
PY

# Host synchronisations per step with overlap on 2 ranks over NCCL: still 1, the counters' read.
waits() {
  SUBDP_EMU_HOST_WAITS=1 run_ranks 2 train "$WORK/gpt.toml" "${device[@]}" --set parallel.overlap=true \
    --set parallel.bucket_mb=0.005 --set train.steps="$1" --set log.every=1000 2>&1 >/dev/null |
    sed -n 's/^subdp-emu: host synchronisations: //p' | sort -n | tail -1
}
w4=$(waits 4) w8=$(waits 8)
per_step=$(((w8 - w4) / 4))
((per_step <= 1)) || { echo "FAIL: overlap over NCCL: $per_step host synchronisations per step ($w4, $w8)"; exit 1; }
echo "ok: overlap over NCCL on 2 ranks: $per_step host synchronisation per step"

out=$("$SUBDP" train "$WORK/gpt.toml" --set device.type=cuda --set parallel.backend=mpi --set parallel.overlap=true 2>&1) &&
  { echo "FAIL: overlap on the device over MPI accepted"; exit 1; }
grep -q 'overlap = true with \[device\] type = "cuda" and backend = "mpi"' <<<"$out" || { echo "FAIL: $out"; exit 1; }
echo "ok: overlap on the device over MPI refused"
