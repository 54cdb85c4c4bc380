#!/usr/bin/env bash
# python (rdma suite): the Python package's pytest suite (tests/python) in
# the Soft-RoCE environment, against kvd children (conftest.py).
#
#   tests/python/run.sh PYTHON PKG_DIR KVD [TEST FILE...]   (meson tests `python` and `python_shards`,
#                                                           via scripts/softroce exec; default: every file)
#
# PYTHON: the interpreter the extension was built for; PKG_DIR: the
# directory holding the assembled package (BUILD/python); KVD: the kvd to run.
#
# A sanitized build passes python_sanitized as PYTHON (the interpreter
# embedded in a program linked with the sanitizers; tests/python/meson.build),
# so the extension's ASan runtime is already the process's first library.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: $0 PYTHON PKG_DIR KVD [TEST FILE...]" >&2; exit 2; }
PY=$1 PKG=$2 KVD=$3
shift 3
HERE=$(cd "$(dirname "$0")" && pwd -P)
ext=$(ls "$PKG"/rkv/_rkv*.so 2>/dev/null | head -n1)
[ -n "$ext" ] || { echo "python: no extension in $PKG/rkv" >&2; exit 1; }
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 RKV_KVD=$KVD
# The clients' op timeout is a hang guard here, not a property: a 64 MiB SET
# under ASan in a TCG guest on a loaded host once took over the 30 s default
# (the transfer was only slow; the read-mode run of the same size right after
# passed). Stretched as kDeadlineScale stretches the C++ tests' guards.
export RKV_TIMEOUT_MS=${RKV_TIMEOUT_MS:-120000}
# --capture=sys leaves native writes to fd 2 (ASan's and UBSan's reports) in
# the log instead of pytest's capture.
[ $# -gt 0 ] || set -- "$HERE"
exec "$PY" -m pytest -p no:cacheprovider --capture=sys -v -rA --durations=8 "$@"
