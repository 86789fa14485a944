"""Training budgets for benchmarks/compare.py: step-, FLOP- and time-matched comparisons.

steps: every run trains --steps optimizer steps (the engine's own comparisons so far).
flops: each run trains until its cumulative training FLOPs per rank reach what DP spends in
       --steps (the SDP paper's FLOP-matched protocol: a subnetwork of coverage C trains about
       1/C times as many steps).
time:  the same with measured step time (the slowest rank's) in place of FLOPs.

FLOPs and step time per step come from a short calibration run of each regime (the
engine's per-step metrics: `flops` is what the FlopCounter counts, forward and backward,
recomputation included; `step_time_s` the wall time of a step). A run of N_r steps then
gets its learning-rate schedule stretched to its own length: train.steps = N_r (the cosine
decays over N_r steps to lr * min_lr_ratio) and optim.warmup_steps scaled by N_r / N.
"""
import math
import statistics

MATCHES = ("steps", "flops", "time")


def per_step_cost(ranks):
    """{'flops': mean FLOPs per step per rank, 'step_s': median over steps 2.. of the slowest
    rank's step time} from a calibration run's per-rank metric rows."""
    steps, world = len(ranks[0]), len(ranks)
    flops = sum(row["flops"] for rows in ranks for row in rows) / (steps * world)
    first = 1 if steps > 1 else 0
    step_s = statistics.median(max(rows[i]["step_time_s"] for rows in ranks) for i in range(first, steps))
    return {"flops": flops, "step_s": step_s}


def matched_steps(match, steps, dp_cost, cost):
    """Optimizer steps a run of per-step `cost` trains to spend DP's budget of `steps` steps.
    steps: the same; flops / time: round(steps * dp / own), at least 1."""
    if match == "steps":
        return steps
    key = "flops" if match == "flops" else "step_s"
    if not cost[key] > 0:
        raise ValueError(f"the calibration run measured {key} = {cost[key]} per step: cannot match a budget on it")
    return max(1, int(round(steps * dp_cost[key] / cost[key])))


def schedule_sets(own_steps, steps, warmup_steps):
    """Overrides stretching the learning-rate schedule of a run of own_steps steps: warm-up
    scaled by own_steps / steps (train.steps itself is set by the caller)."""
    if warmup_steps <= 0 or own_steps == steps:
        return []
    return [f"optim.warmup_steps={max(1, int(round(warmup_steps * own_steps / steps)))}"]


def cosine_lr(base_lr, min_lr_ratio, warmup, step, total):
    """The engine's schedule (engine/optim/optimizer.cpp, learning_rate) at 0-based `step` of
    `total`: linear warm-up, then cosine from base_lr to base_lr * min_lr_ratio."""
    if warmup > 0 and step < warmup:
        return base_lr * (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    floor = base_lr * min_lr_ratio
    return floor + 0.5 * (base_lr - floor) * (1 + math.cos(math.pi * progress))


def describe(match, steps, calibration_steps):
    if match == "steps":
        return f"step-matched: every run trains {steps} steps"
    what = "training FLOPs per rank" if match == "flops" else "wall time (slowest rank's step time)"
    return (f"{match}-matched: each run trains until its cumulative {what} reach DP's for {steps} steps "
            f"(per-step cost from a {calibration_steps}-step calibration run of each regime); its learning-rate "
            f"schedule is stretched to its own length")
