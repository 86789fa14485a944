#!/usr/bin/env python3
"""Packs per-step, per-rank metrics (log.metrics_file JSON lines) of a results folder into one
compressed CSV, so that committed results hold what a reader needs and every figure can
still be re-derived.

  /usr/bin/python3 benchmarks/pack_metrics.py benchmarks/results/gpt_brown_k075 [...]

For each folder: every *.jsonl (and *.jsonl.rankN) below it, at any depth, becomes rows of
FOLDER/steps.csv.gz, one row per (file, step), with columns

  run      the file's folder relative to FOLDER ("." for the folder itself)
  file     the file's name (metrics-2.jsonl, metrics.jsonl.rank1, ...)
  ...      every key of the JSON lines, nested objects flattened as mem_peak.params etc.;
           the step records first, then the eval and final records (their "event" column set)

then the JSON-lines files and the uncompressed FOLDER/steps.csv (compare.py's older copy of
the same rows, told by its run, step and loss columns) are removed. The gzip stream is written
with mtime 0, so packing the same metrics twice gives the same bytes. Rows already in
steps.csv.gz are kept, except those of each file found again (compare.py: every row of a run
folder with files found again, so a run made anew with fewer ranks replaces them all).
Refused, before anything is written, naming the file: a metrics file a live run still holds
(its lock), and a JSON-lines file whose records are not metrics records (a dataset).
read_rows() gives the rows back as dicts of the
original JSON keys; rows_of() one file's step records (or its eval and final records).
"""
import csv
import fcntl
import gzip
import io
import json
import os
import re
import sys

PACKED = "steps.csv.gz"


def _all_records(path):
    """Every whole record of one log.metrics_file, in file order: a line without its newline (a
    run killed while writing it, by an engine older than whole-line writes) is dropped."""
    with open(path) as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1].strip():
        lines = lines[:-1]  # no newline: a half record
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{number}: not a metrics record ({e.msg}): not a file log.metrics_file wrote")
    return records


def check_metrics_file(path, records):
    """Raises ValueError unless every record is a metrics record (a "step", or an "event"): a
    JSON-lines file of another kind (a dataset) would otherwise be packed into one row and
    removed."""
    other = next((i for i, r in enumerate(records, 1) if not isinstance(r, dict) or
                  ("step" not in r and "event" not in r)), None)
    if other is not None:
        raise ValueError(f"{path}: record {other} has neither a step nor an event: not a file log.metrics_file wrote")


def in_use(path):
    """True when a live run holds the file's lock (subdp flocks its metrics file while it writes)."""
    with open(path, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def read_records(path):
    """The step records of one log.metrics_file (those without an "event" key), one per step in
    step order: a step logged twice (an older engine's resume appended after the checkpoint's
    step) keeps its last record."""
    return step_records(_all_records(path))


def read_events(path, event=None):
    """The "eval" and "final" records of one log.metrics_file in file order (only `event`'s when
    given). Values the engine could not write as numbers (NaN) are null: None here."""
    return event_records(_all_records(path), event)


def step_records(records):
    """read_records() of a file's records already read."""
    by_step = {}
    for record in records:
        if "event" not in record:
            by_step[record.get("step")] = record
    return [by_step[k] for k in sorted(by_step, key=lambda s: (s is None, s))]


def event_records(records, event=None):
    """read_events() of a file's records already read."""
    return [r for r in records if "event" in r and (event is None or r["event"] == event)]


def flatten(obj, prefix=""):
    out = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def unflatten(row):
    out = {}
    for k, v in row.items():
        parts = k.split(".")
        d = out
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = v
    return out


def parse_number(text):
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


_cache = {}


def read_rows(folder):
    """Rows of FOLDER/steps.csv.gz as flat dicts (numbers parsed; keys as in the CSV header).
    Raises ValueError for a file without the run and file columns (not written by pack())."""
    path = os.path.join(folder, PACKED)
    if not os.path.exists(path):
        return []
    key = (os.path.abspath(path), os.stat(path).st_mtime_ns)
    if key not in _cache:
        with gzip.open(path, "rt", newline="") as f:
            reader = csv.DictReader(f)
            if not {"run", "file"} <= set(reader.fieldnames or []):
                raise ValueError(f"{path}: no run and file columns: not a file that pack_metrics.py wrote")
            _cache[key] = [{k: (v if k in ("run", "file") else parse_number(v)) for k, v in row.items()}
                           for row in reader]
    return _cache[key]


def rows_of(folder, run, file, events=False):
    """The step records of one packed metrics file, in step order, as log.metrics_file wrote
    them; with events=True its eval and final records instead, in file order (a value the
    engine wrote as null is absent)."""
    rows = [r for r in read_rows(folder) if r["run"] == run and r["file"] == file
            and (r.get("event") is not None) == events]
    return [unflatten({k: v for k, v in r.items() if k not in ("run", "file") and v is not None}) for r in rows]


RUN_METRICS = re.compile(r"metrics-[0-9]+\.jsonl")  # compare.py's per-rank files in its run folders


def metrics_files(folder, runs_only=False):
    """Every *.jsonl (and *.jsonl.rankN) below FOLDER; with runs_only, only compare.py's own:
    metrics-N.jsonl in a run folder (one holding its command.txt)."""
    found = []
    for dirpath, _, files in os.walk(folder):
        if runs_only and "command.txt" not in files:
            continue
        for name in sorted(files):
            if RUN_METRICS.fullmatch(name) if runs_only else name.endswith(".jsonl") or ".jsonl.rank" in name:
                found.append(os.path.join(dirpath, name))
    return sorted(found)


def pack(folder, skip=(), runs_only=False):
    """Packs FOLDER's metrics files into FOLDER/steps.csv.gz; returns the rows added.
    skip: run folders (relative to FOLDER) whose metrics files and packed rows are left as
    they are: runs still training, whose ranks append to those files. runs_only: compare.py's
    files alone (metrics_files), so that no other file under FOLDER is packed and removed.
    Raises ValueError naming a file that is not JSON lines, before anything is written."""
    files = [p for p in metrics_files(folder, runs_only) if os.path.relpath(os.path.dirname(p), folder) not in skip]
    if not files:
        return 0
    live = [p for p in files if in_use(p)]
    if live:
        raise ValueError(f"{live[0]}: a live run is writing it (it holds the file's lock); pack when the run has "
                         "ended, or the records written after the pack would be lost")
    keys = {(os.path.relpath(os.path.dirname(p), folder), os.path.basename(p)) for p in files}
    runs = {run for run, _ in keys}
    # Rows packed before stay, except those made anew: compare.py's run folders are its own, so
    # every row of a run found again goes (a rerun may have fewer ranks); elsewhere only the rows
    # of the files found again (another file packed into the folder earlier stays).
    stale = (lambda r: r["run"] in runs) if runs_only else (lambda r: (r["run"], r["file"]) in keys)
    rows = [{k: ("" if v is None else v) for k, v in r.items()} for r in read_rows(folder) if not stale(r)]
    added = 0
    for path in files:
        run = os.path.relpath(os.path.dirname(path), folder)
        records = _all_records(path)  # read once: checked, then its steps and events
        check_metrics_file(path, records)
        for record in step_records(records) + event_records(records):
            rows.append({"run": run, "file": os.path.basename(path), **flatten(record)})
            added += 1
    columns = ["run", "file"]
    for r in rows:
        columns += [k for k in r if k not in columns]
    text = io.StringIO()
    w = csv.DictWriter(text, fieldnames=columns, restval="", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    tmp = os.path.join(folder, PACKED + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(text.getvalue().encode())
    os.replace(tmp, os.path.join(folder, PACKED))
    for path in files:
        os.remove(path)
    old = os.path.join(folder, "steps.csv")
    if os.path.exists(old) and is_compare_copy(old):
        os.remove(old)
    return added


def is_compare_copy(path):
    """True when FOLDER/steps.csv is compare.py's older uncompressed copy of the packed rows
    (its header has the run, step and loss columns), not a file of the user's."""
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    return {"run", "step", "loss"} <= set(header)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    for folder in argv:
        if not os.path.isdir(folder):
            print(f"pack_metrics.py: {folder}: not a folder", file=sys.stderr)
            return 2
        try:
            print(f"{folder}: {pack(folder)} rows packed into {PACKED}")
        except (ValueError, OSError) as e:  # gzip.BadGzipFile is an OSError
            print(f"pack_metrics.py: {folder}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
