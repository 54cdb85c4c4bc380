#!/usr/bin/env python3
"""rdma_filters (unit suite): every test of the rdma_tests program is run by
exactly one meson test, and every meson test of it runs something.

  check_filters.py BUILD_DIR RDMA_TESTS

The meson tests and their --gtest_filter come from meson's own list of the
build's tests (BUILD_DIR/meson-info/intro-tests.json), the program's tests
from `RDMA_TESTS --gtest_list_tests`; the filter is matched as gtest does
(':'-separated patterns with * and ?, negatives after the first '-').
"""
from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys


def gtest_names(program: str) -> list[str]:
    out = subprocess.run([program, "--gtest_list_tests"], check=True, capture_output=True, text=True).stdout
    names, suite = [], ""
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()  # "Suite." or "Prefix/Suite."
        else:
            names.append(suite + line.split("#")[0].strip())
    return names


def matches(name: str, gtest_filter: str) -> bool:
    positive, _, negative = gtest_filter.partition("-")
    pos = [p for p in positive.split(":") if p] or ["*"]
    neg = [p for p in negative.split(":") if p]
    return any(fnmatch.fnmatchcase(name, p) for p in pos) and not any(fnmatch.fnmatchcase(name, p) for p in neg)


def main() -> int:
    build, program = sys.argv[1], os.path.realpath(sys.argv[2])
    with open(os.path.join(build, "meson-info", "intro-tests.json")) as f:
        tests = json.load(f)
    filters = {}
    for t in tests:
        cmd = t["cmd"]
        if any(c.endswith("check_filters.py") for c in cmd):
            continue  # this check itself
        if any(os.path.realpath(c) == program for c in cmd if os.path.isabs(c)):
            given = [c.split("=", 1)[1] for c in cmd if c.startswith("--gtest_filter=")]
            filters[t["name"]] = given[0] if given else "*"
    names = gtest_names(program)
    problems = []
    for name in names:
        by = [t for t, f in filters.items() if matches(name, f)]
        if len(by) != 1:
            problems.append(f"{name}: run by {len(by)} tests ({', '.join(sorted(by)) or 'none'}), not 1")
    for t, f in sorted(filters.items()):
        if not any(matches(n, f) for n in names):
            problems.append(f"test {t}: --gtest_filter={f} runs nothing")
    for p in problems:
        print("rdma_filters:", p)
    print(f"rdma_filters: {len(names)} tests of {os.path.basename(program)} over {len(filters)} meson tests, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
