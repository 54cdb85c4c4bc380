#!/usr/bin/env bash
# Runs in the Soft-RoCE environment (scripts/softroce exec; tests/install/run.sh):
#   guest.sh KVD LIBDIR OUT PROGRAM...
# starts the installed KVD on $SOFTROCE_ADDR, runs each OUT/PROGRAM against it
# (outside_shared, outside_static), once with RKV_GET_MODE=rpc and once with
# read, with LD_LIBRARY_PATH=LIBDIR (the installed
# librkv.so, nothing from the build tree), stops kvd with SIGTERM and checks
# it exited 0. Outputs go to OUT (the guest's /tmp is its own).
set -uo pipefail
KVD=$1 LIBDIR=$2 OUT=$3
shift 3
[ -n "${SOFTROCE_ADDR:-}" ] || { echo "guest.sh: no SOFTROCE_ADDR: not in the Soft-RoCE environment" >&2; exit 1; }
fails=0
"$KVD" --bind "$SOFTROCE_ADDR" --port 0 >"$OUT/kvd.out" 2>"$OUT/kvd.err" &
kvd=$!
port=
for _ in $(seq 1 600); do   # an ASan kvd starts in seconds in a TCG guest
  port=$(sed -n 's/^kvd: listening on .*:\([0-9][0-9]*\)$/\1/p' "$OUT/kvd.out")
  [ -n "$port" ] && break
  kill -0 "$kvd" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "guest.sh: the installed kvd did not start:" >&2; cat "$OUT/kvd.out" "$OUT/kvd.err" >&2
  kill -KILL "$kvd" 2>/dev/null; exit 1
fi
echo "guest.sh: installed kvd listening on $SOFTROCE_ADDR:$port"
for prog in "$@"; do
  for mode in rpc read; do   # GETs by message, and one-sided (RKV_GET_MODE)
    if RKV_GET_MODE=$mode LD_LIBRARY_PATH=$LIBDIR timeout 300 "$OUT/$prog" "$SOFTROCE_ADDR:$port" "$prog-$mode"; then
      echo "guest.sh: $prog (RKV_GET_MODE=$mode): ok"
    else
      echo "guest.sh: $prog (RKV_GET_MODE=$mode): FAILED (exit $?)" >&2; fails=$((fails + 1))
    fi
  done
done
kill -TERM "$kvd"
wait "$kvd"; rc=$?
if [ "$rc" != 0 ]; then
  echo "guest.sh: kvd exited $rc:" >&2; tail -n 30 "$OUT/kvd.err" >&2; fails=$((fails + 1))
fi
exit $((fails > 0))
