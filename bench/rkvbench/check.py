"""--check: are the outputs well formed, and did every KV measurement run? Never looks at a speed."""

import csv
import os
import re

from .common import HEADERS, ONESIDED_FABRIC_OP, PLOTS, SUMMARY_TABLE_HEADER


# ------------------------------------------------------------------ --check
def is_kv_row(name, row):
    """True for rows that measure kvd/kvload (or bench/onesided, bench/durability), not a reference tool."""
    if name in ("sweep.csv", "scaling.csv", "shards.csv", "durability.csv", "idle.csv"):
        return True
    if name == "onesided.csv":
        return row.get("op") != ONESIDED_FABRIC_OP
    if name == "busypoll.csv":
        return row.get("op") != "pingpong"  # every polling mode and the idle rows; not ibv_rc_pingpong
    if name == "latency.csv":
        return row.get("op") in ("get", "set")
    if name == "tcp.csv":
        return row.get("system") == "rdmakv"
    return False


def _at_least_one(text):
    """Whether a CSV field is a number >= 1 (every one-sided GET READs at least its neighborhood)."""
    try:
        return float(text) >= 1.0
    except (TypeError, ValueError):
        return False


def check_outputs(d):
    """Problems with the outputs in d (empty list: well formed). Never looks at a speed."""
    problems = []
    for name, header in HEADERS.items():
        path = os.path.join(d, name)
        if not os.path.isfile(path):
            problems.append(f"{name}: missing")
            continue
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        if not rows or rows[0] != header:
            problems.append(f"{name}: header is {rows[0] if rows else 'empty'}, expected {header}")
            continue
        if len(rows) < 2:
            problems.append(f"{name}: no data rows")
        for i, r in enumerate(rows[1:], 2):
            if len(r) != len(header):
                problems.append(f"{name}:{i}: {len(r)} fields, expected {len(header)}")
            elif not r[-1]:
                problems.append(f"{name}:{i}: empty status")
        if name == "sweep.csv" and len(rows) > 1 and not any(r[-1] == "ok" for r in rows[1:]):
            problems.append("sweep.csv: no point measured successfully (kvd/kvload broken?)")
        # A KV measurement (not a reference tool's) that failed: the store did not do what
        # the experiment asked. "n/a: not supported by this build" is not a failure.
        for i, r in enumerate(rows[1:], 2):
            row = dict(zip(header, r))
            if row.get("status", "").startswith("failed") and is_kv_row(name, row):
                problems.append(f"{name}:{i}: a KV measurement failed: {row['status'][:200]}")
            if (name == "onesided.csv" and row.get("op") == "GET (RDMA READ)" and row.get("depth") == "32"
                    and row.get("status") == "ok" and not _at_least_one(row.get("reads_per_get"))):
                problems.append(f"{name}:{i}: no RDMA READs per one-sided GET counted ({row.get('reads_per_get')!r})")
    sp = os.path.join(d, "summary.md")
    if not os.path.isfile(sp):
        problems.append("summary.md: missing")
    else:
        with open(sp) as f:
            text = f.read()
        if "**Environment:** device " not in text:
            problems.append("summary.md: no environment line")
        if SUMMARY_TABLE_HEADER not in text:
            problems.append("summary.md: no ratio table")
        for section in ("## Targets (issue 12)", "## Targets (issue 31)"):
            if section not in text:
                problems.append(f"summary.md: no '{section}' section")
        for exp in ("sweep", "latency", "polling", "scaling", "shards", "one-sided", "durability", "tcp"):
            if not re.search(rf"^\| {exp} \|", text, re.M):
                problems.append(f"summary.md: no '{exp}' row in the ratio table")
    for p in PLOTS:
        path = os.path.join(d, p)
        try:
            with open(path, "rb") as f:
                head = f.read(8)
            size = os.path.getsize(path)
        except OSError:
            problems.append(f"{p}: missing")
            continue
        if head != b"\x89PNG\r\n\x1a\n" or size < 2000:
            problems.append(f"{p}: not a PNG or nearly empty ({size} bytes)")
    return problems
