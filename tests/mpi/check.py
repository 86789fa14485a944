#!/usr/bin/env python3
"""Checks for the MPI invariant tests: reads metrics JSON lines and safetensors files.

Usage:
  check.py same-losses A B                  loss sequences bit-identical
  check.py close-losses A B TOL             loss sequences of equal length, each step within rel tol
  check.py same-tail FULL RESUMED           RESUMED's steps have bit-identical losses to FULL's same steps
  check.py mean-losses SINGLE TOL R0 R1 ... mean over ranks equals the single process (rel tol)
  check.py tensors-close A B TOL            every tensor of two safetensors files within rel tol (0 = bit-identical)
  check.py holders-identical DIR            rank*.safetensors: wherever two ranks hold a value it is bit-identical
  check.py all-identical DIR                rank*.safetensors: every rank holds every value, all bit-identical
  check.py bytes-per-step METRICS EXPECTED [KEY]
                                            every step's KEY (default bytes_allreduced) is exactly EXPECTED
  check.py same-peaks A B                   the last step's peak bytes equal in every memory category
  check.py model-distance A B EXPECTED TOL  Euclidean distance over every tensor of A and B equals EXPECTED (rel tol)
Exits 1 with a message on the first violation.
"""
import glob, json, os, sys
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_reader import read_numpy  # noqa: E402


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()]


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
        with open(path) as f:
            return {r["step"]: r["loss"] for r in map(json.loads, filter(str.strip, f))}
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
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if not rows:
        fail(f"{path} has no steps")
    for r in rows:
        if r[key] != expected:
            fail(f"step {r['step']}: {key} = {r[key]}, analytical count {expected}")
    print(f"ok: {len(rows)} steps at {expected} bytes ({key})")


def same_peaks(a, b):
    def last_peaks(path):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        if not rows:
            fail(f"{path} has no steps")
        return rows[-1]["mem_peak"]
    pa, pb = last_peaks(a), last_peaks(b)
    if not pa:
        fail(f"{a}: mem_peak is empty")
    for cat in sorted(set(pa) | set(pb)):
        if pa.get(cat) != pb.get(cat):
            fail(f"peak bytes of {cat}: {pa.get(cat)} in {a}, {pb.get(cat)} in {b}")
    print(f"ok: peak bytes equal in {len(pa)} categories")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "same-losses":
        same_losses(*args)
    elif cmd == "close-losses":
        close_losses(args[0], args[1], float(args[2]))
    elif cmd == "same-tail":
        same_tail(*args)
    elif cmd == "mean-losses":
        mean_losses(args[0], float(args[1]), args[2:])
    elif cmd == "tensors-close":
        tensors_close(args[0], args[1], float(args[2]))
    elif cmd == "holders-identical":
        holders_identical(args[0])
    elif cmd == "all-identical":
        holders_identical(args[0], require_all=True)
    elif cmd == "bytes-per-step":
        bytes_per_step(args[0], int(args[1]), *args[2:3])
    elif cmd == "model-distance":
        model_distance(args[0], args[1], float(args[2]), float(args[3]))
    elif cmd == "same-peaks":
        same_peaks(*args)
    else:
        fail(f"unknown command {cmd}")
