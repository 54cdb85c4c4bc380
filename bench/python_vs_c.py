#!/usr/bin/env python3
"""Python's rkv beside the C API, in one session against one kvd: ops/s of
GET and SET for small values and MB/s for 64 MiB ones, and the ratio
Python / C (issue 19: Python should stay within 0.8 of C for large values).

    scripts/softroce run bench/python_vs_c.py [--build BUILD] [--ops N] [--big-ops N] [--csv FILE]

Needs SOFTROCE_ADDR (scripts/softroce provides it). The C side is
BUILD/bench/capi_ops (kv_set_bin / kv_get_bin + kv_release); the Python
side does the same loop with Client.set / Client.get (the memoryview
released each time). A sanitized build's extension needs the ASan runtime
first in the process: this script re-executes itself in that build's
tests/python/python_sanitized (the interpreter embedded in a sanitized
program) when it finds one. Speed is
only reported, never checked: run it on a quiet machine (bench/run's rule).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def use_sanitized_interpreter(build: Path) -> None:
    ext = next((build / "python" / "rkv").glob("_rkv*.so"), None)
    if ext is None:
        sys.exit(f"python_vs_c: no Python extension in {build}/python/rkv (configure with -Dpython=enabled)")
    libs = subprocess.run(["ldd", str(ext)], capture_output=True, text=True).stdout
    if "libasan" not in libs:
        return
    exe = build / "tests" / "python" / "python_sanitized"
    if Path(sys.executable).resolve() == exe.resolve():
        return
    if not exe.exists():
        sys.exit(f"python_vs_c: {ext} is sanitized and {exe} is missing (build with -Dtests=enabled)")
    os.execv(str(exe), [str(exe), *sys.argv])


def start_kvd(build: Path, addr: str) -> tuple[subprocess.Popen[bytes], int]:
    p = subprocess.Popen([str(build / "apps" / "kvd"), "--bind", addr, "--port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert p.stdout is not None
    deadline = time.monotonic() + 120
    buf = b""
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 1)
        if not r:
            continue
        c = os.read(p.stdout.fileno(), 1)
        if not c:
            break
        buf += c
        m = re.search(rb"kvd: listening on [^\n]*:(\d+)\n", buf)
        if m:
            # Drain the rest so kvd never blocks on the pipe.
            subprocess.Popen(["cat"], stdin=p.stdout, stdout=subprocess.DEVNULL)
            return p, int(m.group(1))
    p.kill()
    sys.exit("python_vs_c: kvd did not start")


def keys_for(size: int) -> int:
    """Keys the loop cycles over: 16, or as many as keep each side's values
    within 128 MiB (kvd's default memory limit is a fraction of the guest's)."""
    return max(1, min(16, (128 << 20) // max(size, 1)))


def c_side(build: Path, server: str, size: int, n: int) -> dict[str, float]:
    r = subprocess.run([str(build / "bench" / "capi_ops"), server, str(size), str(n), str(keys_for(size))],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"python_vs_c: capi_ops {size} B failed (status {r.returncode}): {r.stderr.strip()}")
    out = r.stdout
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", out)}


def py_side(server: str, size: int, n: int) -> dict[str, float]:
    import rkv  # after the preload

    value = bytes((i * 31) & 0xFF for i in range(min(size, 1 << 16))) * (size // (1 << 16) or 1)
    value = value[:size] if size < (1 << 16) else value
    keys = keys_for(size)
    with rkv.Client(server) as c:
        t = time.perf_counter()
        for i in range(n):
            c.set(f"py-{i % keys}", value)
        set_s = time.perf_counter() - t
        t = time.perf_counter()
        for i in range(n):
            v = c.get(f"py-{i % keys}")
            assert v is not None and v.nbytes == size
            v.release()
        get_s = time.perf_counter() - t
    return {"set_ops_s": n / set_s, "get_ops_s": n / get_s,
            "set_mb_s": n * size / set_s / 1e6, "get_mb_s": n * size / get_s / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"), help="the meson build directory (default: build)")
    ap.add_argument("--ops", type=int, default=20000, help="operations per small size")
    ap.add_argument("--big-ops", type=int, default=20, help="operations of 64 MiB")
    ap.add_argument("--csv", help="also write the rows here")
    args = ap.parse_args()
    build = Path(args.build).resolve()
    use_sanitized_interpreter(build)
    sys.path.insert(0, str(build / "python"))
    addr = os.environ.get("SOFTROCE_ADDR")
    if not addr:
        sys.exit("python_vs_c: SOFTROCE_ADDR is not set (run it through scripts/softroce run)")
    kvd, port = start_kvd(build, addr)
    server = f"{addr}:{port}"
    rows = []
    try:
        for size, n in ((32, args.ops), (4096, args.ops), (64 << 20, args.big_ops)):
            c = c_side(build, server, size, n)
            p = py_side(server, size, n)
            for what in ("set", "get"):
                unit = "mb_s" if size >= (1 << 20) else "ops_s"
                key = f"{what}_{unit}"
                rows.append({"size": size, "op": what, "unit": unit.replace("_", "/"), "c": c[key], "python": p[key],
                             "ratio": p[key] / c[key] if c[key] else 0.0})
    finally:
        kvd.terminate()
        kvd.wait()
    print(f"{'size':>10} {'op':>4} {'unit':>6} {'C API':>12} {'Python':>12} {'Py/C':>6}")
    for r in rows:
        print(f"{r['size']:>10} {r['op']:>4} {r['unit']:>6} {r['c']:>12.1f} {r['python']:>12.1f} {r['ratio']:>6.2f}")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
