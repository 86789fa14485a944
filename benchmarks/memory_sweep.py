#!/usr/bin/env python3
"""Per-rank memory of layouts at world sizes too large for this machine, measured with
`subdp train --simulate-rank w/W` (one rank of a W-rank layout alone, its collectives stood
in for) and predicted by `subdp plan`, side by side.

  /usr/bin/python3 benchmarks/memory_sweep.py configs/gpt_brown.toml --worlds 8,16 \\
      --layouts dp,dp+zero1,fwd-block+zero1+recompute --keep 0.5 --out OUT

Layouts are compare.py's regime names with its modifiers (+zero1, +zero2, +fsdp, +recompute). For each
layout and W, rank 0 runs --steps steps (default 2) and the largest per-category peak of its
metrics is compared with `subdp plan`'s row for that rank. Writes OUT/memory.csv and
OUT/summary.md (peak by category in MiB, ratio to plain DP's planned peak, measured /
predicted) and prints the table. memory.csv's command names no machine path (see compare.py),
its commit column the binary's commit.
"""
import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import child  # noqa: E402
import compare  # noqa: E402

ROOT = compare.ROOT


def layout_sets(layout, keep, world):
    base, *mods = layout.split("+")
    regime, gran = compare.REGIMES[base]
    subnets = 1 if base in compare.WHOLE_MODEL else world
    return [f"parallel.subnetworks={subnets}", f"mask.regime={regime}", f"mask.granularity={gran}",
            f"mask.keep={keep if base != 'dp' else 1}"] + [s for m in mods for s in compare.modifier_sets(m)]


def measure(binary, config, sets, world, steps):
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m-{rank}.jsonl")
        cmd = [binary, "train", config, "--simulate-rank", f"0/{world}"]
        for s in sets + [f"train.steps={steps}", "train.epochs=0", f"log.metrics_file={metrics}", "train.threads=1",
                         "train.eval_every=1000000", "train.eval_batches=1"]:
            cmd += ["--set", s]
        child.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        rows = compare.pack_metrics.read_records(os.path.join(tmp, "m-0.jsonl"))  # the steps' records
    peaks = {c: max(r["mem_peak"][c] for r in rows) for c in compare.CATEGORIES}
    return peaks, max(r["mem_total_peak"] for r in rows), recorded(cmd, binary, config, tmp)


def recorded(cmd, binary, config, tmp):
    """cmd as memory.csv records it (no machine path): the binary as compare.py records it
    (build/subdp for a copy outside the repository), the config relative to the repository
    root, the run's temporary folder as $TMPDIR."""
    shown = "build/subdp" if not compare.inside_root(binary) else compare.repo_path(binary)
    return [shown if arg == binary else compare.repo_path(arg) if arg == config else arg.replace(tmp, "$TMPDIR")
            for arg in cmd]


def predict(binary, config, sets, world):
    cmd = [binary, "plan", config, "--world", str(world), "--json", "--set", "train.threads=1"]
    for s in sets:
        cmd += ["--set", s]
    text = child.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    plan = compare.parse_plan(text)
    dp = plan["dp"]
    # Rank 0's row: subnetwork 0's under masking, the baseline's (dp+...) with one, else plain DP's.
    rank0 = next((r for r in plan["json"]["rows"] if r.get("subnetwork", 0) == 0), None)
    return (plan["rows"][rank0["label"]] if rank0 else dp), dp


def check_args(p, a):
    """Exits with argparse's usage error naming a world size, layout or folder the sweep cannot
    take, before anything runs."""
    if not re.fullmatch(r"[1-9][0-9]*(,[1-9][0-9]*)*", a.worlds):
        p.error(f"--worlds {a.worlds!r}: expected a comma list of world sizes >= 1 (e.g. 8,16)")
    for layout in a.layouts.split(","):
        if not compare.known_regime(layout):
            p.error(f"--layouts: unknown layout {layout!r} (expected one of {', '.join(compare.REGIMES)}, optionally "
                    f"+{' +'.join([*compare.MODIFIERS, 'redealK'])}; no @keep here: --keep sets it)")
        clash = compare.modifier_clash(layout.split("+")[1:])
        if clash:
            p.error(f"--layouts: {layout}: {clash}")
    if a.steps < 1:
        p.error(f"--steps must be at least 1 (got {a.steps})")
    if os.path.exists(os.path.join(a.out, "memory.csv")):
        p.error(f"--out {a.out} holds an earlier sweep (memory.csv): use another folder, or remove it first")
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        p.error(f"--out {a.out} is a file, not a folder")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config")
    p.add_argument("--worlds", default="8,16", help="comma list of world sizes W (default 8,16)")
    p.add_argument("--layouts", required=True, help="comma list of compare.py regimes with modifiers")
    p.add_argument("--keep", type=float, default=0.5)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "subdp"))
    p.add_argument("--binary-commit", default="", help="the commit --binary was built from (as compare.py's)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    check_args(p, a)
    a.config = os.path.abspath(a.config)  # the runs start in the repository root
    a.binary = os.path.abspath(a.binary)
    commit = compare.binary_commit(a.binary, a.binary_commit)
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for world in [int(w) for w in a.worlds.split(",")]:
        for layout in a.layouts.split(","):
            sets = a.set + layout_sets(layout, a.keep, world)
            measured, total, cmd = measure(a.binary, a.config, sets, world, a.steps)
            predicted, dp = predict(a.binary, a.config, sets, world)
            rows.append({"W": world, "layout": layout, **{f"{c}_MiB": measured[c] / compare.MIB for c in compare.CATEGORIES},
                         "total_MiB": total / compare.MIB, "vs_dp": total / dp[-1], "meas_pred": total / predicted[-1],
                         "command": " ".join(cmd), "commit": commit})
            print(f"W={world} {layout}: {total / compare.MIB:.2f} MiB ({total / dp[-1]:.2f}x DP), "
                  f"measured/predicted {total / predicted[-1]:.3f}", flush=True)
    with open(os.path.join(a.out, "memory.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    head = ["W", "layout", *[f"{c} MiB" for c in compare.CATEGORIES], "total MiB", "vs DP", "meas/pred"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join([str(r["W"]), r["layout"], *[f"{r[c + '_MiB']:.2f}" for c in compare.CATEGORIES],
                                         f"{r['total_MiB']:.2f}", f"{r['vs_dp']:.2f}x", f"{r['meas_pred']:.3f}"]) + " |")
    text = (f"# Per-rank memory through --simulate-rank: {os.path.basename(a.config)}\n\nRank 0 of each W-rank layout, "
            f"keep {a.keep}, {a.steps} steps, peak bytes by category; 'vs DP' divides by plain DP's planned peak, "
            f"'meas/pred' by `subdp plan`'s row for the rank.\n\n" + "\n".join(lines) + "\n")
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(child.main_exits_cleanly("memory_sweep.py", main))
