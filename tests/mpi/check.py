#!/usr/bin/env python3
"""Checks for the MPI invariant tests: reads metrics JSON lines and safetensors files.

Usage:
  check.py same-losses A B                  loss sequences bit-identical
  check.py close-losses A B TOL             loss sequences of equal length, each step within rel tol
  check.py same-tail FULL RESUMED           RESUMED's steps have bit-identical losses to FULL's same steps
  check.py mean-losses SINGLE TOL R0 R1 ... mean over ranks equals the single process (rel tol)
  check.py tensors-close A B TOL            every tensor of two safetensors files within rel tol (0 = bit-identical)
  check.py updates-close INIT A B TOL       every tensor's update from INIT: A's within rel tol of B's,
                                            row by row (first axis; 1-D tensors whole), relative to
                                            the row's largest element of B's update
  check.py holders-identical DIR            rank*.safetensors: wherever two ranks hold a value it is bit-identical
  check.py all-identical DIR                rank*.safetensors: every rank holds every value, all bit-identical
  check.py same-bytes A B                   every step's bytes all-reduced and broadcast equal (overlapped vs blocking)
  check.py phases METRICS                   every step's phases_s and (after the first) previous_phases_s: finite,
                                            >= 0, forward and backward > 0, phases_s within step_time_s
  check.py bytes-per-step METRICS EXPECTED [KEY]
                                            every step's KEY (default bytes_allreduced) is exactly EXPECTED
  check.py same-peaks A B                   the last step's peak bytes equal in every memory category
  check.py model-distance A B EXPECTED TOL  Euclidean distance over every tensor of A and B equals EXPECTED (rel tol)
  check.py finite-tensors FILE...           every value of the safetensors FILEs is finite
The metrics files' eval and final records (those with an "event" key, NaN written as null):
  check.py same-evaluations A B             eval records and the final record's step and losses bit-identical
  check.py positive-event METRICS EVENT KEY[=VALUE]...
                                            the last EVENT record's KEYs are finite and > 0 (and VALUE)
  check.py skipped-final METRICS STEP       final record at STEP, train_loss NaN (null), skipped_steps >= 1
Probes in the step records:
  check.py alignment METRICS REGIME WHAT    two alignment probes; cosines 1 (backward) or below 1 (forward)
  check.py redeals TAG METRICS...           every rank's re-deal records: checksums kept, bytes moved,
                                            peak within the largest training peak + one message
Memory and the planner (tests/mpi/check_plan.py; PLAN: a file holding `subdp plan --json`'s output):
  check.py peak-below A B CATEGORY          B's last-step peak bytes of CATEGORY below A's
  check.py comm-buffer SMALL BIG CAP        SMALL's last-step comm peak is CAP bytes, BIG's above it
  check.py sharded PLAIN SHARDED PLAN RANK REGIME TAG SHARD ZERO1
                                            ZeRO-1 / ZeRO-2 / FSDP against the unsharded run (test_zero.sh)
  check.py plan-field PLAN KEY.KEY...       prints one value (JSON for lists and objects)
  check.py plan-total PLAN ROW              prints ROW's total bytes (ROW as for planned-peaks)
  check.py plan-peak PLAN [GiB]             largest per-rank total (subnetwork or baseline rows, else plain DP)
  check.py one-plan PLAN W                  PLAN is one plan object, for world W
  check.py planned-peaks PLAN ROW METRICS TOL [CATEGORY]
                                            ROW's predicted bytes per category (ROW: dp, baseline or a
                                            subnetwork index; CATEGORY: that one only) equal the last
                                            step's peaks within TOL (relative, and 4096 bytes; 0: exactly)
  check.py budget-fits PLAN BUDGET NAMES    --budget's combinations: all fit, smallest first, the
                                            expected ones listed, DP not; writes "name bytes" lines to NAMES
Exits 1 with a message on the first violation.
"""
import glob, json, math, os, sys
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_reader import read_numpy  # noqa: E402


CATEGORIES = ["params", "grads", "optimizer", "activations", "workspace", "comm"]


def records(path):
    """Every record of a metrics file, in file order."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def step_records(path):
    """The per-step records (no "event" key)."""
    return [r for r in records(path) if "event" not in r]


def events(path, event):
    """The records of one event ("eval", "final"), in file order."""
    return [r for r in records(path) if r.get("event") == event]


def losses(path):
    return [r["loss"] for r in step_records(path)]


def last_peaks(path):
    rows = step_records(path)
    if not rows:
        fail(f"{path} has no steps")
    return rows[-1]["mem_peak"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def same_losses(a, b):
    la, lb = losses(a), losses(b)
    if len(la) != len(lb) or not la:
        fail(f"{a} has {len(la)} steps, {b} has {len(lb)}")
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            fail(f"step {i + 1}: loss {x!r} != {y!r}")
    print(f"ok: {len(la)} losses bit-identical")


def close_losses(a, b, tol):
    la, lb = losses(a), losses(b)
    if len(la) != len(lb) or not la:
        fail(f"{a} has {len(la)} steps, {b} has {len(lb)}")
    worst = 0.0
    for i, (x, y) in enumerate(zip(la, lb)):
        err = abs(x - y) / max(abs(y), 1e-6)
        worst = max(worst, err)
        if not err <= tol:  # NaN fails too
            fail(f"step {i + 1}: loss {x!r} vs {y!r} (relative error {err:.3g} > {tol})")
    print(f"ok: {len(la)} losses within {tol} (largest relative error {worst:.3g})")


def same_tail(full, resumed):
    def by_step(path):
        return {r["step"]: r["loss"] for r in step_records(path)}
    a, b = by_step(full), by_step(resumed)
    if not b:
        fail(f"{resumed} has no steps")
    for step, loss in sorted(b.items()):
        if step not in a or a[step] != loss:
            fail(f"step {step}: resumed loss {loss!r}, uninterrupted {a.get(step)!r}")
    print(f"ok: steps {min(b)}..{max(b)} after resume bit-identical")


def mean_losses(single, tol, ranks):
    ls = losses(single)
    per_rank = [losses(r) for r in ranks]
    for i, x in enumerate(ls):
        m = sum(r[i] for r in per_rank) / len(per_rank)
        if abs(m - x) > tol * max(abs(x), 1e-6):
            fail(f"step {i + 1}: single-process loss {x} vs mean over ranks {m}")
    print(f"ok: {len(ls)} steps agree within {tol}")


def same_named_tensors(a, b):
    """The tensors of safetensors files A and B ({name: array} each), which must hold the same names."""
    ta, tb = read_numpy(a), read_numpy(b)
    if set(ta) != set(tb):
        fail(f"tensor names differ: {sorted(set(ta) ^ set(tb))[:5]}")
    return ta, tb


def tensors_close(a, b, tol):
    ta, tb = same_named_tensors(a, b)
    for k in ta:
        x, y = ta[k].astype(np.float64), tb[k].astype(np.float64)
        if tol == 0:
            if not np.array_equal(ta[k].view(np.uint32), tb[k].view(np.uint32)):
                fail(f"{k} differs (max abs {np.max(np.abs(x - y))})")
        else:
            err = np.max(np.abs(x - y)) / max(np.max(np.abs(x)), 1e-12)
            if not err <= tol:  # a NaN anywhere fails too
                fail(f"{k}: relative error {err} > {tol}")
    print(f"ok: {len(ta)} tensors {'bit-identical' if tol == 0 else f'within {tol}'}")


def updates_close(init, a, b, tol):
    """Each tensor's update from INIT: A's within TOL of B's, row by row (the first axis, so a
    q row is measured against q rows' updates, not the v rows' larger ones), relative to the
    row's largest element of B's update."""
    t0, ta = same_named_tensors(init, a)
    _, tb = same_named_tensors(init, b)
    worst = 0.0
    for k in t0:
        ua = ta[k].astype(np.float64) - t0[k].astype(np.float64)
        ub = tb[k].astype(np.float64) - t0[k].astype(np.float64)
        rows = ua.shape[0] if ua.ndim >= 2 else 1
        ua, ub = ua.reshape(rows, -1), ub.reshape(rows, -1)
        err = np.max(np.max(np.abs(ua - ub), axis=1) / np.maximum(np.max(np.abs(ub), axis=1), 1e-30))
        if not err <= tol:  # a NaN anywhere fails too
            fail(f"{k}: update relative error {err} > {tol} in a row (largest update {np.max(np.abs(ub))})")
        worst = max(worst, err)
    print(f"ok: {len(t0)} tensors' updates within {tol} row by row (largest relative error {worst:.3g})")


def model_distance(a, b, expected, tol):
    ta, tb = same_named_tensors(a, b)
    d = float(np.sqrt(sum(np.sum((ta[k].astype(np.float64) - tb[k].astype(np.float64)) ** 2) for k in ta)))
    if abs(d - expected) > tol * expected:
        fail(f"the models are {d} apart, expected {expected} (relative tolerance {tol})")
    print(f"ok: the models are {d} apart (expected {expected})")


def rank_dumps(d):
    files = sorted(glob.glob(f"{d}/rank*.safetensors"))
    if len(files) < 2:
        fail(f"expected rank dumps in {d}, found {files}")
    return files, [read_numpy(f) for f in files]


def holders_identical(d, require_all=False):
    files, dumps = rank_dumps(d)
    shared = 0
    names = sorted(set().union(*dumps))
    for name in names:
        # A rank that lacks a tensor (a block it dropped under forward masking) holds none of it.
        size = next(t[name].size for t in dumps if name in t)
        stack = np.stack([t[name].reshape(-1) if name in t else np.full(size, np.nan, np.float32) for t in dumps])
        held = ~np.isnan(stack)
        if require_all and not held.all():
            fail(f"{name}: some rank lacks values")
        ref_rank = np.argmax(held, axis=0)
        ref = stack[ref_rank, np.arange(stack.shape[1])]
        same = (stack.view(np.uint32) == ref.view(np.uint32)[None, :]) | ~held
        if not same.all():
            r, i = np.argwhere(~same)[0]
            fail(f"{name}[{i}]: rank {r} holds {stack[r, i]!r}, another holder {ref[i]!r}")
        shared += int((held.sum(axis=0) > 1).sum())
    if shared == 0:
        fail("no value is held by two ranks: the check compared nothing")
    print(f"ok: {shared} values held by several ranks, all bit-identical")


def bytes_per_step(path, expected, key="bytes_allreduced"):
    rows = step_records(path)
    if not rows:
        fail(f"{path} has no steps")
    for r in rows:
        if r[key] != expected:
            fail(f"step {r['step']}: {key} = {r[key]}, analytical count {expected}")
    print(f"ok: {len(rows)} steps at {expected} bytes ({key})")


def same_bytes(a, b):
    ra, rb = step_records(a), step_records(b)
    if not ra or len(ra) != len(rb):
        fail(f"{a} and {b}: {len(ra)} and {len(rb)} steps")
    for x, y in zip(ra, rb):
        for key in ("bytes_allreduced", "bytes_broadcast"):
            if x.get(key) != y.get(key):
                fail(f"step {x['step']}: {key} {x.get(key)} in {a}, {y.get(key)} in {b}")
    print(f"ok: {len(ra)} steps, the same bytes all-reduced and broadcast")


def phases(path):
    """Every step's phases_s (prepare, forward, backward) are finite and >= 0, forward and
    backward > 0, and together within the step's step_time_s; every step after the first has
    the previous step's previous_phases_s (check, reduce, update, publish), finite and >= 0."""
    rows = step_records(path)
    if len(rows) < 2:
        fail(f"{path}: {len(rows)} steps, need 2")
    for i, r in enumerate(rows):
        ph, prev = r.get("phases_s"), r.get("previous_phases_s")
        want = {"prepare", "forward", "backward"}
        if not ph or set(ph) != want or not all(math.isfinite(v) and v >= 0 for v in ph.values()):
            fail(f"{path} step {r['step']}: phases_s {ph}, expected finite seconds for {sorted(want)}")
        if ph["forward"] <= 0 or ph["backward"] <= 0:
            fail(f"{path} step {r['step']}: phases_s {ph}: forward and backward take time")
        if sum(ph.values()) > r["step_time_s"] + 1e-3:
            fail(f"{path} step {r['step']}: phases_s {ph} add up to more than step_time_s {r['step_time_s']}")
        want = {"check", "reduce", "update", "publish"}
        if i == 0 and prev is not None:
            fail(f"{path}: the first step has previous_phases_s {prev}")
        if i > 0 and (not prev or set(prev) != want or not all(math.isfinite(v) and v >= 0 for v in prev.values())):
            fail(f"{path} step {r['step']}: previous_phases_s {prev}, expected finite seconds for {sorted(want)}")
    print(f"ok: {path}: {len(rows)} steps with their phases")


def same_peaks(a, b):
    pa, pb = last_peaks(a), last_peaks(b)
    if not pa:
        fail(f"{a}: mem_peak is empty")
    for cat in sorted(set(pa) | set(pb)):
        if pa.get(cat) != pb.get(cat):
            fail(f"peak bytes of {cat}: {pa.get(cat)} in {a}, {pb.get(cat)} in {b}")
    print(f"ok: peak bytes equal in {len(pa)} categories")


def finite_tensors(paths):
    for path in paths:
        for name, a in read_numpy(path).items():
            if not np.isfinite(a).all():
                fail(f"{path}: {name} holds a non-finite value")
    print(f"ok: {len(paths)} file(s) finite")


def same_evaluations(a, b):
    """Eval records equal in every key; the final records' step, train_loss, test_loss and
    test_acc equal (peak bytes and times may differ). Bit for bit: JSON keeps every digit."""
    ea, eb = events(a, "eval"), events(b, "eval")
    if ea != eb:
        fail(f"eval records differ: {ea} in {a}, {eb} in {b}")
    keys = ("step", "train_loss", "test_loss", "test_acc")
    fa, fb = ([{k: r[k] for k in keys} for r in events(p, "final")] for p in (a, b))
    if len(fa) != 1 or fa != fb:
        fail(f"final records differ (or not one each): {fa} in {a}, {fb} in {b}")
    print(f"ok: {len(ea)} eval records and the final record identical: {fa[0]}")


def close_final(a, b, tol):
    """The final records' test_loss within tol (relative to b's): a device run (a) against the CPU's (b)."""
    fa, fb = events(a, "final"), events(b, "final")
    if len(fa) != 1 or len(fb) != 1:
        fail(f"{len(fa)} final records in {a}, {len(fb)} in {b}: expected one each")
    x, y = fa[0]["test_loss"], fb[0]["test_loss"]
    if x is None or y is None or not abs(x - y) <= tol * abs(y):
        fail(f"evaluation: test_loss {x} in {a}, {y} in {b} (tolerance {tol} relative)")
    print(f"ok: final test_loss {x!r} and {y!r} within {tol}")


def positive_event(path, event, keys):
    found = events(path, event)
    if not found:
        fail(f"{path}: no {event} record")
    for k in keys:
        k, _, want = k.partition("=")
        v = found[-1].get(k)
        if want and v != json.loads(want):
            fail(f"{path}: the last {event} record's {k} = {v}, expected {want}")
        if v is None or not math.isfinite(v) or not v > 0:  # null: NaN
            fail(f"{path}: the last {event} record's {k} = {v}, expected a finite positive number")
    print(f"ok: {event} " + ", ".join(f"{k} {found[-1][k.partition('=')[0]]:.6g}" for k in keys))


def skipped_final(path, step):
    final = events(path, "final")
    if len(final) != 1:
        fail(f"{path}: {len(final)} final records, expected 1")
    f = final[0]
    # train_loss is the last batch's: a skipped batch's is NaN, which JSON writes as null.
    if f["step"] != step or f["train_loss"] is not None or not f["skipped_steps"] >= 1:
        fail(f"{path}: final record {f}: expected step {step}, train_loss null (NaN), skipped_steps >= 1")
    print(f"ok: final record at step {step}, {f['skipped_steps']} step(s) skipped")


def alignment(path, regime, what):
    probes = [r["alignment"] for r in step_records(path) if "alignment" in r]
    if len(probes) != 2:
        fail(f"{what}: {len(probes)} alignment probes in 4 steps, expected 2 (steps 2 and 4)")
    if not {k for p in probes for k in p if k != "dense"}:
        fail(f"{what}: no unit kind measured: {probes}")
    for p in probes:
        for kind, c in p.items():
            if regime == "backward" and abs(c - 1) > 1e-6:
                fail(f"{what}: backward masking's {kind} alignment {c} != 1")
            if regime == "forward" and kind != "dense" and not c < 0.999:
                fail(f"{what}: forward masking's {kind} alignment {c} is not below 1")
    print(f"ok: {what}: " + ", ".join(f"{k} {v:.4f}" for k, v in probes[-1].items()) + "; training unchanged")


def redeals(tag, paths):
    deals = [[r["redeal"] for r in step_records(p) if "redeal" in r] for p in paths]
    if not all(deals) or len({len(d) for d in deals}) != 1:
        fail(f"{tag}: re-deal records missing on some rank: {[len(d) for d in deals]}")
    bucket = 25 * 1048576  # parallel.bucket_mb's default
    for i in range(len(deals[0])):
        # Holders of a bigger subnetwork may come to a rank: the bound is the largest rank's.
        largest = max(d[i]["training_peak_bytes"] for d in deals)
        for r, d in enumerate(deals):
            d = d[i]
            if d["unchanged"] or d["checksum_before"] != d["checksum_after"] or d["bytes_moved"] <= 0:
                fail(f"{tag} rank {r}: re-deal {d}")
            if d["peak_bytes"] > largest + bucket:
                fail(f"{tag} rank {r}: re-deal peak {d['peak_bytes']} > largest training peak {largest} + one message")
    d = deals[0][0]
    print(f"ok: {tag}: {len(deals[0])} re-deal(s) on {len(paths)} ranks, checksums equal, rank 0 peak {d['peak_bytes']} "
          f"<= largest training peak {max(x[0]['training_peak_bytes'] for x in deals)}, {d['bytes_moved']} bytes moved")


COMMANDS = {
    "same-losses": lambda a: same_losses(*a),
    "close-losses": lambda a: close_losses(a[0], a[1], float(a[2])),
    "same-tail": lambda a: same_tail(*a),
    "mean-losses": lambda a: mean_losses(a[0], float(a[1]), a[2:]),
    "tensors-close": lambda a: tensors_close(a[0], a[1], float(a[2])),
    "updates-close": lambda a: updates_close(a[0], a[1], a[2], float(a[3])),
    "holders-identical": lambda a: holders_identical(a[0]),
    "all-identical": lambda a: holders_identical(a[0], require_all=True),
    "bytes-per-step": lambda a: bytes_per_step(a[0], int(a[1]), *a[2:3]),
    "model-distance": lambda a: model_distance(a[0], a[1], float(a[2]), float(a[3])),
    "same-peaks": lambda a: same_peaks(*a),
    "same-bytes": lambda a: same_bytes(*a),
    "phases": lambda a: phases(a[0]),
    "finite-tensors": lambda a: finite_tensors(a),
    "same-evaluations": lambda a: same_evaluations(*a),
    "close-final": lambda a: close_final(a[0], a[1], float(a[2])),
    "positive-event": lambda a: positive_event(a[0], a[1], a[2:]),
    "skipped-final": lambda a: skipped_final(a[0], int(a[1])),
    "alignment": lambda a: alignment(*a),
    "redeals": lambda a: redeals(a[0], a[1:]),
}

if __name__ == "__main__":
    from check_plan import COMMANDS as PLAN_COMMANDS  # the plan and memory commands
    COMMANDS.update(PLAN_COMMANDS)
    cmd, args = sys.argv[1], sys.argv[2:]
    COMMANDS.get(cmd, lambda _: fail(f"unknown command {cmd}"))(args)
