#!/usr/bin/env bash
# `subdp plan --budget` considers every regime with every memory baseline (issue 24): at a
# budget equal to forward block masking's own predicted peak (GPT, W = 4, S = 4, keep 0.5), the
# combinations listed all fit, smallest first, each with the bytes the plan predicts for it
# alone; forward block masking itself, its ZeRO-2 and its ZeRO-1 + recompute compositions are among them,
# and plain DP (which needs more) is not.
source "$(dirname "$0")/common.sh"
mask="--set parallel.subnetworks=4 --set mask.regime=forward --set mask.keep=0.5"
peak() {  # largest "subnetwork s" total of `subdp plan` with the given overrides (DP: its row, or dp+...'s)
  "$SUBDP" plan "$WORK/gpt.toml" --world 4 "$@" |
    awk '/^  (subnetwork|dp\+)/ {if ($(NF-2) > m) m = $(NF-2)} /^  plain DP/ {dp = $NF} END {print m ? m : dp}'
}
budget=$(peak $mask)
"$SUBDP" plan "$WORK/gpt.toml" --world 4 $mask --budget "$budget" > "$WORK/budget.txt"
/usr/bin/python3 - "$WORK/budget.txt" "$budget" <<'PY'
import re, sys
text, budget = open(sys.argv[1]).read(), int(sys.argv[2])
rows = re.findall(r"^    (\S+)\s+(\d+) bytes", text, re.M)
assert rows, text
names = [n for n, _ in rows]
sizes = [int(b) for _, b in rows]
assert sizes == sorted(sizes), f"not smallest first: {rows}"
assert all(b <= budget for b in sizes), rows
assert "fwd-block+zero1+recompute" in names and "fwd-block+zero2" in names and "fwd-block" in names, names
assert "dp" not in names, names
smallest = re.search(r"smallest footprint: (\S+)", text).group(1)
assert smallest == names[0], (smallest, names)
print("ok:", len(rows), "combinations fit", budget, "bytes; smallest", smallest, sizes[0])
with open(sys.argv[1] + ".names", "w") as f:
    f.write("\n".join(f"{n} {b}" for n, b in rows))
PY
# Each listed figure is the plan of that combination alone.
while read -r name bytes; do
  args=$mask
  [[ $name == dp* ]] && args="--set parallel.subnetworks=1"
  [[ $name == bwd-* ]] && args="$args --set mask.regime=backward"
  [[ $name == *neuron* ]] && args="$args --set mask.granularity=neuron"
  [[ $name == *zero1* ]] && args="$args --set parallel.shard=optimizer"
  [[ $name == *zero2* ]] && args="$args --set parallel.shard=gradients"
  [[ $name == *fsdp* ]] && args="$args --set parallel.shard=parameters"
  [[ $name == *recompute* ]] && args="$args --set train.recompute=blocks"
  got=$(peak $args)
  [[ $got == "$bytes" ]] || { echo "FAIL: $name: listed $bytes bytes, planned alone $got"; exit 1; }
done < "$WORK/budget.txt.names"
echo "ok: every listed combination's bytes equal its own plan"
