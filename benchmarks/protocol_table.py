#!/usr/bin/env python3
"""The comparison protocol's one table: merges the runs.csv of compare.py folders made under
different budgets (--match steps / flops / time) of the same config into one table, each run
once per budget, quality as mean +- sample standard deviation over its seeds, and a table of
each run against DP under the same budget.

  /usr/bin/python3 benchmarks/protocol_table.py OUT_STEPS OUT_FLOPS [...] --out DIR

writes DIR/table.md (also printed) and DIR/table.csv (one row per run and budget: means and
standard deviations). A step-matched folder need not hold DP: DP trains its --steps under
every budget, so the DP runs of a FLOP- or time-matched folder with the same step count stand
in for it (the table says so).

Against DP: 'within 1 DP std' asks whether |mean test acc - DP's mean| <= DP's sample standard
deviation under the same budget (the ResNet target of issue 25); 'test loss vs DP' is
(mean test loss - DP's) / DP's, the GPT target being at most +2 %.
"""
import argparse
import csv
import math
import os
import statistics
import sys

from compare import mb_cell, repo_path

MIB = 2 ** 20
QUALITY = ("train_loss", "test_loss", "test_acc", "subnet_loss", "subnet_acc")
MEANS = ("steps", "flops_total", "peak_bytes", "bytes_per_step", "broadcast_bytes_per_step", "step_s", "wall_s")


def read_runs(folder):
    """Rows of FOLDER/runs.csv with numbers parsed. Raises SystemExit naming the file."""
    path = os.path.join(folder, "runs.csv")
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise SystemExit(f"protocol_table.py: cannot read {path} ({e.strerror}); make it with benchmarks/compare.py")
    if not rows or "match" not in rows[0]:
        raise SystemExit(f"protocol_table.py: {path} has no runs (or no 'match' column: an older compare.py)")
    # broadcast_bytes_per_step may be missing (an older compare.py's): it reads as nan.
    needed = ("run", "base", "seed") + QUALITY + tuple(k for k in MEANS if k != "broadcast_bytes_per_step")
    missing = [k for k in needed if k not in rows[0]]
    if missing:
        raise SystemExit(f"protocol_table.py: {path} has no {', '.join(missing)} column: not a runs.csv of compare.py")
    for r in rows:
        for k, v in r.items():
            if k not in ("run", "base", "regime", "match"):
                try:
                    r[k] = float(v) if v != "" else math.nan
                except ValueError:
                    raise SystemExit(f"protocol_table.py: {path}: run {r['run']}: {k} = '{v}' is not a number")
        r["folder"] = folder
    return rows


def check_distinct(folders, rows):
    """Raises SystemExit on a folder given twice, or a run and seed of one budget in two folders:
    merged, it would count as more seeds and shrink the standard deviation."""
    real = [os.path.realpath(f) for f in folders]
    twice = next((f for f, r in zip(folders, real) if real.count(r) > 1), None)
    if twice:
        raise SystemExit(f"protocol_table.py: {twice} is given twice: its runs would count as more seeds")
    seen = {}
    for r in rows:
        key = (r["match"], r["run"], r["seed"])
        if key in seen:
            raise SystemExit(f"protocol_table.py: run {r['run']} seed {r['seed']:g} of the {r['match']}-matched budget is "
                             f"in both {seen[key]} and {r['folder']}: one table takes each run and seed once")
        seen[key] = r["folder"]


def stats(values):
    """(mean, sample std or nan for one value, n) over the finite values."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan, math.nan, 0
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else math.nan, len(values)


def groups(rows):
    """{(match, base): rows} in order of first appearance, DP lent to step-matched budgets
    that lack it (same step count); returns (groups, notes)."""
    out, notes = {}, []
    for r in rows:
        out.setdefault((r["match"], r["base"]), []).append(r)
    for match in dict.fromkeys(r["match"] for r in rows):
        if match != "steps" or ("steps", "dp") in out:
            continue
        steps = {r["steps"] for (m, _), rs in out.items() if m == match for r in rs}
        lender = next((rs for (m, b), rs in out.items() if b == "dp" and {r["steps"] for r in rs} == steps), None)
        if not lender:
            notes.append(f"no DP under the step-matched budget (no DP run of {', '.join(f'{int(n)}' for n in sorted(steps))} "
                         "steps in these folders): its runs have no comparison against DP.")
        if lender:
            out[("steps", "dp")] = lender
            notes.append(f"DP under the step-matched budget: its {lender[0]['match']}-matched runs "
                         f"({len(lender)} seeds, {int(lender[0]['steps'])} steps, {repo_path(lender[0]['folder'])}), the same "
                         "runs: DP trains its step budget under every budget.")
    return out, notes


def aggregate(match, base, rs):
    agg = {"run": base, "match": match, "seeds": len(rs)}
    for k in QUALITY:
        agg[k], agg[k + "_std"], _ = stats([r[k] for r in rs])
    for k in MEANS:  # runs.csv of an older compare.py lacks broadcast_bytes_per_step: nan
        agg[k] = stats([r.get(k, math.nan) for r in rs])[0]
    return agg


def cell(mean, std, digits=4):
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f}" + ("" if math.isnan(std) else f" +- {std:.{digits}f}")


def main_table(aggs):
    head = ["run", "budget", "seeds", "steps", "GFLOP/rank", "test loss", "test acc", "subnet loss", "subnet acc",
            "peak MiB", "MB/step/rank", "MB bcast/step/rank", "step s", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in aggs:
        cells = [g["run"], g["match"], str(g["seeds"]), f"{g['steps']:.0f}", f"{g['flops_total'] / 1e9:.1f}",
                 cell(g["test_loss"], g["test_loss_std"]), cell(g["test_acc"], g["test_acc_std"]),
                 cell(g["subnet_loss"], g["subnet_loss_std"]), cell(g["subnet_acc"], g["subnet_acc_std"]),
                 f"{g['peak_bytes'] / MIB:.1f}", f"{g['bytes_per_step'] / 1e6:.2f}",
                 mb_cell(g["broadcast_bytes_per_step"]),
                 f"{g['step_s']:.3f}",
                 f"{g['wall_s']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def against_dp(aggs):
    """Rows of each non-DP run against DP's mean under the same budget."""
    dp = {g["match"]: g for g in aggs if g["run"] == "dp"}
    head = ["run", "budget", "test acc - DP", "DP acc std", "within 1 DP std", "test loss vs DP", "peak vs DP"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in aggs:
        ref = dp.get(g["match"])
        if g["run"] == "dp" or ref is None:
            continue
        d_acc = g["test_acc"] - ref["test_acc"]
        within = "-" if math.isnan(ref["test_acc_std"]) else ("yes" if abs(d_acc) <= ref["test_acc_std"] else "no")
        d_loss = (g["test_loss"] - ref["test_loss"]) / ref["test_loss"]
        lines.append("| " + " | ".join([g["run"], g["match"], f"{d_acc:+.4f}", f"{ref['test_acc_std']:.4f}", within,
                                        f"{100 * d_loss:+.2f} %", f"{g['peak_bytes'] / ref['peak_bytes']:.2f}x"]) + " |")
    return lines


def write_csv(path, aggs):
    fields = ["run", "match", "seeds", *MEANS, *[k + s for k in QUALITY for s in ("", "_std")]]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for g in aggs:
            w.writerow(g)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("folders", nargs="+", help="compare.py output folders (each with runs.csv)")
    p.add_argument("--out", default="", help="folder for table.md and table.csv (default: print only)")
    a = p.parse_args(argv)
    if a.out and os.path.exists(a.out) and not os.path.isdir(a.out):
        p.error(f"--out {a.out} is a file, not a folder")
    rows = [r for folder in a.folders for r in read_runs(folder)]
    check_distinct(a.folders, rows)
    grouped, notes = groups(rows)
    order = list(dict.fromkeys(r["base"] for r in rows))
    if "dp" in order:
        order.remove("dp")
        order.insert(0, "dp")
    budgets = list(dict.fromkeys(m for m, _ in grouped))
    aggs = [aggregate(m, b, grouped[(m, b)]) for b in order for m in budgets if (m, b) in grouped]
    text = ["# Comparison protocol: every run under every budget", "",
            "Sources: " + ", ".join(f"`{repo_path(f)}`" for f in a.folders) + ". Budgets (compare.py --match): "
            + ", ".join(budgets) + ". Quality: mean +- sample standard deviation over seeds; test = the full model "
            "assembled from the subnetworks on the held-out split, subnet = each rank's subnetwork on its share. "
            "Peak: the largest rank's measured peak (mean over seeds); MB/step/rank: bytes all-reduced; MB bcast: "
            "backward masking's owner broadcasts of updated unit values (mean over the seeds that measured it, "
            "'n/a' where none did: binaries older than the metric); step s: "
            "the slowest rank's; wall s: one run's training and evaluation.", "",
            *main_table(aggs), "", "## Against DP under the same budget", "", *against_dp(aggs), "",
            "- 'within 1 DP std': |mean test acc - DP's| <= DP's sample standard deviation over its seeds. "
            "'test loss vs DP': relative difference of mean test losses.", *[f"- {n}" for n in notes], ""]
    text = "\n".join(text)
    print(text)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "table.md"), "w") as f:
            f.write(text)
        write_csv(os.path.join(a.out, "table.csv"), aggs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
