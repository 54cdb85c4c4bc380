#!/usr/bin/env bash
# python (rdma suite): the Python package's pytest suite (tests/python) in
# the Soft-RoCE environment, against kvd children (conftest.py).
#
#   tests/python/run.sh PYTHON PKG_DIR KVD [PYTEST ARGS...]   (meson test `python`, via scripts/softroce exec)
#
# PYTHON: the interpreter the extension was built for; PKG_DIR: the
# directory holding the assembled package (BUILD/python); KVD: the kvd to run.
#
# ASan: a sanitized build (b_sanitize, as scripts/test's build-test) makes an
# instrumented extension, and ASan must be the first library of the process;
# python3 is not instrumented, so the runtime is preloaded (LD_PRELOAD of the
# compiler's libasan, plus libubsan) and leak detection is off (the
# interpreter keeps its objects at exit). A build without sanitizers needs
# none of it: `import rkv` works in any python3.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: $0 PYTHON PKG_DIR KVD [PYTEST ARGS...]" >&2; exit 2; }
PY=$1 PKG=$2 KVD=$3
shift 3
HERE=$(cd "$(dirname "$0")" && pwd -P)
ext=$(ls "$PKG"/rkv/_rkv*.so 2>/dev/null | head -n1)
[ -n "$ext" ] || { echo "python: no extension in $PKG/rkv" >&2; exit 1; }
if ldd "$ext" | grep -q libasan; then
  preload=$(${CC:-cc} -print-file-name=libasan.so)
  if ldd "$ext" | grep -q libubsan; then preload="$preload $(${CC:-cc} -print-file-name=libubsan.so)"; fi
  export LD_PRELOAD="$preload${LD_PRELOAD:+ $LD_PRELOAD}"
  # verify_asan_link_order=0: ASan's check that its runtime is the process's
  # first library fails now and then for a preloaded runtime (seen as an
  # exit 1 during pytest's collection, its message swallowed by pytest's fd
  # capture; about 1 run in 6 in the guest); the preload makes the order right.
  export ASAN_OPTIONS="detect_leaks=0:verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fi
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 RKV_KVD=$KVD
# Now and then (about 1 run in 5 in the guest, with the preload and
# verify_asan_link_order=0) the ASan runtime refuses to start ("does not
# come first in initial library list") and the interpreter exits 1 while
# pytest is still collecting, before any test ran. Such a run is no verdict:
# it is started again, at most twice. --capture=sys leaves native writes to
# fd 2 (ASan's and UBSan's reports) in the log instead of pytest's capture.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for attempt in 1 2 3; do
  "$PY" -m pytest -p no:cacheprovider --capture=sys -v -rA "$HERE" "$@" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  grep -q "^collected \|collected [0-9]* item" "$out" && exit "$rc"
  echo "python: the run ended before pytest collected the tests (attempt $attempt); no test ran" >&2
done
exit "$rc"
