"""Plots of benchmarks/compare.py: memory by category, training loss against step and
against FLOPs, evaluations. Runs repeated with several seeds (compare.py --seeds) are drawn
as their mean with a band of one standard deviation."""
import importlib.util
import os

try:
    import numpy as np
except ImportError:  # compare.py's --help and argument checks need no numpy; missing_modules() names it
    np = None

CATEGORIES = ["params", "grads", "optimizer", "activations", "workspace", "comm"]
MIB = 1048576.0


def missing_modules():
    """The modules plots() needs that this python3 lacks (numpy, matplotlib), as a list of names."""
    return [m for m in ("numpy", "matplotlib") if importlib.util.find_spec(m) is None]


def groups(runs_data):
    """{base run name: [its runs, one per seed]} in first-seen order."""
    out = {}
    for d in runs_data:
        out.setdefault(d.get("base", d["name"]), []).append(d)
    return out


def band(ax, x, ys, color, label, smooth_window=1, **kw):
    """Mean of ys (one array per seed) against x, with a +-1 std band when there are several."""
    ys = np.array([smooth(y, smooth_window) for y in ys])
    mean = ys.mean(axis=0)
    if len(mean) < 20:  # a line of one point draws nothing: mark the points of short runs
        kw.setdefault("marker", "o")
    ax.plot(x, mean, label=label, color=color, **kw)
    if len(ys) > 1:
        std = ys.std(axis=0, ddof=1)
        ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, lw=0)


def smooth(y, window):
    y = np.asarray(y, dtype=float)
    if window <= 1 or len(y) < window:
        return y
    c = np.cumsum(np.insert(y, 0, 0.0))
    head = c[1:window] / np.arange(1, window)  # growing window at the start
    return np.concatenate([head, (c[window:] - c[:-window]) / window])


def plots(out, runs_data, summaries, title):
    """memory.png, loss_vs_step.png, loss_vs_flops.png, eval.png."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {base: plt.cm.tab10(i % 10) for i, base in enumerate(groups(runs_data))}
    plot_memory(plt, out, summaries, title)
    plot_losses(plt, out, runs_data, colors, title)
    plot_evals(plt, out, runs_data, colors, title)
    plot_alignment(plt, out, runs_data, colors, title)


def plot_alignment(plt, out, runs_data, colors, title):
    """alignment.png (runs with log.alignment_every): cosine of the subnetworks' gradients to
    the full model's, mean over ranks (and seeds), one panel per unit kind."""
    series = {}  # kind -> base -> {step: [values]}
    for d in runs_data:
        for rows in d["ranks"]:
            for row in rows:
                for kind, c in (row.get("alignment") or {}).items():
                    if c is not None:
                        series.setdefault(kind, {}).setdefault(d.get("base", d["name"]), {}).setdefault(
                            row["step"], []).append(c)
    if not series:
        return
    kinds = sorted(series)
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.5 * len(kinds), 4.2), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        for base, by_step in series[kind].items():
            steps = sorted(by_step)
            ax.plot(steps, [np.mean(by_step[s]) for s in steps], marker="o", color=colors[base], label=base)
        ax.set_title(kind)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("cosine(subnetwork gradient, full gradient)")
    handles = {}
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(handles.values(), handles.keys(), fontsize=8, loc="lower right")
    fig.suptitle(f"{title}: gradient alignment on each rank's fixed batch, per unit kind (mean over ranks)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "alignment.png"), dpi=120)
    plt.close(fig)


def plot_memory(plt, out, summaries, title):
    """Stacked bars of the largest rank's peak bytes by category, MiB, with the predicted total."""
    names = [s["run"] for s in summaries]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names) + 2), 4.8))
    bottom = np.zeros(len(names))
    for i, c in enumerate(CATEGORIES):
        vals = np.array([s["mem"][c] / MIB for s in summaries])
        ax.bar(names, vals, bottom=bottom, label=c, color=plt.cm.Set2(i))
        bottom += vals
    ax.scatter(names, [s["predicted"] / MIB for s in summaries], marker="_", s=600, color="black", zorder=3,
               label="predicted total (subdp plan)")
    for i, s in enumerate(summaries):
        ax.annotate(f"{bottom[i]:.1f}", (i, bottom[i]), ha="center", va="bottom", fontsize=8, xytext=(0, 3),
                    textcoords="offset points")
    ax.set_ylabel("peak memory of the largest rank (MiB)")
    ax.set_xlabel("run (regime, keep ratio)")
    ax.set_title(f"{title}: per-rank peak memory by category")
    ax.legend(fontsize=8, loc="upper right")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "memory.png"), dpi=120)
    plt.close(fig)


def plot_losses(plt, out, runs_data, colors, title):
    """Training loss (mean over ranks, smoothed) against step and against cumulative FLOPs per
    rank; one line per run (mean over its seeds, with a +-1 std band)."""
    steps = max(len(d["ranks"][0]) for d in runs_data)
    window = max(1, steps // 20)
    for fname, xkey, xlabel, what in [
            ("loss_vs_step.png", "step", "step", "training loss against step"),
            ("loss_vs_flops.png", "flops", "cumulative training FLOPs per rank (TFLOP)",
             "training loss against compute per rank (FLOP-matched)")]:
        fig, ax = plt.subplots(figsize=(7.5, 5))
        for base, runs in groups(runs_data).items():
            first = runs[0]
            if xkey == "step":
                x = np.array([row["step"] for row in first["ranks"][0]])
            else:
                x = np.mean([np.cumsum([row["flops"] for row in rows]) for rows in first["ranks"]], axis=0) / 1e12
            losses = [np.mean([[row["loss"] for row in rows] for rows in d["ranks"]], axis=0) for d in runs]
            label = base if len(runs) == 1 else f"{base} ({len(runs)} seeds)"
            band(ax, x, losses, colors[base], label, window, lw=1.4)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("training loss (cross-entropy, nats)")
        ax.set_title(f"{title}\n{what}; mean over ranks, {window}-step moving average", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, fname), dpi=120)
        plt.close(fig)


def plot_evals(plt, out, runs_data, colors, title):
    """Held-out loss and accuracy against step (mean over seeds, +-1 std band); solid: full
    model, dashed: subnetworks' own share."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.8))
    for base, runs in groups(runs_data).items():
        if not runs[0]["evals"] or any(len(d["evals"]) != len(runs[0]["evals"]) for d in runs):
            continue
        x, c = [e["step"] for e in runs[0]["evals"]], colors[base]
        label = base if len(runs) == 1 else f"{base} ({len(runs)} seeds)"
        band(a1, x, [[e["test_loss"] for e in d["evals"]] for d in runs], c, label, marker="o")
        band(a2, x, [[100 * e["test_acc"] for e in d["evals"]] for d in runs], c, label, marker="o")
        if not runs[0]["regime"].startswith("dp") and not runs[0]["regime"].startswith("stoch"):
            band(a1, x, [[e["subnet_loss"] for e in d["evals"]] for d in runs], c, None, marker="x", ls="--",
                 alpha=0.6)
            band(a2, x, [[100 * e["subnet_acc"] for e in d["evals"]] for d in runs], c, None, marker="x", ls="--",
                 alpha=0.6)
    a1.set_yscale("log")
    a1.set_ylabel("held-out loss (cross-entropy, nats, log scale)")
    a2.set_ylabel("held-out accuracy (%)")
    for a in (a1, a2):
        a.set_xlabel("step")
        a.grid(alpha=0.3, which="both")
    a2.legend(fontsize=8, title="solid: full model\ndashed: subnetworks (own share)", title_fontsize=8)
    fig.suptitle(f"{title}: evaluation on the held-out split")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "eval.png"), dpi=120)
    plt.close(fig)
