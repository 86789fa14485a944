#!/usr/bin/env bash
# Memory before allocation (issue 39): a ResNet batch whose plan needs far more than the host
# has is refused at start, on one process and on 2 ranks (each rank's share), with both
# figures and the opt-in, before anything is allocated (no training line); the planner's
# figure in the message is `subdp plan`'s. train.allow_overcommit = true lets a run that fits
# go as before.
source "$(dirname "$0")/common.sh"
huge=(--set train.batch_size=1048576)
for np in 1 2; do
  rc=0
  out=$(timeout 600 mpirun -np $np --oversubscribe --mca btl "$BTL" \
    "$SUBDP" train "$WORK/resnet.toml" "${huge[@]}" 2>&1) || rc=$?
  [[ $rc != 0 ]] || { echo "FAIL: accepted"; echo "$out"; exit 1; }
  for part in "the plan needs" "GiB are available to it" "train.allow_overcommit = true"; do
    grep -qF "$part" <<<"$out" || { echo "FAIL ($np ranks): no '$part' in: $out"; exit 1; }
  done
  ((np == 1)) || grep -qF "shared by 2 ranks on this host" <<<"$out" || { echo "FAIL: no share: $out"; exit 1; }
  ! grep -q "^epoch " <<<"$out" || { echo "FAIL: trained: $out"; exit 1; }
  echo "ok: $np rank(s): $(grep -o 'the plan needs [0-9.]* GiB[^(]*' <<<"$out" | head -1)"
done
# The figure is the planner's: subdp plan's per-rank total for the same config, in GiB.
needed=$(grep -o 'the plan needs [0-9.]* GiB' <<<"$out" | head -1 | grep -o '[0-9.]*')
"$SUBDP" plan "$WORK/resnet.toml" "${huge[@]}" --world 2 --json >"$WORK/plan.json"
planned=$($CHECK plan-peak "$WORK/plan.json" GiB)
[[ $needed == "$planned" ]] || { echo "FAIL: message says $needed GiB, subdp plan $planned GiB"; exit 1; }
echo "ok: the figure is subdp plan's ($planned GiB)"
"$SUBDP" train "$WORK/mlp.toml" --set parallel.backend=local --set train.allow_overcommit=true >/dev/null ||
  { echo "FAIL: allow_overcommit run failed"; exit 1; }
echo "ok: train.allow_overcommit = true trains"
